"""tools/gpu_check.sh --dry-run: the whole GPU check on this CPU, CUDA parts skipped and said so
(the script must work the first time a GPU is lent, with minutes to spare)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CUDA_ROWS = ("cuda tests", "loader cuda", "h2d overlap", "augment gpu", "decode gpu",
             "train step")
CPU_ROWS = ("loader cpu", "augment cpu", "decode cpu")


def test_dry_run_writes_every_row_and_skips_the_cuda_ones(tmp_path):
    out = tmp_path / "gpu.md"
    env = dict(os.environ, GPU_CHECK_PYTHON=sys.executable)
    run = subprocess.run(["bash", str(ROOT / "tools" / "gpu_check.sh"), "--dry-run", "--out",
                          str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = {}
    for line in out.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 2:
            rows[cells[0]] = cells[1]
    assert "dry run: CUDA parts skipped" in out.read_text()
    for name in CUDA_ROWS:
        assert rows[name] == "skipped (no CUDA)", (name, rows.get(name))
    for name in CPU_ROWS:  # measured for real, as a baseline
        assert rows[name].endswith(("(baseline)", "(baseline, simplejpeg)")), rows[name]
        assert float(rows[name].split()[0]) > 0
    assert "augment ultralytics" in rows
