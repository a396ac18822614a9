"""Small synthetic datasets for the torch adapter tests.

Uses the real writer/reader (``detfmt.write`` / ``detfmt.open``) when they exist, else a stand-in
with the same public attributes (docs/contract.md), so the loader tests run either way.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import detfmt

CODECS = {"raw": 0, "zstd": 1, "jpeg": 2, "png": 3}


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


class StandIn:
    """The reader's public surface, enough for the loader (replaced by detfmt.open when present)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        meta = json.loads((self.path / "standin.json").read_text())
        self.index = np.load(self.path / "index.npy", mmap_mode="r")
        self.boxes = np.load(self.path / "boxes.npy", mmap_mode="r")
        self.classes = np.load(self.path / "classes.npy", mmap_mode="r")
        self.counts = np.load(self.path / "counts.npy", mmap_mode="r")
        self.sizes = np.stack([self.index["height"], self.index["width"]], 1).astype(np.int32)
        self._blob = np.memmap(self.path / "images.bin", np.uint8, mode="r") if \
            (self.path / "images.bin").stat().st_size else None
        fixed = meta.get("fixed_shape")
        self.fixed_images = None
        if fixed:
            h, w, _ = fixed
            stride = -(-h * w * 3 // 64) * 64
            self.fixed_images = np.lib.stride_tricks.as_strided(
                self._blob, (len(self), h, w, 3), (stride, w * 3, 3, 1), writeable=False)

    def __len__(self) -> int:
        return len(self.index)

    def image_shape(self, i):
        return int(self.index["height"][i]), int(self.index["width"][i]), 3

    def decode_into(self, i, dst):
        from detfmt._codecs import decode_into

        rec = self.index[i]
        payload = self._blob[int(rec["offset"]): int(rec["offset"]) + int(rec["nbytes"])]
        decode_into(memoryview(payload), int(rec["codec"]), dst, path=str(self.path), index=i)

    def __reduce__(self):
        return (StandIn, (self.path,))


INDEX_DTYPE = np.dtype([("offset", "<u8"), ("nbytes", "<u8"), ("decoded_nbytes", "<u8"),
                        ("checksum", "<u8"), ("height", "<u4"), ("width", "<u4"),
                        ("channels", "u1"), ("codec", "u1"), ("flags", "<u2"),
                        ("reserved", "<u4")])


def write_standin(path: Path, shapes, codec="raw", max_boxes=3, fixed=False) -> Path:
    from detfmt._codecs import encode

    path.mkdir(parents=True)
    n = len(shapes)
    index = np.zeros(n, INDEX_DTYPE)
    boxes = np.zeros((n, max_boxes, 4), np.float32)
    classes = np.full((n, max_boxes), -1, np.int32)
    counts = np.zeros(n, np.int32)
    with open(path / "images.bin", "wb") as blob:
        offset = 0
        for i, (h, w) in enumerate(shapes):
            payload = bytes(encode(sample_image(i, h, w), codec))
            blob.write(payload)
            pad = -len(payload) % 64
            blob.write(b"\0" * pad)
            index[i] = (offset, len(payload), h * w * 3, 0, h, w, 3, CODECS[codec], 0, 0)
            offset += len(payload) + pad
            b, c = sample_labels(i, h, w, max_boxes)
            boxes[i, : len(b)] = b
            classes[i, : len(c)] = c
            counts[i] = len(b)
    for name, arr in [("index", index), ("boxes", boxes), ("classes", classes),
                      ("counts", counts)]:
        np.save(path / f"{name}.npy", arr)
    meta = {"fixed_shape": [shapes[0][0], shapes[0][1], 3] if fixed else None}
    (path / "standin.json").write_text(json.dumps(meta))
    return path


def real_writer_available() -> bool:
    return hasattr(detfmt, "write") and hasattr(detfmt, "open")


def make_dataset(path: Path, shapes, codec="raw", max_boxes=3, fixed=False):
    """Write a dataset of len(shapes) samples and open it."""
    if real_writer_available():
        samples = []
        for i, (h, w) in enumerate(shapes):
            b, c = sample_labels(i, h, w, max_boxes)
            samples.append({"image": sample_image(i, h, w), "boxes": b, "classes": c})
        kwargs = {"fixed_size": (shapes[0][0], shapes[0][1])} if fixed else {}
        detfmt.write(samples, path, classes=["a", "b", "c"], codec=codec, **kwargs)
        return detfmt.open(path)
    return StandIn(write_standin(path, shapes, codec, max_boxes, fixed))


def varied_shapes(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [(int(h), int(w)) for h, w in rng.integers(8, 40, size=(n, 2))]


@pytest.fixture
def make_ds(tmp_path):
    counter = iter(range(1000))

    def make(shapes, codec="raw", max_boxes=3, fixed=False):
        return make_dataset(tmp_path / f"ds{next(counter)}", shapes, codec, max_boxes, fixed)

    return make
