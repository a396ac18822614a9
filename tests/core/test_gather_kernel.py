"""The native raw gather (`detfmt._kernel`, numba) writes exactly the bytes of the numpy path:
same images, same padding cleared after the previous batch of the buffer, same untouched bytes
with ``pad_value=None``, for 1.0 directories and sharded roots, raw and decoded codecs, 1 and 2
threads. Skipped where numba is not installed (``pip install detfmt[fast]``)."""

from __future__ import annotations

import numpy as np
import pytest

from detfmt import _kernel, errors
from tests.datasets import make_dataset, make_sharded_root, varied_shapes

pytest.importorskip("numba")


@pytest.fixture
def paths(monkeypatch):
    """Run a function once with the kernel and once with the numpy path."""

    def use(kind: str) -> None:
        monkeypatch.setattr(_kernel, "_LOADED", False)
        monkeypatch.setattr(_kernel, "_KERNEL", None)
        monkeypatch.setenv("DETFMT_GATHER", "numpy" if kind == "numpy" else "numba")
        assert _kernel.load() == (kind != "numpy")

    return use


def _fill_sequence(ds, batches, pad_value, threads, canvas, seed):
    engine = ds.engine
    rng = np.random.default_rng(seed)
    out = rng.integers(0, 256, (len(batches[0]), *canvas, 3), dtype=np.uint8)  # garbage
    previous = None
    snapshots = []
    for indices in batches:
        job = engine.job(indices)
        previous = engine.fill(job, out, pad_value, previous=previous, num_threads=threads)
        snapshots.append(out.copy())
    return snapshots


@pytest.mark.parametrize("kind", ["dir", "sharded"])
@pytest.mark.parametrize("codec", ["raw", "png"])
@pytest.mark.parametrize("pad_value", [0, 114, None])
@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_writes_the_bytes_of_the_numpy_path(tmp_path, paths, kind, codec, pad_value,
                                                   threads):
    shapes = varied_shapes(40, seed=11)
    make = make_dataset if kind == "dir" else make_sharded_root
    ds = make(tmp_path / "ds", shapes, codec=codec)
    rng = np.random.default_rng(3)
    batches = [rng.choice(len(ds), 8, replace=False) for _ in range(6)]
    canvas = (40, 40)
    results = {}
    for path in ("numpy", "kernel"):
        paths(path)
        if path == "kernel":
            assert _kernel.raw_gather() is not None
        else:
            assert _kernel.raw_gather() is None
        results[path] = _fill_sequence(ds, batches, pad_value, threads, canvas, seed=5)
    for got, want in zip(results["kernel"], results["numpy"], strict=True):
        np.testing.assert_array_equal(got, want)
    ds.close()


def test_kernel_refuses_an_image_larger_than_the_canvas(tmp_path, paths):
    ds = make_dataset(tmp_path / "ds", [(30, 20), (10, 10)])
    paths("kernel")
    out = np.zeros((2, 25, 25, 3), np.uint8)
    with pytest.raises(errors.UsageError, match="larger than the batch"):
        ds.engine.fill(ds.engine.job([1, 0]), out, 0)
    assert not out.any()  # nothing written before the check
    ds.close()


def test_buffers_the_kernel_cannot_take_go_through_numpy(tmp_path, paths):
    ds = make_dataset(tmp_path / "ds", [(12, 9), (7, 11)])
    paths("kernel")
    wide = np.zeros((2, 12, 11, 4), np.uint8)[..., :3]  # not C-contiguous
    ds.engine.fill(ds.engine.job([0, 1]), wide, 0)
    np.testing.assert_array_equal(wide[0, :12, :9], ds[0].image)
    np.testing.assert_array_equal(wide[1, :7, :11], ds[1].image)
    ds.close()
