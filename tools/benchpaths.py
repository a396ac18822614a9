"""Paths the benchmark tools share, so no tool or record names one machine's directories.

The real datasets (raccoon, coco128-yolo, chess-coco) live beside the checkout, in
``../shared/data`` relative to the repository root; records state paths relative to that root.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def shown(path: str | os.PathLike[str]) -> str:
    """``path`` as a record states it: relative to the repository root if it is an absolute
    local path (``../shared/data/raccoon``), else as given (a relative path, a URL)."""
    text = os.fspath(path)
    return os.path.relpath(text, REPO) if os.path.isabs(text) else text


def command_line() -> str:
    """The command that is running, its absolute paths relative to the repository root."""
    return " ".join(["python", *(shown(arg) if os.path.isabs(arg) else arg for arg in sys.argv)])
