"""Repeat-factor sampling of a dataset (SPEC §18.9-18.10), from its labels (numpy only).

The factors need, for every image, the classes of its valid boxes. They are read through
``ds.labels`` (the same checked label gather every batch uses), a block of samples at a time, so
a label that breaks a rule is the same typed error here as in a batch, never a silently skewed
factor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from detfmt.errors import UsageError
from detfmt.order import RepeatFactorOrder, repeat_factors

__all__ = ["LABEL_BLOCK", "class_presence", "repeat_factor_order_for"]

LABEL_BLOCK = 1 << 16  # samples per labels() call: bounded memory on large datasets


def class_presence(ds: Any, class_map: np.ndarray | None = None,
                   block: int = LABEL_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """(image, class id) of every valid box of ``ds`` as two int64 arrays.

    ``class_map`` (optional) maps the dataset's class ids to other ids (a mixture's), before
    presence is counted, so classes merged by a mapping count as one.
    """
    n = len(ds)
    images: list[np.ndarray] = []
    classes: list[np.ndarray] = []
    for start in range(0, n, block):
        rows = np.arange(start, min(n, start + block), dtype=np.int64)
        labels = ds.labels(rows)
        hit_rows, hit_slots = np.nonzero(np.asarray(labels.mask))
        ids = np.asarray(labels.classes)[hit_rows, hit_slots].astype(np.int64)
        if class_map is not None:
            ids = np.asarray(class_map, dtype=np.int64)[ids]
        images.append(rows[hit_rows])
        classes.append(ids)
    if not images:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(images), np.concatenate(classes)


def factors_for(ds: Any, threshold: float, class_map: np.ndarray | None = None) -> np.ndarray:
    """The O-9 repeat factors of every image of ``ds`` (float64, (N,))."""
    if len(ds) == 0:
        raise UsageError("repeat-factor sampling needs a dataset with samples",
                         path=getattr(ds, "location", None))
    images, classes = class_presence(ds, class_map)
    return repeat_factors(images, classes, len(ds), threshold)


def repeat_factor_order_for(ds: Any, threshold: float) -> RepeatFactorOrder:
    """Repeat-factor sampling over ``ds`` (O-9, O-10) with frequency threshold ``threshold``:
    an image whose rarest class is held by a fraction ``f < t`` of the images is visited about
    ``sqrt(t / f)`` times per epoch."""
    return RepeatFactorOrder(factors_for(ds, threshold), threshold)
