"""Drawing labelled boxes: the one palette and the one box renderer of detfmt.

`detfmt show` (dataset samples), `detfmt.augment.render_batch` (an augmented batch) and the
``detfmt stats --plot`` figures all take their colours from `palette`, and the two image
renderers draw boxes with `boxes.draw_boxes`, so a class looks the same everywhere.
"""

from detfmt.render.boxes import draw_boxes
from detfmt.render.palette import PALETTE, class_colour, hex_colour, series_colour

__all__ = ["PALETTE", "class_colour", "draw_boxes", "hex_colour", "series_colour"]
