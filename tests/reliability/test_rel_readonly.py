"""Case 28: a read-only file system. Reading needs no write access (no lock or cache files);
writing fails early (before consuming any sample) with TargetNotWritableError.

The EROFS is real: a tmpfs is mounted and remounted read-only inside a private mount namespace
(``unshare -m``, or ``unshare -rm`` where we are not root), so nothing leaks to the host even if
the test dies. Where no namespace can be made, the test is skipped; test_rel_faults still covers
EROFS by injection.
"""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import relharness as rh

pytestmark = pytest.mark.slow

def run_in_namespace(mountpoint: Path) -> dict | None:
    script = str(Path(rh.__file__).with_name("relwrite_child.py"))
    if not shutil.which("unshare"):
        return None
    for flags in (["-m", "--propagation", "private"], ["-r", "-m", "--propagation", "private"]):
        cmd = ["unshare", *flags, sys.executable, script, str(mountpoint)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                             env=rh.child_env())
        if out.returncode == 0:
            return json.loads(out.stdout.strip().splitlines()[-1])
        if "mount" not in out.stderr and "unshare" not in out.stderr:
            raise AssertionError(f"read-only checks failed:\n{out.stderr[-4000:]}")
    return None


def test_read_only_filesystem(tmp_path: Path) -> None:
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    result = run_in_namespace(mountpoint)
    if result is None:
        pytest.skip("no mount namespace here (unshare/mount refused); EROFS is covered by "
                    "injection in test_rel_faults")
    assert result["read_equal"] and result["verify_ok"] and result["batch_ok"], result
    for name in ("new", "overwrite"):
        cls, rule, code, message = result[name]
        assert (cls, rule, code) == ("TargetNotWritableError", "TARGET_NOT_WRITABLE",
                                     errno.EROFS), result
        assert "Read-only file system" in message, message
    assert result["samples_consumed"] == 0, "writing must fail before consuming samples"
    assert result["still_equal"], result
    assert result["cleanup"] == []
    assert not any(mountpoint.iterdir()), "the tmpfs leaked out of its namespace"
