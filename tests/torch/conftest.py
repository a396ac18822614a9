"""Small synthetic datasets for the torch adapter tests, written by ``detfmt.write``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import detfmt


def sample_image(i: int, h: int, w: int) -> np.ndarray:
    """Deterministic pixels that identify the sample (so a wrong copy is visible)."""
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.empty((h, w, 3), np.uint8)
    img[..., 0] = (i * 7 + yy) % 251
    img[..., 1] = (i * 13 + xx) % 253
    img[..., 2] = i % 256
    return img


def sample_labels(i: int, h: int, w: int, max_boxes: int):
    k = i % (max_boxes + 1)
    boxes = np.array([[j, j, min(w, j + 5), min(h, j + 5)] for j in range(k)], np.float32)
    return boxes.reshape(k, 4), np.array([(i + j) % 3 for j in range(k)], np.int32)


def make_dataset(path: Path, shapes, codec="raw", max_boxes=3, fixed=False):
    """Write a dataset of len(shapes) samples with the real writer and open it."""
    samples = []
    for i, (h, w) in enumerate(shapes):
        b, c = sample_labels(i, h, w, max_boxes)
        samples.append({"image": sample_image(i, h, w), "boxes": b, "classes": c})
    kwargs = {"fixed_size": (shapes[0][0], shapes[0][1])} if fixed else {}
    detfmt.write(samples, path, classes=["a", "b", "c"], codec=codec, **kwargs)
    return detfmt.open(path)


def varied_shapes(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [(int(h), int(w)) for h, w in rng.integers(8, 40, size=(n, 2))]


@pytest.fixture
def make_ds(tmp_path):
    counter = iter(range(1000))

    def make(shapes, codec="raw", max_boxes=3, fixed=False):
        return make_dataset(tmp_path / f"ds{next(counter)}", shapes, codec, max_boxes, fixed)

    return make
