"""Fixtures for the converter tests: tiny synthetic sources and a recording stand-in writer."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import detfmt.writing.writer
from detfmt.writing import image as _image

SHARED = Path(os.environ.get("DETFMT_SHARED_DATA",
                             Path(__file__).resolve().parents[2].parent / "shared" / "data"))


def shared_dataset(name: str) -> Path:
    """A real dataset under ../shared/data, or skip the test cleanly when it is absent."""
    path = SHARED / name
    if not path.is_dir():
        pytest.skip(f"{path} not available")
    return path


@dataclasses.dataclass
class Recorded:
    """What the stand-in writer received."""

    samples: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    path: Path | None = None


@pytest.fixture
def recorder(monkeypatch) -> Recorded:
    """Replace the writer by a recorder that decodes paths like the writer does (load_rgb)."""
    recorded = Recorded()

    def fake_write(samples, path, **kwargs):
        recorded.path, recorded.kwargs = Path(path), kwargs
        for sample in samples:
            sample = dict(sample)
            if isinstance(sample["image"], (str, os.PathLike)):
                sample["image"] = _image.load_rgb(sample["image"])
            recorded.samples.append(sample)

    monkeypatch.setattr(detfmt.writing.writer, "write", fake_write)
    return recorded


def save_image(path: Path, width: int, height: int, *, seed: int = 0, orientation: int = 1,
               mode: str = "RGB", fmt: str | None = None) -> Path:
    """Write a random-pixel image; ``orientation`` sets the EXIF tag (JPEG only)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    image = Image.fromarray(pixels, "RGB")
    if mode != "RGB":
        image = image.convert(mode)
    kwargs: dict[str, Any] = {}
    if orientation != 1:
        exif = Image.Exif()
        exif[_image.EXIF_ORIENTATION] = orientation
        kwargs["exif"] = exif.tobytes()
    image.save(path, format=fmt, **kwargs)
    return path


def write_coco(path: Path, images: list[dict], annotations: list[dict],
               categories: list[dict]) -> Path:
    path.write_text(json.dumps({"images": images, "annotations": annotations,
                                "categories": categories}))
    return path


def balanced(report) -> bool:
    return report.balanced
