"""The demo's augmentation figures are what a user gets (issue 29, item 12): the backend that
ran is named, figures are per image over at least 20 batches, and the torch kernels are
measured beside it. Runs the demo's own python (tools/demo.sh's last heredoc) on the bundled
sample with this interpreter."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "detfmt" / "samples" / "chess"


def demo_python() -> list[str]:
    """The python programs tools/demo.sh feeds to the interpreter (``<<'PY'`` heredocs)."""
    text = (ROOT / "tools" / "demo.sh").read_text(encoding="utf-8")
    return re.findall(r"<<'PY'\n(.*?)^PY$", text, re.S | re.M)


@pytest.mark.slow
def test_the_demo_names_the_backend_and_prints_per_image_figures(tmp_path: Path):
    pytest.importorskip("torch")
    from detfmt import convert

    convert.from_coco(SAMPLE / "annotations.coco.json", SAMPLE, tmp_path / "chess",
                      max_side=512, progress=False)
    program = demo_python()[-1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH",
                                                                                 "")]))
    out = subprocess.run([sys.executable, "-", str(tmp_path / "chess"), str(tmp_path / "a.png")],
                         input=program, capture_output=True, text=True, env=env, check=True,
                         timeout=1800).stdout
    rows = re.findall(r"backend (\w+)\s*: (\d+) images in (\d+) batches .*?: ([\d.]+) ms/image "
                      r"wall \(([\d.]+) images/s\), ([\d.]+) ms/image CPU", out)
    expected = "opencv" if importlib.util.find_spec("cv2") else "torch"
    assert rows and rows[0][0] == expected, out
    assert int(rows[0][2]) >= 20, out  # enough batches to mean something
    assert all(float(row[3]) > 0 and float(row[5]) > 0 for row in rows), out
    if expected == "opencv":
        assert [row[0] for row in rows] == ["opencv", "torch"], out
        assert re.search(r"the torch kernels took [\d.]+x its CPU time per image", out), out
    else:
        assert "OpenCV is not installed" in out, out
    assert (tmp_path / "a.png").stat().st_size > 0
