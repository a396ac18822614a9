"""One palette and one box renderer: `detfmt show`, `augment.render_batch` and the stats plot
colour a class the same way (`detfmt.render`)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from detfmt.render import class_colour, series_colour
from detfmt.torch import Batch
from detfmt.workflows.show import render_sample

BOX = (20, 8, 52, 40)  # x1, y1, x2, y2: outline columns 20 and 51


def _batch(cls: int) -> Batch:
    x1, y1, x2, y2 = BOX
    return Batch(images=torch.zeros(1, 3, 48, 64, dtype=torch.uint8),
                 boxes=torch.tensor([[[x1, y1, x2, y2]]], dtype=torch.float32),
                 classes=torch.tensor([[cls]], dtype=torch.int32),
                 mask=torch.ones(1, 1, dtype=torch.bool))


@pytest.mark.parametrize("cls", [0, 3, 7, 23])
def test_show_and_render_batch_draw_a_class_in_its_palette_colour(cls):
    from detfmt.augment import render_batch

    sheet = np.asarray(render_batch(_batch(cls), None, class_names=["a"] * 30))
    sample = SimpleNamespace(image=np.zeros((48, 64, 3), np.uint8), boxes=np.array([BOX], float),
                             classes=np.array([cls]), fields={})
    shown = np.asarray(render_sample(sample, ["a"] * 30, cell=64))  # 64 px wide: scale 1
    for image in (sheet, shown):
        assert image.shape == (48, 64, 3)
        # the left and right edges of the box, below its label tab: the class's colour
        assert tuple(image[30, BOX[0]]) == class_colour(cls)
        assert tuple(image[30, BOX[2] - 1]) == class_colour(cls)
        assert not image[30, BOX[0] + 8].any()  # inside: untouched
    np.testing.assert_array_equal(sheet, shown)  # one renderer


def test_the_stats_plot_colours_come_from_the_palette():
    from detfmt.workflows import plot

    used: list[str] = []
    ax = SimpleNamespace(bar=lambda *a, color, **k: used.append(color),
                         set_xticks=lambda *a, **k: None, set_xticklabels=lambda *a, **k: None,
                         set_title=lambda *a, **k: None, legend=lambda *a, **k: None)
    plot._classes(ax, {"classes": [{"name": "a", "boxes": 3, "images": 2}]})
    assert used == [series_colour(0), series_colour(1)]
    assert series_colour(0) == "#{:02x}{:02x}{:02x}".format(*class_colour(3))
