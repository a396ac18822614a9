"""Fixtures of the viewer tests: datasets, a served viewer, and headless Chromium (Debian's
``chromium`` and ``chromium-driver`` packages, driven by Selenium); browser tests skip when
either is missing."""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import detfmt
from detfmt.view import Viewer, make_server

HOSTILE = "<img src=x onerror=\"document.title='pwned'\">"
GRAY = 128
#: per sample of `boxes_dataset`: (xyxy, class) of each box (images 120 x 160, gray)
BOXES = [
    [([20, 30, 80, 90], 0), ([100, 12, 150, 62], 1)],
    [([10, 10, 70, 50], 2)],
    [],
    [([5, 5, 15, 15], 0), ([40, 40, 140, 110], 0), ([90, 20, 120, 60], 1)],
    [([30, 20, 130, 100], 1)],
    [([60, 50, 100, 90], 2), ([8, 70, 48, 110], 0)],
]


@contextlib.contextmanager
def serving(path: str | Path) -> Iterator[str]:
    """The viewer of ``path`` served on a free loopback port: yields its base URL."""
    viewer = Viewer(path)
    server = make_server(viewer, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        viewer.close()
        thread.join(10)


@pytest.fixture(scope="session")
def boxes_dataset(tmp_path_factory) -> Path:
    """Six gray 120 x 160 images with boxes at known places, a hostile class name, hostile
    file names and card text."""
    samples = []
    for i, boxes in enumerate(BOXES):
        samples.append({
            "image": np.full((120, 160, 3), GRAY, np.uint8),
            "boxes": np.array([b for b, _ in boxes], np.float32).reshape(-1, 4),
            "classes": np.array([c for _, c in boxes], np.int32),
            "file_name": f"<b>img</b>_{i:03d}.png" if i == 1 else f"img_{i:03d}.png",
        })
    path = tmp_path_factory.mktemp("view") / "boxes"
    detfmt.write(samples, path, classes=["cat", "dog", HOSTILE], codec="raw",
                 metadata={"card.description": f"a card with {HOSTILE} in it"}, progress=False)
    return path


@pytest.fixture(scope="session")
def browser():
    """A headless Chromium at device scale 1 (so screenshot pixels are CSS pixels)."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed "
                                    "(pip install 'detfmt[view-test]')")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not binary or not driver_path:
        pytest.skip("Chromium or chromedriver is not installed (apt-get install chromium "
                    "chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000", "--force-device-scale-factor=1",
                 "--hide-scrollbars"):
        options.add_argument(flag)
    from selenium.webdriver.chrome.service import Service

    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def wait_ready(driver, value: str, timeout: float = 20) -> None:
    """Wait until the page says it finished drawing ``value`` (body data-ready)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(
        lambda d: d.execute_script("return document.body.dataset.ready") in (value, "error"))
    state = driver.execute_script("return document.body.dataset.ready")
    error = driver.execute_script("return document.getElementById('error').textContent")
    assert state == value, f"the page failed: {error}"


def open_page(driver, url: str, ready: str) -> None:
    driver.get("about:blank")
    driver.get(url)
    wait_ready(driver, ready)
