"""The OpenCV CPU backend matches the batched torch kernels (pixels close, boxes identical).

Tolerance: OpenCV's bilinear warp uses 5-bit fixed-point weights (torch: float32), so pixels
may differ by a level or two; the bar is >= 99% of pixels within +-2 levels and none more
than 8 off. Both backends cut each valid region the same way (its edge replicated, exactly
the fill outside it), so no band is excluded. HSV LUTs are float64 in OpenCV (Ultralytics) and
float32 in torch.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

import detfmt.augment as A
from detfmt.augment import _backend

from ._helpers import make_batch

pytest.importorskip("cv2")


def _run(pipeline: A.Compose, batch, backend: str, params=None):
    previous = A.get_cpu_backend()
    A.set_cpu_backend(backend)
    try:
        out = pipeline(batch, params=params)
    finally:
        A.set_cpu_backend(previous)
    return out, pipeline.last_params


def _both(modules, batch, seed: int = 0):
    """(opencv output, torch output replayed with the same parameters, params)."""
    pipeline = A.Compose(modules, generator=torch.Generator().manual_seed(seed))
    cv_out, params = _run(pipeline, batch, "opencv")
    torch_out, _ = _run(pipeline, batch, "torch", params)
    return cv_out, torch_out, params


def _assert_close(a: torch.Tensor, b: torch.Tensor, name: str) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype == torch.uint8, name
    diff = (a.int() - b.int()).abs()
    within = (diff <= 2).float().mean().item()
    assert within >= 0.99, f"{name}: {within:.4f} of pixels within 2 levels"
    assert diff.max().item() <= 8, f"{name}: max diff {diff.max().item()}"


def _assert_same_targets(a, b, name: str) -> None:
    assert torch.equal(a.boxes, b.boxes), name
    assert torch.equal(a.mask, b.mask), name
    assert torch.equal(a.classes, b.classes), name


CASES = {
    "affine": lambda: [A.RandomAffine(degrees=25, translate=0.2, scale=0.5, shear=8, size=72)],
    "perspective": lambda: [A.RandomAffine(degrees=10, perspective=0.002, size=(60, 72))],
    "flip": lambda: [A.RandomFlip(p=0.5), A.RandomFlip(p=0.5, vertical=True)],
    "letterbox": lambda: [A.Letterbox(96)],
    "letterbox+affine+flip": lambda: [A.Letterbox(80), A.RandomAffine(size=80), A.RandomFlip()],
    "hsv": lambda: [A.RandomHSV(h=0.5, s=0.9, v=0.9)],
    "mosaic+affine+flip+hsv": lambda: [
        A.Mosaic(),
        A.RandomAffine(degrees=5, size=(64, 80)),
        A.RandomFlip(),
        A.RandomHSV(),
    ],
}


@pytest.mark.parametrize("name", list(CASES))
def test_opencv_matches_torch(name):
    batch = make_batch(6, 64, 80, 6, seed=3, smooth=name != "hsv")
    cv_out, torch_out, _ = _both(CASES[name](), batch, seed=len(name))
    _assert_close(cv_out.images, torch_out.images, name)
    _assert_same_targets(cv_out, torch_out, name)
    if name == "flip":  # nearest at exact pixel positions: identical
        assert torch.equal(cv_out.images, torch_out.images)


def test_valid_regions_read_as_border():
    batch = make_batch(4, 64, 80, 6, seed=5, smooth=True)
    batch = batch.replace(sizes=torch.tensor([[64, 80], [40, 80], [64, 50], [33, 47]]))
    cv_out, torch_out, _ = _both([A.Letterbox(72), A.RandomAffine(degrees=15, size=72)], batch)
    _assert_close(cv_out.images, torch_out.images, "sizes")
    _assert_same_targets(cv_out, torch_out, "sizes")


def test_pixel_convention_scale_by_three():
    """A source pixel [5, 6) scaled by 3 lands on output pixels 15..17, as in the torch path."""
    images = torch.zeros(1, 3, 10, 10, dtype=torch.uint8)
    images[:, :, 5, 5] = 255
    batch = make_batch(1, 10, 10, 1).replace(images=images)
    matrix = torch.diag(torch.tensor([3.0, 3.0, 1.0]))
    out, _ = _run(A.Compose([A.Warp(matrix, size=30, interpolation="nearest")]), batch, "opencv")
    on = torch.nonzero(out.images[0, 0] > 127)
    assert on[:, 0].unique().tolist() == [15, 16, 17]
    assert on[:, 1].unique().tolist() == [15, 16, 17]


def test_replay_and_per_sample_independence():
    batch = make_batch(4, 64, 64, 6, seed=9, smooth=True)
    pipeline = A.Compose(
        [A.RandomAffine(degrees=20, shear=5), A.RandomFlip(), A.RandomHSV()],
        generator=torch.Generator().manual_seed(8),
    )
    out, params = _run(pipeline, batch, "opencv")
    again, _ = _run(pipeline, batch, "opencv", params)
    assert torch.equal(out.images, again.images) and torch.equal(out.boxes, again.boxes)
    for i in range(len(batch)):
        one = batch.replace(
            images=batch.images[i : i + 1],
            boxes=batch.boxes[i : i + 1],
            classes=batch.classes[i : i + 1],
            mask=batch.mask[i : i + 1],
        )
        sliced = [
            {k: (v[i : i + 1] if isinstance(v, torch.Tensor) else v) for k, v in p.items()}
            for p in params
        ]
        alone, _ = _run(pipeline, one, "opencv", sliced)
        assert torch.equal(alone.images[0], out.images[i])
        assert torch.equal(alone.boxes[0], out.boxes[i])


def test_layout_and_input_untouched():
    batch = make_batch(3, 32, 40, 4, seed=1)
    before = batch.images.clone()
    out, _ = _run(A.Compose([A.RandomAffine(size=32), A.RandomHSV()]), batch, "opencv")
    assert torch.equal(batch.images, before)
    assert out.images.is_contiguous(memory_format=torch.channels_last)
    last = batch.replace(images=batch.images.contiguous(memory_format=torch.channels_last))
    pipeline = A.Compose([A.RandomAffine(size=32)], generator=torch.Generator().manual_seed(2))
    a, params = _run(pipeline, batch, "opencv")
    b, _ = _run(pipeline, last, "opencv", params)
    assert torch.equal(a.images, b.images)


def test_float_images_stay_on_torch():
    batch = make_batch(2, 32, 32, 3, seed=4)
    batch = batch.replace(images=batch.images.float() / 255)
    assert not _backend.use_opencv(batch.images)
    cv_out, torch_out, _ = _both([A.RandomAffine(size=32), A.RandomHSV()], batch)
    assert torch.equal(cv_out.images, torch_out.images)


def test_switch(monkeypatch):
    with pytest.raises(Exception, match="backend must be one of"):
        A.set_cpu_backend("cuda")  # type: ignore[arg-type]
    assert A.get_cpu_backend() == "auto"
    assert _backend.use_opencv(torch.zeros(1, 3, 4, 4, dtype=torch.uint8))
    monkeypatch.setattr(_backend, "_cv2_found", [False])
    assert not _backend.use_opencv(torch.zeros(1, 3, 4, 4, dtype=torch.uint8))
    with pytest.raises(Exception, match="opencv-python-headless"):
        A.set_cpu_backend("opencv")


def test_import_detfmt_imports_neither_torch_nor_cv2():
    code = (
        "import sys, detfmt; assert 'torch' not in sys.modules and 'cv2' not in sys.modules;"
        "import detfmt.augment; assert 'cv2' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _mosaic_pipelines(seed: int):
    """Two identical Mosaic + affine + flip pipelines whose ring buffers hold the same samples."""
    first = make_batch(5, 48, 56, 4, seed=seed, smooth=True)
    made = []
    for _ in range(2):
        mosaic = A.Mosaic(p=0.7, buffer_size=6, generator=torch.Generator().manual_seed(seed))
        mosaic(first)
        steps = [A.RandomAffine(degrees=12, shear=3, size=(48, 56)), A.RandomFlip()]
        made.append(A.Compose([mosaic, *steps], generator=torch.Generator().manual_seed(seed)))
    return made


@pytest.mark.parametrize("crop", [False, True])
def test_deferred_mosaic_warps_the_tiles_like_the_canvas(monkeypatch, crop):
    """Compose lets the warp read Mosaic's tiles instead of a (2H, 2W) canvas.

    Reading the whole canvas through the tiles gives the canvas path's pixels bit for bit
    (seams, fill, ring-buffer tiles); reading only the reachable window shifts the matrix
    handed to OpenCV, whose float32 coordinates then round differently on a few pixels.
    """
    from detfmt.augment import _geometry, _opencv

    if not crop:
        real = _opencv.warp_images_opencv

        def whole_canvas(*args, source=None, **kwargs):
            if source is not None:
                source = dataclasses.replace(source, crop=False)
            return real(*args, source=source, **kwargs)

        monkeypatch.setattr(_opencv, "warp_images_opencv", whole_canvas)
    batch = make_batch(5, 48, 56, 4, seed=12, smooth=True)
    batch = batch.replace(sizes=torch.tensor([[48, 56], [30, 56], [48, 40], [21, 33], [48, 56]]))
    fused, plain = _mosaic_pipelines(14)
    out, params = _run(fused, batch, "opencv")
    assert (params[0]["tiles"] >= len(batch)).any() and not params[0]["apply"].all()
    mosaic, *steps = plain.transforms
    previous = A.get_cpu_backend()
    A.set_cpu_backend("opencv")
    try:
        canvas = mosaic(batch, params[0])
        want = _geometry.apply_geometric(canvas, steps, params[1:])
    finally:
        A.set_cpu_backend(previous)
    _assert_same_targets(out, want, "deferred mosaic")
    assert torch.equal(out.sizes, want.sizes)
    assert torch.equal(mosaic.buffer.images, fused.transforms[0].buffer.images)
    if crop:
        diff = (out.images.int() - want.images.int()).abs()
        assert (diff > 0).float().mean().item() < 1e-3 and diff.max().item() <= 16
    else:
        assert torch.equal(out.images, want.images)


def test_source_windows_hold_every_pixel_the_warp_reads():
    """Each output pixel centre maps inside its sample's window, with a 1 px footprint margin
    on both sides (bilinear reads floor(x) and floor(x) + 1; fixed point may round up by one)."""
    from detfmt.augment._opencv import opencv_matrices, source_windows

    g = torch.Generator().manual_seed(21)
    pipeline = A.RandomAffine(degrees=30, translate=0.3, scale=0.6, shear=10, perspective=0.001)
    matrices = []
    for _ in range(8):
        batch = make_batch(4, 90, 120, 2, seed=int(torch.randint(0, 99, (1,), generator=g)))
        pipeline(batch)
        state = _geometry_state(batch)
        matrices.append(pipeline.plan(state, pipeline.last_params).matrix)
    inverse = opencv_matrices(torch.cat(matrices))
    sizes = [(90, 120)] * len(inverse)
    out_h, out_w = 70, 100
    windows = source_windows(inverse, (out_h, out_w), sizes)
    v, u = torch.meshgrid(torch.arange(out_h), torch.arange(out_w), indexing="ij")
    points = torch.stack([u, v, torch.ones_like(u)], -1).reshape(-1, 3).double().numpy()
    cropped = 0
    for m, (x0, y0, x1, y1), (h, w) in zip(inverse, windows.tolist(), sizes, strict=True):
        mapped = points @ m.T
        assert (mapped[:, 2] > 0).all()
        sx, sy = mapped[:, 0] / mapped[:, 2], mapped[:, 1] / mapped[:, 2]
        fx, fy = torch.from_numpy(sx).floor(), torch.from_numpy(sy).floor()
        reads = (fx + 2 >= 0) & (fx - 1 < w) & (fy + 2 >= 0) & (fy - 1 < h)
        assert (fx[reads] - 1).clamp(0, w).min() >= x0 and (fx[reads] + 2).clamp(0, w).max() <= x1
        assert (fy[reads] - 1).clamp(0, h).min() >= y0 and (fy[reads] + 2).clamp(0, h).max() <= y1
        cropped += (x1 - x0) * (y1 - y0) < h * w
    assert cropped >= 8  # the windows do crop


def _geometry_state(batch):
    from detfmt.augment._geometry import GeometryState

    return GeometryState.of(batch)


def test_hsv_fused_into_the_warp_equals_hsv_after_it():
    """Compose recolours each warped sample inside the OpenCV warp: same pixels as RandomHSV on
    the warped batch, and the same parameters, drawn in the same order, as the torch backend."""
    batch = make_batch(4, 64, 80, 6, seed=17)
    modules = [A.Mosaic(), A.RandomAffine(degrees=10, size=(64, 80)), A.RandomFlip(), A.RandomHSV()]
    pipeline = A.Compose(modules, generator=torch.Generator().manual_seed(18))
    fused, params = _run(pipeline, batch, "opencv")
    assert modules[3].last_params is params[3]
    pipeline_torch = A.Compose(modules, generator=torch.Generator().manual_seed(18))
    _, params_torch = _run(pipeline_torch, batch, "torch")
    for mine, theirs in zip(params, params_torch, strict=True):
        assert mine.keys() == theirs.keys()
        assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    warped, _ = _run(A.Compose(modules[:3]), batch, "opencv", params[:3])
    want, _ = _run(A.Compose(modules[3:]), warped, "opencv", params[3:])
    assert torch.equal(fused.images, want.images)
    _assert_same_targets(fused, want, "hsv fused")


def test_bookkeeping_runs_on_one_torch_thread_and_restores_it(monkeypatch):
    """small_ops: torch ops inside an OpenCV-backend warp see 1 thread, the OpenCV pool the
    caller's count, and the caller's count is back afterwards (also after an error)."""
    from detfmt.augment import _opencv

    seen = {}
    real = _opencv._for_each_sample

    def spy(count, fn):
        seen["torch"] = torch.get_num_threads()
        seen["pool"] = _backend.pool_threads()
        return real(count, fn)

    monkeypatch.setattr(_opencv, "_for_each_sample", spy)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        batch = make_batch(2, 32, 32, 3, seed=6)
        _run(A.Compose([A.RandomAffine(size=32), A.RandomHSV()]), batch, "opencv")
        assert seen == {"torch": 1, "pool": 2} and torch.get_num_threads() == 2
        seen.clear()
        _run(A.Compose([A.RandomAffine(size=32)]), batch, "torch")  # batched kernels keep theirs
        assert seen == {} and torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), _backend.small_ops(batch.images):
            assert torch.get_num_threads() == 1
            raise RuntimeError
        assert torch.get_num_threads() == 2 and _backend.pool_threads() == 2
    finally:
        torch.set_num_threads(previous)


def test_uncovered_parts_of_a_window_complete_the_tiles():
    """Rectangles and the gaps `_uncovered` returns cover the window exactly once."""
    import numpy as np

    from detfmt.augment._opencv import _uncovered

    rng = np.random.default_rng(0)
    for _ in range(200):
        xc, yc = (int(v) for v in rng.integers(1, 40, 2))
        tiles = []
        for q in range(4):
            qx0, qx1 = (0, xc) if q in (0, 2) else (xc, 40)
            qy0, qy1 = (0, yc) if q < 2 else (yc, 40)
            if rng.random() < 0.2 or qx1 <= qx0 or qy1 <= qy0:
                continue
            x0, x1 = sorted(int(v) for v in rng.integers(qx0, qx1 + 1, 2))
            y0, y1 = sorted(int(v) for v in rng.integers(qy0, qy1 + 1, 2))
            if x1 > x0 and y1 > y0:
                tiles.append((x0, y0, x1, y1))
        wx0, wx1 = sorted(int(v) for v in rng.integers(0, 41, 2))
        wy0, wy1 = sorted(int(v) for v in rng.integers(0, 41, 2))
        count = np.zeros((40, 40), int)
        for x0, y0, x1, y1 in tiles:
            count[y0:y1, x0:x1] += 1
        for x0, y0, x1, y1 in _uncovered((wx0, wy0, wx1, wy1), tiles):
            assert wx0 <= x0 < x1 <= wx1 and wy0 <= y0 < y1 <= wy1
            count[y0:y1, x0:x1] += 1
        assert (count[wy0:wy1, wx0:wx1] == 1).all()


def test_huge_page_outputs_are_ordinary_channels_last_tensors(monkeypatch):
    """Outputs backed by an madvised mapping: same pixels and layout as torch.empty ones, and
    they stay valid after every other reference is gone."""
    import gc

    from detfmt.augment import _memory

    if not _memory._huge_pages["enabled"]:
        pytest.skip("no MADV_HUGEPAGE on this platform")
    batch = make_batch(3, 40, 48, 4, seed=7)
    pipeline = A.Compose([A.RandomAffine(size=40), A.RandomHSV()])
    plain, params = _run(pipeline, batch, "opencv")
    monkeypatch.setattr(_memory, "HUGE_PAGE_MIN_BYTES", 0)
    mapped, _ = _run(pipeline, batch, "opencv", params)
    images = mapped.images
    del mapped
    gc.collect()
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(images, plain.images)
    images += 1  # writable
    assert torch.equal(images, plain.images + 1)


def test_hsv_tables_are_ultralytics_luts():
    """The batched tables equal Ultralytics' per-sample float64 LUTs; only identity planes skip."""
    import numpy as np

    from detfmt.augment._opencv import _hsv_tables

    g = torch.Generator().manual_seed(3)
    gains = (torch.rand(500, 3, generator=g, dtype=torch.float64) * 2 - 1) * torch.tensor(
        [0.015, 0.9, 0.9], dtype=torch.float64
    )
    gains[0] = torch.tensor([0.001, 0.0, 0.0], dtype=torch.float64)  # floor(r_h 180) == 0
    _, tables, used = _hsv_tables(gains)
    x = np.arange(256, dtype=np.float64)
    for r, table, needed in zip(gains.numpy(), tables, used, strict=True):
        assert np.array_equal(table[0], ((x + r[0] * 180) % 180).astype(np.uint8))
        assert np.array_equal(table[1], np.clip(x * (r[1] + 1), 0, 255).astype(np.uint8))
        assert np.array_equal(table[2], np.clip(x * (r[2] + 1), 0, 255).astype(np.uint8))
        assert needed[0] == (np.floor(r[0] * 180) != 0)
        assert needed[1:] == [not np.array_equal(t, x.astype(np.uint8)) for t in table[1:]]
    assert used[0] == [False, False, False]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_sample_runs_once_across_the_caller_and_the_pool(monkeypatch, threads):
    """The caller and its pool threads share the samples: each index exactly once, and an
    error in any of them reaches the caller after every taker has stopped."""
    import threading

    from detfmt.augment import _opencv

    monkeypatch.setattr(_backend, "pool_threads", lambda: threads)
    seen, names, lock = [], set(), threading.Lock()

    def record(i):
        with lock:
            seen.append(i)
            names.add(threading.current_thread().name)

    _opencv._for_each_sample(40, record)
    assert sorted(seen) == list(range(40))
    assert len(names) <= threads

    running = []

    def fail_on_seven(i):
        with lock:
            running.append(i)
        if i == 7:
            raise ValueError("sample 7")

    with pytest.raises(ValueError, match="sample 7"):
        _opencv._for_each_sample(40, fail_on_seven)
    assert 7 in running and len(set(running)) == len(running)
    assert len(running) < 40  # no one takes a sample after the failure
