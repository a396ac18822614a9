"""Child-side scenarios of cases 29 (files changed under a live reader); run in the sandbox."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import relharness


def truncate_under_reader(path: str) -> list[str | None]:
    """Truncate images.bin (outside damage) after open: check() must say so."""
    import detfmt

    ds = detfmt.open(path)
    os.truncate(Path(path) / "images.bin", 64)
    try:
        ds.check()
    except detfmt.DatasetChangedError as e:
        return [type(e).__name__, e.rule]
    return ["no error", None]


def touch_after_truncate(path: str) -> int:
    """Read a sample whose mapped pages were cut off: the kernel sends SIGBUS."""
    import detfmt

    ds = detfmt.open(path)
    os.truncate(Path(path) / "images.bin", 0)
    return int(np.asarray(ds[len(ds) - 1].image).sum())


def overwrite_under_reader(path: str) -> dict[str, Any]:
    """Overwrite with detfmt.write while a reader holds the old dataset: the reader keeps the
    old, intact files (no inode is truncated or rewritten) and check() reports the change."""
    import detfmt

    ds = detfmt.open(path)
    before = [np.array(ds[i].image) for i in range(len(ds))]
    relharness.build_dataset(path, n=3, seed=9, overwrite=True)
    still = all(np.array_equal(np.asarray(ds[i].image), before[i]) for i in range(len(ds)))
    try:
        ds.check()
        check = None
    except detfmt.DatasetChangedError as e:
        check = e.rule
    with detfmt.open(path) as new:
        opens = len(new) == 3
    return {"old_still_reads": still, "check": check, "new_opens": opens}
