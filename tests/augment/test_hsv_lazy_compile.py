"""A cold start compiles only the HSV kernel the pipeline uses (issue 27 item 2): with an empty
numba cache each kernel costs seconds of compilation, so recolouring into an interleaved RGB
image must not compile the planar kernel (nor the reverse)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")
if os.environ.get("DETFMT_HSV", "").lower() == "opencv":
    pytest.skip("DETFMT_HSV=opencv turns the kernel off", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import json, sys
import numpy as np
from detfmt.augment import _native
from detfmt.augment._hsv_numba import recolour_planar, recolour_rgb
image = np.full((4, 5, 3), 100, np.uint8)
params = np.array([3.0, 1.2, 0.8], np.float32)
if sys.argv[1] == "rgb":
    ok = _native.recolour(image, params, np.empty_like(image))
else:
    ok = _native.recolour(image, params, [np.empty((4, 5), np.uint8) for _ in range(3)])
print(json.dumps({"ok": bool(ok), "planar": len(recolour_planar.signatures),
                  "rgb": len(recolour_rgb.signatures)}))
"""


@pytest.mark.parametrize("layout", ["rgb", "planar"])
def test_only_the_kernel_in_use_is_compiled(tmp_path, layout):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", CHILD, layout], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    other = "planar" if layout == "rgb" else "rgb"
    assert got["ok"] and got[layout] == 1 and got[other] == 0, got
