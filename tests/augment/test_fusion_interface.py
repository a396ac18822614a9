"""The fusion capabilities of `Augmentation`, declared by modules written outside detfmt: a colour
step fused into the warp before it (``recolours_in_warp`` / ``hsv_gains``), a canvas deferred to
the warp after it (``can_defer`` / ``apply_deferred``), and stored samples from the loader
(``accepts_stored_samples``). Each gets the fused path `Mosaic` and `RandomHSV` get, and the same
outputs as without it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import detfmt.augment as A
from detfmt.augment.tiles import Tile, TiledSource
from detfmt.torch import Batch, Delivery, Loader
from tests.augment._helpers import make_batch
from tests.datasets import make_dataset, varied_shapes

pytest.importorskip("cv2")  # the fused paths are the OpenCV backend's


@pytest.fixture(autouse=True)
def opencv_backend():
    previous = A.get_cpu_backend()
    A.set_cpu_backend("opencv")
    yield
    A.set_cpu_backend(previous)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class Brighten(A.Augmentation):
    """A third-party colour step: value times 1 + r, r ~ U(-v, v) per sample."""

    def __init__(self, v: float = 0.4, generator: torch.Generator | None = None) -> None:
        super().__init__(generator)
        self.v = v
        self.applied = 0

    def sample(self, batch: Batch) -> dict:
        r = torch.rand(len(batch), generator=self.generator, dtype=torch.float64)
        return {"r": (2 * r - 1) * self.v}

    @property
    def recolours_in_warp(self) -> bool:
        return True

    def hsv_gains(self, params: dict) -> torch.Tensor:
        r = params["r"]
        return torch.stack([torch.zeros_like(r), torch.zeros_like(r), r], dim=1)

    def apply(self, batch: Batch, params: dict) -> Batch:
        self.applied += 1
        return A.RandomHSV().apply(batch, {"gains": self.hsv_gains(params)})


class Frame(A.Augmentation):
    """A third-party mix-like step: each image's valid region on a canvas ``pad`` pixels larger
    on every side (fill elsewhere), boxes moved with it."""

    def __init__(self, pad: int = 6, fill: int = 114) -> None:
        super().__init__()
        self.pad, self.fill = pad, fill
        self.applied = self.deferred = 0
        self.given_samples: list[bool] = []

    @property
    def accepts_stored_samples(self) -> bool:
        return True  # `apply` materialises them, `apply_deferred` reads them

    def _labels(self, batch: Batch) -> Batch:
        p = self.pad
        boxes = torch.where(batch.mask[..., None], batch.boxes + p, torch.zeros_like(batch.boxes))
        sizes = batch.sizes + 2 * p if batch.sizes is not None else None
        return batch.replace(boxes=boxes, sizes=sizes)

    def apply(self, batch: Batch, params: dict) -> Batch:
        self.applied += 1
        self.given_samples.append(batch.samples is not None)
        batch = batch.materialized()
        p = self.pad
        b, c, h, w = batch.images.shape
        canvas = torch.full((b, c, h + 2 * p, w + 2 * p), self.fill, dtype=torch.uint8)
        for k, (sh, sw) in enumerate(_sizes(batch)):
            canvas[k, :, p : p + sh, p : p + sw] = batch.images[k, :, :sh, :sw]
        return self._labels(batch).replace(images=canvas)

    def can_defer(self, batch: Batch) -> bool:
        return batch.images.device.type == "cpu" and batch.images.dtype == torch.uint8

    def apply_deferred(self, batch: Batch, params: dict):
        self.deferred += 1
        self.given_samples.append(batch.samples is not None)
        p = self.pad
        sizes = _sizes(batch)
        if batch.samples is not None:
            arrays = list(batch.samples)
        else:
            hwc = batch.images.permute(0, 2, 3, 1).contiguous().numpy()
            arrays = [hwc[k, :sh, :sw] for k, (sh, sw) in enumerate(sizes)]
        tiles = [[Tile(a, p, p, p + a.shape[1], p + a.shape[0], p, p)] for a in arrays]
        source = TiledSource([(sh + 2 * p, sw + 2 * p) for sh, sw in sizes], tiles,
                             float(self.fill), 3)
        b, c, h, w = batch.images.shape
        placeholder = batch.images.new_zeros((1, 1, 1, 1)).expand(b, c, h + 2 * p, w + 2 * p)
        return self._labels(batch).replace(images=placeholder), source, lambda: None


def _sizes(batch: Batch) -> list[tuple[int, int]]:
    """Each sample's valid (height, width)."""
    if batch.sizes is not None:
        return [tuple(hw) for hw in batch.sizes.tolist()]
    return [tuple(batch.images.shape[-2:])] * len(batch)


def _warp(seed: int) -> list[A.Augmentation]:
    """A geometric group the Compose warps once (affine + flip)."""
    return [A.RandomAffine(degrees=10, translate=0.1, scale=0.3, size=(56, 72),
                           generator=_gen(seed)),
            A.RandomFlip(p=0.5, generator=_gen(seed + 1))]


def _same(a: Batch, b: Batch) -> None:
    for name in ("images", "boxes", "classes", "mask", "sizes"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_a_third_party_colour_step_is_applied_inside_the_warp():
    batch = make_batch(4, 48, 64, seed=3, smooth=True)
    brighten = Brighten(generator=_gen(9))
    pipeline = A.Compose([*_warp(1), brighten])
    out = pipeline(batch)
    assert brighten.applied == 0  # fused: no pass of its own over the warped batch
    # The same gains through RandomHSV, which the warp has always recoloured with.
    gains = brighten.hsv_gains(pipeline.last_params[-1])
    reference = A.Compose([*_warp(1), A.RandomHSV()])
    _same(out, reference(batch, params=[*pipeline.last_params[:-1], {"gains": gains}]))
    # Replaying the parameters gives the batch again (the step's params are recorded).
    _same(out, pipeline(batch, params=pipeline.last_params))


def test_a_colour_step_that_does_not_declare_it_runs_on_its_own():
    class Plain(Brighten):
        @property
        def recolours_in_warp(self) -> bool:
            return False

    batch = make_batch(4, 48, 64, seed=3, smooth=True)
    plain = Plain(generator=_gen(9))
    A.Compose([*_warp(1), plain])(batch)
    assert plain.applied == 1


def test_a_third_party_canvas_is_read_by_the_warp_after_it():
    batch = make_batch(4, 48, 64, seed=5, smooth=True)
    frame = Frame()
    out = A.Compose([frame, *_warp(2)])(batch)
    assert (frame.deferred, frame.applied) == (1, 0)  # the canvas was never built
    built = Frame()
    want = A.Compose(_warp(2))(built(batch))  # the canvas built, then warped
    assert built.applied == 1
    _same(out, want)  # bit-identical


def test_the_loader_hands_stored_samples_to_a_third_party_module(tmp_path):
    ds = make_dataset(tmp_path / "ds", varied_shapes(10, seed=4))

    def run(declared: bool) -> tuple[list[Batch], Frame]:
        frame = Frame()
        pipeline = A.Compose([frame, *_warp(3)])
        assert pipeline.accepts_stored_samples  # its first step declares it
        transform = pipeline if declared else (lambda b: pipeline(b))
        loader = Loader(ds, 4, seed=2, transform=transform,
                        delivery=Delivery(transform_reseed=False))  # the same draws for both
        return list(loader), frame

    stored, frame = run(declared=True)
    assert frame.given_samples and all(frame.given_samples)  # no gather copy before it
    gathered, plain = run(declared=False)
    assert plain.given_samples and not any(plain.given_samples)
    assert len(stored) == len(gathered)
    for x, y in zip(stored, gathered, strict=True):
        _same(x, y)


def test_the_former_attribute_name_still_counts_with_a_warning(tmp_path):
    ds = make_dataset(tmp_path / "ds", varied_shapes(6, seed=4))
    seen: list[bool] = []

    def run(batch: Batch) -> Batch:
        seen.append(batch.samples is not None)
        return batch.materialized()

    run.takes_sample_views = True  # type: ignore[attr-defined]
    with pytest.warns(DeprecationWarning, match="accepts_stored_samples"):
        loader = Loader(ds, 3, seed=0, transform=run)
    for batch in loader:
        assert batch.samples is None
    assert seen and all(seen)


def test_capabilities_are_off_unless_declared():
    module = A.RandomFlip()
    batch = make_batch(2, 16, 16)
    assert not module.accepts_stored_samples and not module.recolours_in_warp
    assert not module.can_defer(batch)
    with pytest.raises(NotImplementedError):
        module.apply_deferred(batch, {})
    with pytest.raises(NotImplementedError):
        module.hsv_gains({})
    assert np.all([A.Mosaic().accepts_stored_samples, A.RandomHSV().recolours_in_warp])


def test_a_subclass_that_changes_random_hsv_is_not_fused():
    class Inverted(A.RandomHSV):
        def apply(self, batch: Batch, params: dict) -> Batch:
            return batch.replace(images=255 - batch.images)

    assert not Inverted().recolours_in_warp
