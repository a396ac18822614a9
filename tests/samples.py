"""Small synthetic samples for the format, reading and writing tests (``make_samples``, the
``samples`` fixture)."""

from __future__ import annotations

import numpy as np
import pytest


def make_samples(n: int, seed: int = 0, max_boxes: int = 5, size=(5, 40), fields: bool = False):
    """Random samples with valid boxes inside each image."""
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(n):
        h, w = (int(v) for v in rng.integers(size[0], size[1], 2))
        k = int(rng.integers(0, max_boxes + 1))
        x1 = rng.uniform(0, w / 2, k)
        y1 = rng.uniform(0, h / 2, k)
        boxes = np.stack([x1, y1, x1 + rng.uniform(0, w / 2, k), y1 + rng.uniform(0, h / 2, k)], 1)
        sample = {
            "image": rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
            "boxes": boxes.reshape(k, 4),
            "classes": rng.integers(0, 3, k),
            "file_name": f"image_{i}.jpg",
            "source_id": 1000 + i,
        }
        if fields:
            sample["iscrowd"] = rng.integers(0, 2, k).astype(np.uint8)
        samples.append(sample)
    return samples


CLASSES = ["cat", "dog", "zebra"]


@pytest.fixture
def samples():
    return make_samples(12)
