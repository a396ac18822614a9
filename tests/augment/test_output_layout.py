"""Output layout and buffers: ``memory_format`` changes where pixels go, never their values;
reused output buffers are never handed out while anything still references them."""

from __future__ import annotations

import pytest
import torch

import detfmt.augment as A
from detfmt.augment import _memory

from ._helpers import make_batch

pytest.importorskip("cv2")


def _sized(seed: int, channels: int = 3):
    """A batch whose samples have valid regions below their canvas (scaled mosaic tiles)."""
    batch = make_batch(5, 40, 52, 4, seed=seed, smooth=True)
    images = batch.images if channels == 3 else batch.images[:, :1].contiguous()
    sizes = torch.tensor([[40, 52], [21, 52], [40, 30], [13, 17], [33, 11]], dtype=torch.int32)
    return batch.replace(images=images.contiguous(memory_format=torch.channels_last), sizes=sizes)


@pytest.fixture
def fresh_pool(monkeypatch):
    """The reused buffers start empty."""
    monkeypatch.setattr(_memory, "_reused", _memory._Reused())


PIPELINES = {
    # the tile warp (scaled tiles), HSV fused
    "mosaic-resize+affine+flip+hsv": lambda: [
        A.Mosaic(buffer_size=6, resize=48),
        A.RandomAffine(size=48),
        A.RandomFlip(p=0.5, about="canvas"),
        A.RandomHSV(),
    ],
    # the canvas-window warp, HSV fused, rotation and shear
    "mosaic+affine+hsv": lambda: [
        A.Mosaic(buffer_size=6),
        A.RandomAffine(degrees=20, shear=5, size=(40, 52)),
        A.RandomHSV(),
    ],
    # no HSV: RGBA staging converted into the output
    "letterbox+perspective": lambda: [
        A.Letterbox(44),
        A.RandomAffine(degrees=10, perspective=0.002, size=44),
    ],
    "mosaic-resize+rotation": lambda: [
        A.Mosaic(resize=40),
        A.RandomAffine(degrees=30, size=40),
    ],
    "yolo_train": lambda: list(A.presets.yolo_train(48, buffer_size=6).transforms),
    # the warp is not the last step: MixUp, a flip and HSV follow it, then one planar copy
    "yolo_train+mixup": lambda: list(A.presets.yolo_train(48, mixup=0.5, buffer_size=6).transforms),
    # MixUp, then both flips and HSV in one warp again
    "yolo_train+mixup+flipud": lambda: list(
        A.presets.yolo_train(48, mixup=0.5, flipud=0.5, buffer_size=6).transforms
    ),
}


@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("name", list(PIPELINES))
def test_planar_output_equals_channels_last_output(name, channels):
    """Two pipelines drawing the same parameters over the same batches (ring buffers included):
    the contiguous one returns contiguous images with the same values and targets."""
    if channels == 1 and ("hsv" in name or "yolo" in name):
        pytest.skip("HSV needs RGB")
    default = A.Compose(PIPELINES[name](), generator=torch.Generator().manual_seed(5))
    planar = A.Compose(
        PIPELINES[name](),
        generator=torch.Generator().manual_seed(5),
        memory_format=torch.contiguous_format,
    )
    for seed in range(3):
        batch = _sized(seed, channels)
        a, b = default(batch), planar(batch)
        assert b.images.is_contiguous()
        assert torch.equal(a.images, b.images), (name, seed)
        for field in ("boxes", "classes", "mask", "sizes"):
            assert torch.equal(getattr(a, field), getattr(b, field)), (name, seed, field)


def test_memory_format_is_checked():
    from detfmt.errors import UsageError

    with pytest.raises(UsageError, match="memory_format"):
        A.Compose([A.RandomHSV()], memory_format="planar")
    out = A.Compose([A.RandomAffine(size=40)], memory_format=torch.channels_last)(_sized(0))
    assert out.images.is_contiguous(memory_format=torch.channels_last)


def test_planar_output_on_the_torch_backend():
    previous = A.get_cpu_backend()
    A.set_cpu_backend("torch")
    try:
        pipeline = A.Compose(PIPELINES["mosaic+affine+hsv"](),
                             memory_format=torch.contiguous_format)
        out = pipeline(_sized(1))
    finally:
        A.set_cpu_backend(previous)
    assert out.images.is_contiguous()


def test_held_outputs_are_never_overwritten(fresh_pool):
    """Outputs come from reused buffers: every output the caller still holds keeps its pixels
    while later batches are produced (more of them than the buffers kept per thread)."""
    for memory_format in (None, torch.contiguous_format):
        pipeline = A.Compose(PIPELINES["mosaic-resize+affine+flip+hsv"](),
                             generator=torch.Generator().manual_seed(1),
                             memory_format=memory_format)
        held = []
        for seed in range(_memory.REUSED_BUFFERS + 3):
            out = pipeline(_sized(seed)).images
            held.append((out, out.clone()))
        for out, copy in held:
            assert torch.equal(out, copy)


HOLDERS = {
    "the tensor": lambda t: t,
    "a view": lambda t: t.permute(0, 2, 3, 1)[1:],
    "a numpy array": lambda t: t.numpy()[0],
}


@pytest.mark.parametrize("holder", list(HOLDERS))
def test_reused_buffer_is_free_only_when_nothing_references_it(fresh_pool, holder):
    shape = (2, 3, 5, 7)
    first = _memory.reused_empty(shape)
    address = first.data_ptr()
    kept = HOLDERS[holder](first)
    del first
    other = _memory.reused_empty(shape)
    assert other.data_ptr() != address  # still referenced through the holder
    del other, kept
    again = _memory.reused_empty(shape)
    assert again.data_ptr() == address  # free once nothing references it


def test_reused_buffers_are_bounded_and_resized(fresh_pool):
    shape = (3, 4, 6, 8)
    held = [_memory.reused_empty(shape) for _ in range(_memory.REUSED_BUFFERS + 2)]
    assert len({t.data_ptr() for t in held}) == len(held)  # none shared while all are held
    pooled = held[0].data_ptr()
    del held[0]
    again = _memory.reused_empty(shape)
    assert again.data_ptr() == pooled
    assert again.shape == shape and again.is_contiguous() and again.dtype == torch.uint8
    del again
    bigger = _memory.reused_empty((3, 4, 6, 9))  # a free buffer of another size is replaced
    assert bigger.shape == (3, 4, 6, 9) and bigger.is_contiguous()
    assert len(_memory._reused.arrays) == _memory.REUSED_BUFFERS


def test_threads_never_share_an_output_and_outlive_their_scratch(fresh_pool):
    """Buffers are shared by all threads: outputs made at the same time in several threads
    (held, more of them than the buffers kept) are distinct and right; a thread started later
    reuses the scratch arrays of threads that have ended."""
    from concurrent.futures import ThreadPoolExecutor

    from detfmt.augment import _opencv

    batches = [_sized(seed) for seed in range(12)]

    def pipeline():
        return A.Compose(PIPELINES["mosaic-resize+affine+flip+hsv"](),
                         generator=torch.Generator().manual_seed(4))

    expected = [pipeline()(b).images.clone() for b in batches]

    def run(b):
        return pipeline()(b).images

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(run, batches))
    assert len({t.data_ptr() for t in got}) == len(got)
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b)
    spare = {id(array) for buffers in _opencv._spare_scratch for array in buffers.values()}
    assert spare
    with ThreadPoolExecutor(1) as pool:  # a new thread
        pool.submit(run, batches[0]).result()
        seen = pool.submit(lambda: {id(a) for b in _opencv._spare_scratch for a in b.values()})
    assert seen.result() <= spare
