"""Letterbox's ``rounding``: ``"ceil"`` sizes the content as Ultralytics' ``load_image`` does
(``min(ceil(w0 * r), S)``), which the Ultralytics presets use (the resize of `Mosaic` too);
the default ``"round"`` (half to even, as Ultralytics' ``LetterBox`` and torchvision) is kept.
"""

from __future__ import annotations

import math

import pytest
import torch

import detfmt.augment as A
from detfmt.augment.presets import yolo_train, yolo_val
from detfmt.errors import UsageError

from ._helpers import make_batch

SIZES = [(428, 640), (640, 428), (480, 640), (375, 500), (333, 500), (1, 300), (299, 300),
         (17, 1000), (720, 1280), (1080, 1920), (427, 641), (64, 64), (50, 30)]


def _load_image_size(h0: int, w0: int, imgsz: int) -> tuple[int, int]:
    """Ultralytics ``BaseDataset.load_image`` (rect_mode): the resized (h, w)."""
    r = imgsz / max(h0, w0)
    if r == 1:
        return h0, w0
    return min(math.ceil(h0 * r), imgsz), min(math.ceil(w0 * r), imgsz)


@pytest.mark.parametrize("imgsz", [96, 128, 192, 320, 640])
def test_ceil_is_ultralytics_load_image(imgsz):
    h = torch.tensor([s[0] for s in SIZES], dtype=torch.float64)
    w = torch.tensor([s[1] for s in SIZES], dtype=torch.float64)
    fit = A.Letterbox(imgsz, rounding="ceil").fit(h, w)
    got = list(zip(fit.height.long().tolist(), fit.width.long().tolist(), strict=True))
    assert got == [_load_image_size(h0, w0, imgsz) for h0, w0 in SIZES]


def test_round_stays_the_default():
    h = torch.tensor([s[0] for s in SIZES], dtype=torch.float64)
    w = torch.tensor([s[1] for s in SIZES], dtype=torch.float64)
    fit = A.Letterbox(96).fit(h, w)
    ratios = [min(96 / h0, 96 / w0) for h0, w0 in SIZES]
    expected = [(max(round(h0 * r), 1), max(round(w0 * r), 1))
                for (h0, w0), r in zip(SIZES, ratios, strict=True)]
    assert list(zip(fit.height.long().tolist(), fit.width.long().tolist(), strict=True)) == expected


def _flat(height: int, width: int, level: int = 200):
    batch = make_batch(1, height, width, 2, seed=0)
    return batch.replace(images=torch.full_like(batch.images, level))


@pytest.mark.parametrize(("rounding", "rows"), [("ceil", 65), ("round", 64)])
def test_content_rows_of_a_640x428_image_at_96(rounding, rows):
    """428 * 96 / 640 = 64.2: Ultralytics' dataset makes 65 rows of image, round() 64."""
    out = A.Letterbox(96, rounding=rounding)(_flat(428, 640))
    column = out.images[0, 0, :, 48]
    assert int((column == 200).sum()) == rows
    assert int(((column != 200) & (column != 114)).sum()) == 0  # no blended edge row


def test_mosaic_resize_rounds_as_its_letterbox():
    """Mosaic(resize=S, resize_rounding="ceil") places the tiles the unfused Letterbox(S,
    rounding="ceil") -> Mosaic places them: same boxes, same sizes."""
    batch = make_batch(4, 428, 640, 3, seed=1)
    fused = A.Mosaic(p=1.0, resize=96, resize_rounding="ceil",
                     generator=torch.Generator().manual_seed(0))
    out = fused(batch)
    reference = A.Compose([A.Letterbox(96, center=False, rounding="ceil"), A.Mosaic(p=1.0)])
    ref = reference(batch, [{}, fused.last_params])
    assert torch.equal(out.mask, ref.mask)
    torch.testing.assert_close(out.boxes, ref.boxes, rtol=0, atol=1e-4)
    rounded = A.Compose([A.Letterbox(96, center=False), A.Mosaic(p=1.0)])(
        batch, [{}, fused.last_params])
    assert not torch.allclose(out.boxes[out.mask], rounded.boxes[rounded.mask], atol=0.1)


def test_ultralytics_presets_use_ceil():
    closed = yolo_train(96, mosaic=0.0)
    assert closed.transforms[0].rounding == "ceil"
    mosaic = yolo_train(96)
    assert mosaic.transforms[0].resize.rounding == "ceil"
    out = yolo_val(96)(_flat(428, 640))
    assert int((out.images[0, 0, :, 48] == 200).sum()) == 65


def test_unknown_rounding_is_refused():
    with pytest.raises(UsageError, match="rounding"):
        A.Letterbox(96, rounding="floor")
