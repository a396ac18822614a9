"""The native paths never touch a byte outside their buffers (issue 25, "sanitized native code").

The numba raw gather (`detfmt.reading.kernel`) and the numpy fill write through raw pointers
computed from checked records. Here the output buffer of every batch sits flush against
``PROT_NONE`` guard pages (its end against one, then its start against one), the records are
the extreme ones the checks still accept (1x1, 1xW and Hx1 images, the widest and tallest
image, the last payload ending at the end of ``images.bin``, repeated indices, fixed canvases),
and each gather runs in a forked child: a stray write or read kills the child with SIGSEGV,
which fails the test, instead of corrupting memory silently. The pixels must equal the gather
into an ordinary array.
"""

from __future__ import annotations

import ctypes
import mmap

import numpy as np
import pytest

import detfmt
from tests.forking import run_forked

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)

SHAPES = [(1, 1), (1, 37), (41, 1), (3, 3), (64, 1), (1, 64), (29, 47), (64, 64), (2, 63)]


def _guarded(nbytes: int, flush: str) -> tuple[mmap.mmap, np.ndarray]:
    """A writable ``nbytes`` uint8 array between two PROT_NONE pages, its end (or start)
    touching one of them."""
    inner = max(PAGE, -(-nbytes // PAGE) * PAGE)
    region = mmap.mmap(-1, inner + 2 * PAGE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    for start in (base, base + PAGE + inner):
        if _libc.mprotect(start, PAGE, 0) != 0:
            raise OSError(ctypes.get_errno(), "mprotect failed")
    offset = PAGE + inner - nbytes if flush == "end" else PAGE
    return region, np.frombuffer(region, np.uint8, count=nbytes, offset=offset)


@pytest.fixture(scope="module")
def extreme(tmp_path_factory):
    rng = np.random.default_rng(7)
    samples = []
    for h, w in SHAPES:
        boxes = np.array([[0.0, 0.0, w, h]], np.float32)
        samples.append({"image": rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
                        "boxes": boxes, "classes": np.array([0])})
    path = tmp_path_factory.mktemp("guard") / "ds"
    detfmt.write(samples, path, classes=["x"], codec="raw")
    return path


BATCHES = [
    [len(SHAPES) - 1],  # the last payload: it ends where images.bin ends
    [0],  # a 1x1 image in a 1x1 batch: the smallest buffer
    list(range(len(SHAPES))),
    [7, 7, 0, 7, 1, 2],  # repeats, the widest and tallest images together
    [2, 1],  # 41x1 and 1x37: each pads the other on both axes
]


def _gather(args: tuple) -> str:
    path, rows, flush, canvas, native, pad = args
    if not native:
        from detfmt.reading import kernel

        kernel.raw_gather = lambda: None  # the numpy fill (this child only)
    elif not detfmt.use_native_gather():
        return "no numba"
    ds = detfmt.open(path)
    reference = ds.batch(rows, canvas=canvas, pad_value=pad)
    images = np.asarray(reference.images)
    region, buffer = _guarded(images.nbytes, flush)
    out = ds.batch(rows, out=buffer, canvas=canvas, pad_value=pad)
    got = np.asarray(out.images)
    assert got.shape == images.shape
    if pad is None:  # pixels outside the images are left as they were: compare the images only
        for k, (h, w) in enumerate(np.asarray(reference.sizes)):
            assert np.array_equal(got[k, :h, :w], images[k, :h, :w])
    else:
        assert np.array_equal(got, images)
    del out, got, buffer
    region.close()
    return "ok"


@pytest.mark.parametrize("native", [True, False], ids=["numba", "numpy"])
@pytest.mark.parametrize("flush", ["end", "start"])
def test_gathers_stay_inside_guarded_buffers(extreme, native, flush):
    cases = [(str(extreme), rows, flush, canvas, native, pad)
             for rows in BATCHES for canvas in (None, (64, 64)) for pad in (0, 114, None)]
    results = run_forked(_gather, cases, timeout=300)
    if native and results[0] == "no numba":
        pytest.skip("numba is not installed: the native kernel is not used")
    assert results == ["ok"] * len(cases)


def test_the_guard_pages_catch_a_stray_write():
    """The harness itself: a write one byte past the buffer kills the child."""
    def stray(_: object) -> str:
        _region, buffer = _guarded(100, "end")
        ctypes.memset(buffer.ctypes.data + 100, 1, 1)
        return "survived"

    with pytest.raises(AssertionError):
        run_forked(stray, [None], timeout=60)
