"""Static shapes: every module's ``apply`` traces as one graph under torch.compile."""

from __future__ import annotations

import pytest
import torch

import detfmt.augment as A
from detfmt.augment._geometry import apply_geometric

from ._helpers import make_batch


def _modules(g: torch.Generator) -> list[tuple[str, object]]:
    return [
        (
            "affine+flip",
            [A.RandomAffine(degrees=10, shear=3, generator=g), A.RandomFlip(generator=g)],
        ),
        (  # Ultralytics' defaults: eager CPU takes the host shortcuts, the trace does not
            "affine+flip defaults",
            [A.RandomAffine(generator=g), A.RandomFlip(about="canvas", generator=g)],
        ),
        ("letterbox+crop", [A.Letterbox(40), A.RandomIoUCrop(generator=g)]),
        ("hsv", A.RandomHSV(generator=g)),
        ("mosaic", A.Mosaic(p=0.5, generator=g)),
        ("mixup", A.MixUp(p=0.5, generator=g)),
        ("sanitize", A.SanitizeBoxes()),
    ]


@pytest.mark.usefixtures("torch_backend")
@pytest.mark.parametrize("index", range(7))
def test_apply_traces_without_graph_breaks(index):
    g = torch.Generator().manual_seed(71)
    batch = make_batch(3, 32, 32, 4, seed=72)
    name, module = _modules(g)[index]
    if isinstance(module, list):
        params = [None] * len(module)
        apply_geometric(batch, module, params)
        params = [m.last_params for m in module]

        def run(images, boxes, classes, mask):
            b = batch.replace(images=images, boxes=boxes, classes=classes, mask=mask)
            out = apply_geometric(b, module, params)
            return out.images, out.boxes, out.classes, out.mask
    else:
        params = module.sample(batch)

        def run(images, boxes, classes, mask):
            b = batch.replace(images=images, boxes=boxes, classes=classes, mask=mask)
            out = module.apply(b, params)
            return out.images, out.boxes, out.classes, out.mask

    torch._dynamo.reset()
    traced = torch.compile(run, backend="eager", fullgraph=True)
    args = (batch.images, batch.boxes, batch.classes, batch.mask)
    got, want = traced(*args), run(*args)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and torch.equal(a, b), name
