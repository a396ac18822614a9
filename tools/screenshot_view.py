"""Take the screenshots of docs/view.md: each page of ``detfmt view`` in headless Chromium.

    python tools/screenshot_view.py DATASET docs/img    # e.g. coco128 converted to JPEG

Needs selenium and Debian's chromium + chromium-driver (the view-test extra). The PNGs are
reduced to 96 colours so each stays small.
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import threading
import time
from pathlib import Path

from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from detfmt.view import Viewer, make_server

PREDICTIONS = ("predictions", "#/grid", "grid", 760)
PAGES = [("grid", "#/grid", "grid", 760), ("sample", "#/sample/{sample}", "sample-{sample}", 900),
         ("dataset", "#/dataset", "dataset", 1500)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("out", type=Path)
    parser.add_argument("--sample", type=int, default=1)
    parser.add_argument("--width", type=int, default=1100)
    parser.add_argument("--predictions", help="a COCO results file: also shoot the grid, "
                        "worst samples first, with them")
    args = parser.parse_args()
    viewer = Viewer(args.dataset, predictions=args.predictions)
    server = make_server(viewer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 "--force-device-scale-factor=1"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        pages = [PREDICTIONS] if args.predictions else PAGES
        for name, route, ready, height in pages:
            driver.set_window_size(args.width, height)
            driver.get(url + route.format(sample=args.sample))
            if name == "predictions":
                WebDriverWait(driver, 60).until(lambda d: d.execute_script(
                    "return document.body.dataset.ready") == "grid")
                driver.execute_script(
                    "const s = document.getElementById('f-sort'); s.value = 'worst';"
                    "document.body.dataset.ready = ''; s.dispatchEvent(new Event('change'));")
            WebDriverWait(driver, 60).until(lambda d, r=ready: d.execute_script(
                "return document.body.dataset.ready") == r.format(sample=args.sample))
            time.sleep(1.0)  # thumbnails decode after the page says it is drawn
            shot = Image.open(io.BytesIO(driver.get_screenshot_as_png())).convert("RGB")
            path = args.out / f"view_{name}.png"
            shot.quantize(96, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
            print(f"{path}: {path.stat().st_size >> 10} KiB")
    finally:
        driver.quit()
        server.shutdown()
        viewer.close()


if __name__ == "__main__":
    main()
