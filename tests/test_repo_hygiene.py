"""No tracked text file names a directory of one machine.

A path such as the project machine's data folder, a home directory or a named folder in the
system's temporary directory works on one machine only: tools take such paths as arguments (or
resolve ``../shared/data`` from the repository root), docs use relative paths, and the records
in docs/bench state paths relative to the repository.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: an absolute path into a machine's own folders: not preceded by a name character, so a URL's
#: key or a relative path with such a folder name inside does not count
MACHINE_PATH = re.compile(
    rb"(?<![A-Za-z0-9_.\-])/(?:work|root|home|Users)/|(?<![A-Za-z0-9_.\-])/tmp/[A-Za-z]"
)

#: tracked files that may hold such a path, each with the reason it must stay (none today)
ALLOWED: dict[str, str] = {}


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return [name for name in out.stdout.decode("utf-8").split("\0") if name]


def machine_paths(data: bytes) -> list[str]:
    """The lines of a text file that hold a machine path; a binary file (a NUL byte) has none."""
    if b"\0" in data:
        return []
    return [f"{number}: {line.decode('utf-8', 'replace').strip()[:120]}"
            for number, line in enumerate(data.splitlines(), 1) if MACHINE_PATH.search(line)]


def test_pattern_finds_machine_paths_only():
    root = b"/"  # spelled apart so that this file holds no such path itself
    assert machine_paths(b"x\npython t.py --data " + root + b"work/shared/data/raccoon\n") == [
        "2: python t.py --data " + (root + b"work/shared/data/raccoon").decode()]
    assert machine_paths(b'"work": "' + root + b'tmp/bench-train"')
    assert machine_paths(root + b"home/me/x") and machine_paths(root + b"root/x")
    for fine in (b"--data ../shared/data/raccoon", b"s3://bucket" + root + b"home/x",
                 b"data" + root + b"work/x", b"~/.cache/detfmt", b"a shared directory in /tmp",
                 b"\0" + root + b"work/x"):
        assert machine_paths(fine) == [], fine


def test_no_tracked_file_names_a_machine_path():
    found, stale = {}, []
    for name in tracked_files():
        path = REPO / name
        if not path.is_file() or path.is_symlink():
            continue
        lines = machine_paths(path.read_bytes())
        if name in ALLOWED:
            stale += [] if lines else [name]
        elif lines:
            found[name] = lines
    assert not stale, f"allowlisted files that no longer hold such a path: {stale}"
    assert not found, (
        "absolute paths of one machine in tracked files (use an argument, a path relative to "
        f"the repository such as ../shared/data, or tempfile): {found}")

