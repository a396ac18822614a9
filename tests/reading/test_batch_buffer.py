"""Dataset.batch_buffer / ShardedDataset.batch_buffer: page-aligned reusable out= buffers, and
the buffers batch() allocates itself are page-aligned too (np.empty's 16-byte offset makes
copies of a few hundred KB 3-5x slower; see detfmt/reading/buffers.py)."""

from __future__ import annotations

import numpy as np
import pytest

import detfmt
from detfmt.reading.buffers import PAGE, aligned_empty
from detfmt.shard.write import commit, write_partition


def samples(n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        h, w = int(rng.integers(8, 40)), int(rng.integers(8, 40))
        out.append({"image": rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
                    "boxes": np.array([[0, 0, 4, 4]], np.float32),
                    "classes": np.array([1], np.int32)})
    return out


@pytest.mark.parametrize("shape, dtype", [(1, np.uint8), ((3, 5, 7), np.float32), (0, np.uint8)])
def test_aligned_empty(shape, dtype):
    a = aligned_empty(shape, dtype)
    assert a.dtype == dtype and (a.size == 0 or a.ctypes.data % PAGE == 0)
    assert a.shape == (shape if isinstance(shape, tuple) else (shape,))
    a[...] = 1  # writable, and exactly the requested size
    assert a.nbytes == int(np.prod(shape)) * np.dtype(dtype).itemsize


def test_batch_buffer_on_both_layouts(tmp_path):
    data = samples(12)
    detfmt.write(data, tmp_path / "flat", classes=["a", "b"], progress=False)
    metas = [m for p in range(3) for m in write_partition(data[p * 4 : (p + 1) * 4],
                                                          tmp_path / "root", p, classes=["a", "b"])]
    commit(tmp_path / "root", metas)
    for ds in (detfmt.open(tmp_path / "flat"), detfmt.open(tmp_path / "root")):
        buffer = ds.batch_buffer(5)
        hmax, wmax = (int(v) for v in ds.sizes.max(axis=0))
        assert buffer.ctypes.data % PAGE == 0 and buffer.size == 5 * hmax * wmax * 3
        for indices in ([0, 3, 11, 7, 2], [5, 1]):
            batch = ds.batch(indices, out=buffer)
            assert np.shares_memory(batch.images, buffer)
            for j, i in enumerate(indices):
                h, w = data[i]["image"].shape[:2]
                np.testing.assert_array_equal(batch.images[j, :h, :w], data[i]["image"])
        own = ds.batch([4, 9])
        assert own.images.ctypes.data % PAGE == 0
        with pytest.raises(detfmt.UsageError):
            ds.batch_buffer(0)
