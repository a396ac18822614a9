"""tools/bench_remote.py in its quick mode (seconds, synthetic data), so the tool cannot rot.

Its byte counts are not timings: a cold epoch through the capped loopback store must fetch each
shard exactly once, and a quarter epoch must fetch the shards it read and at most the
``prefetch_shards`` window ahead, never more.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]


def test_quick_mode_runs_and_fetches_no_more_than_the_window(tmp_path):
    out = tmp_path / "remote.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, str(REPO / "tools" / "bench_remote.py"), "--quick",
                    "--work", str(tmp_path / "work"), "--json", str(out),
                    "--out", str(tmp_path / "remote.md")],
                   env=env, check=True, capture_output=True, text=True, timeout=280)
    res = json.loads(out.read_text())
    assert res["samples"] == 384 and res["shards"] == 8
    assert res["first_epoch_fetched_over_shard_bytes"] == [1.0, 1.0]  # each shard once
    for got, allowed in zip(res["partial_fetched_over_touched"],
                            res["partial_allowed_over_touched"], strict=True):
        assert 1.0 <= got <= allowed + 1e-9
    assert allowed < 2.0  # the quarter epoch did not need the whole root
    assert len(res["ttfb_remote_s"]) == 1 and res["ttfb_needed_bytes"][0] > 0
    assert "| first epoch, `prefetch_shards=2`" in (tmp_path / "remote.md").read_text()
