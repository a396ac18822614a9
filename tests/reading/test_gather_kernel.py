"""The native raw gather (`detfmt.reading.kernel`, numba) writes exactly the bytes of the numpy
path:
same images, same padding cleared after the previous batch of the buffer, same untouched bytes
with ``pad_value=None``, for 1.0 directories and sharded roots, raw and decoded codecs, 1 and 2
threads, with cached and with streaming (non-temporal) stores. Skipped where numba is not
installed (``pip install detfmt[fast]``)."""

from __future__ import annotations

import numpy as np
import pytest

from detfmt import errors
from detfmt.reading import kernel as _kernel
from tests.datasets import make_dataset, make_sharded_root, varied_shapes

pytest.importorskip("numba")


@pytest.fixture
def paths(monkeypatch):
    """Run a function once with the kernel and once with the numpy path."""

    def use(kind: str) -> None:
        # "stream": every batch written with non-temporal stores; "kernel": none
        monkeypatch.setattr(_kernel, "STREAM_BYTES", 0 if kind == "stream" else 1 << 62)
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
    for path in ("numpy", "kernel", "stream"):
        paths(path)
        if path == "numpy":
            assert _kernel.raw_gather() is None
        else:
            assert _kernel.raw_gather() is not None
        results[path] = _fill_sequence(ds, batches, pad_value, threads, canvas, seed=5)
    for path in ("kernel", "stream"):
        for got, want in zip(results[path], results["numpy"], strict=True):
            np.testing.assert_array_equal(got, want)
    ds.close()


@pytest.mark.parametrize("stream", [False, True])
def test_kernel_copies_and_clears_at_any_alignment(stream):
    """Sources and rows at every offset modulo a cache line, lengths around line multiples:
    the streaming stores' head, whole-line and tail parts each land where they should."""
    from detfmt.reading.kernel_numba import gather_raw

    rng = np.random.default_rng(7)
    for _ in range(120):
        batch = 3
        height, width = (int(v) for v in rng.integers(1, 60, 2))
        images = [rng.integers(0, 256, (int(rng.integers(1, height + 1)),
                                        int(rng.integers(1, width + 1)), 3), dtype=np.uint8)
                  for _ in range(batch)]
        blob = np.zeros(sum(im.size for im in images) + 128, np.uint8)
        offset, offsets = int(rng.integers(0, 64)), []
        for im in images:
            blob[offset:offset + im.size] = im.ravel()
            offsets.append(offset)
            offset += im.size
        sources = np.array(offsets, np.int64) + blob.ctypes.data
        heights = np.array([im.shape[0] for im in images], np.int64)
        widths = np.array([im.shape[1] for im in images], np.int64)
        pad = int(rng.integers(0, 256))
        storage = np.full(batch * height * width * 3 + 64, 9, np.uint8)
        shift = int(rng.integers(0, 64))  # the batch at any offset from a cache line
        out = storage[shift:shift + batch * height * width * 3].reshape(batch, height, width, 3)
        full = np.full(batch, height, np.int64), np.full(batch, width, np.int64)
        gather_raw(sources, heights, widths, np.arange(batch, dtype=np.int64), out, pad,
                   *full, stream)
        want = np.full_like(out, pad)
        for j, im in enumerate(images):
            want[j, :im.shape[0], :im.shape[1]] = im
        np.testing.assert_array_equal(out, want)
        assert (storage[:shift] == 9).all() and (storage[shift + out.size:] == 9).all()


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


def test_only_batches_larger_than_half_the_cache_stream(tmp_path, paths, monkeypatch):
    """A batch the next step may still find in the cache is written with cached stores."""
    ds = make_dataset(tmp_path / "ds", [(12, 9), (7, 11)])
    paths("kernel")
    kernel, seen = _kernel.raw_gather(), []

    def spy(*args):
        seen.append(args[-1])
        return kernel(*args)

    monkeypatch.setattr(_kernel, "_KERNEL", spy)
    out = np.zeros((2, 12, 11, 3), np.uint8)
    for threshold in (out.nbytes + 1, out.nbytes):
        monkeypatch.setattr(_kernel, "STREAM_BYTES", threshold)
        ds.engine.fill(ds.engine.job([0, 1]), out, 0)
        np.testing.assert_array_equal(out[1, :7, :11], ds[1].image)
    assert seen == [False, True]
    assert 8 << 20 <= _kernel._stream_threshold() < 1 << 40
    ds.close()


def test_numpy_users_load_the_native_gather_through_the_package(tmp_path, paths):
    import detfmt

    paths("numpy")
    assert detfmt.use_native_gather() is False  # DETFMT_GATHER=numpy
    paths("kernel")
    assert _kernel.raw_gather() is not None
    assert detfmt.use_native_gather() is True
    ds = make_dataset(tmp_path / "ds", [(12, 9), (7, 11)])
    batch = ds.batch([1, 0])
    np.testing.assert_array_equal(batch.images[0, :7, :11], ds[1].image)
    ds.close()
