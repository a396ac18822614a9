"""What the benchmark tools share: paths, so no tool or record names one machine's directories,
and the end of a markdown report (the load line, printing and writing it).

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


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as a report states them."""
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def load_line(before: str) -> str:
    """The report's closing line: the load average before the run (``before``) and now."""
    return (f"Load average before: {before}; after: {load_average()} (os.getloadavg, "
            f"{os.cpu_count()} CPUs).")


def publish(lines: list[str], out: str | os.PathLike[str] | None) -> str:
    """The report's ``lines`` as text, printed and, with ``out``, written there."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        Path(out).write_text(text)
    return text
