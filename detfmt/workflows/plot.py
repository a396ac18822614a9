"""``detfmt stats DS --plot FILE.png``: a picture of a dataset's labels, in the spirit of
Ultralytics' labels.jpg: boxes and images per class, the boxes-per-image histogram, and heatmaps
of box centres and box sizes (as fractions of their image, so images of any size agree).

matplotlib is optional (``pip install 'detfmt[plot]'``) and imported only here, when a plot is
asked for; without it the call fails with a `UsageError` naming the extra.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from detfmt import errors
from detfmt.render import series_colour
from detfmt.workflows._copy import Source, opened
from detfmt.workflows.stats import BoxTable, compute_stats

__all__ = ["plot_stats"]

MAX_BARS = 60  # classes drawn in the histogram (the most frequent; the title says how many)
BINS = 50


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as error:
        raise errors.UsageError("plotting needs matplotlib: pip install 'detfmt[plot]'"
                                ) from error
    matplotlib.use("Agg", force=True)  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def plot_stats(src: Source, out: str | os.PathLike[str], *, dpi: int = 110) -> Path:
    """Draw the label statistics of a dataset (path, URL or opened dataset) into a PNG."""
    plt = _pyplot()
    with opened(src) as ds:
        table = BoxTable.read(ds)
        data = compute_stats(ds, table)
    figure, axes = plt.subplots(2, 2, figsize=(12, 9.5))
    try:
        _classes(axes[0, 0], data)
        _per_image(axes[0, 1], table)
        fractions = _fractions(table)
        _heatmap(figure, axes[1, 0], fractions[:, 0], fractions[:, 1], "box centre x / width",
                 "box centre y / height", invert=True)
        _heatmap(figure, axes[1, 1], fractions[:, 2], fractions[:, 3], "box width / image width",
                 "box height / image height", invert=False, extent=_size_extent(fractions))
        figure.suptitle(f"{data['path']}\n{data['num_samples']} images, {data['num_boxes']} "
                        f"boxes, {len(data['classes'])} classes", fontsize=11)
        figure.tight_layout()
        path = Path(out)
        try:
            figure.savefig(path, dpi=dpi)
        except OSError as error:
            raise errors.WriteError(f"cannot write the plot: {error.strerror or error}",
                                    path=path) from error
    finally:
        plt.close(figure)
    return path


def _classes(ax: Any, data: dict[str, Any]) -> None:
    classes = sorted(data["classes"], key=lambda c: -c["boxes"])
    shown = classes[:MAX_BARS]
    x = np.arange(len(shown))
    ax.bar(x - 0.2, [c["boxes"] for c in shown], 0.4, label="boxes", color=series_colour(0))
    ax.bar(x + 0.2, [c["images"] for c in shown], 0.4, label="images", color=series_colour(1))
    ax.set_xticks(x)
    ax.set_xticklabels([c["name"] for c in shown], rotation=90,
                       fontsize=max(5, min(9, 400 // max(len(shown), 1))))
    more = f" (the {len(shown)} most frequent of {len(classes)})" if len(classes) > len(shown) \
        else ""
    ax.set_title(f"boxes and images per class{more}", fontsize=10)
    ax.legend(fontsize=8)


def _per_image(ax: Any, table: BoxTable) -> None:
    counts = table.counts
    top = int(counts.max()) if len(counts) else 0
    edges = np.arange(-0.5, top + 1.5) if top <= BINS else np.linspace(-0.5, top + 0.5, BINS)
    ax.hist(counts, bins=edges, color=series_colour(0))
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("boxes per image")
    ax.set_ylabel("images")
    ax.set_title(f"boxes per image (mean {counts.mean() if len(counts) else 0:.2f}, "
                 f"{int((counts == 0).sum())} images without boxes)", fontsize=10)


def _fractions(table: BoxTable) -> np.ndarray:
    """(T, 4): centre x, centre y, width, height of each box as fractions of its stored image."""
    if not len(table.boxes):
        return np.zeros((0, 4), np.float64)
    boxes = table.boxes.astype(np.float64)
    height = table.sizes[table.image, 0].astype(np.float64)
    width = table.sizes[table.image, 1].astype(np.float64)
    return np.stack([(boxes[:, 0] + boxes[:, 2]) / 2 / width,
                     (boxes[:, 1] + boxes[:, 3]) / 2 / height,
                     (boxes[:, 2] - boxes[:, 0]) / width,
                     (boxes[:, 3] - boxes[:, 1]) / height], axis=1)


def _size_extent(fractions: np.ndarray) -> float:
    """The axis range of the size heatmap: up to where 99.5% of the boxes lie (a multiple of
    0.05, at most 1), so small objects do not all fall into one corner cell."""
    if not len(fractions):
        return 1.0
    top = float(np.percentile(fractions[:, 2:], 99.5)) * 1.1
    return float(min(1.0, max(0.05, np.ceil(top / 0.05) * 0.05)))


def _heatmap(figure: Any, ax: Any, x: np.ndarray, y: np.ndarray, xlabel: str, ylabel: str, *,
             invert: bool, extent: float = 1.0) -> None:
    from matplotlib.colors import LogNorm, Normalize

    bins = int(np.clip(np.sqrt(len(x)), 10, BINS))  # fewer, fuller cells for few boxes
    counts, _, _ = np.histogram2d(np.clip(x, 0, extent), np.clip(y, 0, extent), bins=bins,
                                  range=[[0, extent], [0, extent]])
    shown = np.ma.masked_equal(counts.T, 0)
    top = max(2.0, float(counts.max()))
    norm = LogNorm(vmin=1, vmax=top) if top > 20 else Normalize(vmin=0, vmax=top)
    image = ax.imshow(shown, origin="upper" if invert else "lower",
                      extent=(0, extent, extent, 0) if invert else (0, extent, 0, extent),
                      cmap="viridis", aspect="auto", norm=norm)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    zoom = f", axes up to {extent:g}" if extent < 1 else ""
    ax.set_title(f"{ylabel.split(' /')[0]} vs {xlabel.split(' /')[0]} ({len(x)} boxes{zoom})",
                 fontsize=10)
    figure.colorbar(image, ax=ax, label="boxes")
