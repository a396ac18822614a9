"""Small deterministic samples and a helper to write sharded datasets for the scale-out tests."""

from __future__ import annotations

import numpy as np

CLASSES = ["cat", "dog", "bird"]


def make_samples(seed: int, n: int, *, max_boxes: int = 4, side: tuple[int, int] = (8, 24)):
    """``n`` samples, deterministic in ``seed``; box counts vary per sample (0..max_boxes)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        h, w = (int(x) for x in rng.integers(side[0], side[1], 2))
        k = int(rng.integers(0, max_boxes + 1))
        xy = rng.uniform(0, min(h, w) - 1, (k, 2, 2)).astype(np.float32)
        boxes = np.concatenate([xy.min(1), xy.max(1) + 0.5], axis=1).astype(np.float32)
        out.append(
            {
                "image": rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
                "boxes": boxes,
                "classes": rng.integers(0, len(CLASSES), k),
                "source_id": seed * 10_000 + i,
            }
        )
    return out


def write_partitioned(root, partitions, **options):
    """write_shard per partition (key = zero-padded partition number), then commit."""
    from detfmt.shard.write import commit, write_shard

    metas = [
        write_shard(p, root, f"{i:05d}", classes=CLASSES, **options)
        for i, p in enumerate(partitions)
    ]
    return commit(root, metas, write_id="0" * 32)
