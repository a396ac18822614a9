"""The class colours: 20 distinct colours (Sasha Trubetskoy's), class k gets colour k mod 20."""

from __future__ import annotations

__all__ = ["PALETTE", "class_colour", "hex_colour", "series_colour", "text_colour"]

Colour = tuple[int, int, int]

PALETTE: tuple[Colour, ...] = (
    (230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
    (145, 30, 180), (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212),
    (0, 128, 128), (220, 190, 255), (170, 110, 40), (255, 250, 200), (128, 0, 0),
    (170, 255, 195), (128, 128, 0), (255, 215, 180), (0, 0, 128), (255, 255, 255),
)


def class_colour(cls: int) -> Colour:
    """The colour of class ``cls`` (any int: the palette repeats)."""
    return PALETTE[int(cls) % len(PALETTE)]


def hex_colour(cls: int) -> str:
    """`class_colour` as ``"#rrggbb"`` (for matplotlib)."""
    return "#{:02x}{:02x}{:02x}".format(*class_colour(cls))


_SERIES = (3, 4, 1, 0, 5, 10)  # blue, orange, green, red, purple, teal


def series_colour(k: int) -> str:
    """``"#rrggbb"`` of a chart's k-th data series (blue, orange, green...: the palette's)."""
    return hex_colour(_SERIES[k % len(_SERIES)])


def text_colour(background: Colour) -> Colour:
    """Black or white, whichever reads on ``background``."""
    luma = 0.299 * background[0] + 0.587 * background[1] + 0.114 * background[2]
    return (255, 255, 255) if luma < 128 else (0, 0, 0)
