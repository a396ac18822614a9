"""Small synthetic datasets written by ``detfmt.write`` / ``write_shard``, the same samples as a
1.0 directory or a sharded root (global index i holds sample i, so the same checks apply)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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


def make_dataset(path: Path, shapes, codec="raw", max_boxes=3, fixed=False, labels="padded"):
    """Write a dataset of len(shapes) samples with the real writer and open it (``labels``:
    the label layout, "padded" or "ragged")."""
    samples = []
    for i, (h, w) in enumerate(shapes):
        b, c = sample_labels(i, h, w, max_boxes)
        samples.append({"image": sample_image(i, h, w), "boxes": b, "classes": c})
    kwargs = {"fixed_size": (shapes[0][0], shapes[0][1])} if fixed else {}
    detfmt.write(samples, path, classes=["a", "b", "c"], codec=codec, labels=labels, **kwargs)
    return detfmt.open(path)


def varied_shapes(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [(int(h), int(w)) for h, w in rng.integers(8, 40, size=(n, 2))]


SHARD_SIZES = (7, 0, 9, 5, 6)  # cycled: shards of these sample counts, one empty


def make_sharded_root(path: Path, shapes, codec="raw", max_boxes=3, fixed=False,
                      shard_sizes=SHARD_SIZES, labels="padded"):
    """The same samples as `make_dataset`, written as a sharded root of several shards (global
    index i holds sample i, so the same checks apply to both)."""
    from detfmt.shard.write import commit, write_shard

    samples = []
    for i, (h, w) in enumerate(shapes):
        b, c = sample_labels(i, h, w, max_boxes)
        samples.append({"image": sample_image(i, h, w), "boxes": b, "classes": c})
    kwargs = {"fixed_size": (shapes[0][0], shapes[0][1])} if fixed else {}
    metas, first, k = [], 0, 0
    while first < len(samples) or not metas:
        n = shard_sizes[k % len(shard_sizes)]
        part = samples[first : first + n]
        metas.append(write_shard(part, path, f"{k:05d}", classes=["a", "b", "c"], codec=codec,
                                 labels=labels, **kwargs))
        first += len(part)
        k += 1
    commit(path, metas, write_id=f"{len(shapes):032x}")
    return detfmt.open(path)


def part_of(ds, i: int):
    """(the 1.0 dataset holding global sample i, its index there): the dataset itself, or the
    shard of a sharded root."""
    if isinstance(ds, detfmt.ShardedDataset):
        k, j = ds.locate(i)
        return ds.shard(k), j
    return ds, i


def corrupt_payload(ds, i: int, keep: float = 1 / 3) -> None:
    """Overwrite the end of sample i's stored payload with zeros in place (same size)."""
    part, j = part_of(ds, i)
    start = part.blob_member.base + int(part.offsets[j])
    size = int(part.nbytes[j])
    with open(part.blob_member.file, "r+b") as f:
        f.seek(start + int(size * keep))
        f.write(b"\x00" * (size - int(size * keep)))
