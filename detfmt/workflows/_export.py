"""What the YOLO and VOC exports share: the datasets to export (every split of a split root),
image files, unique names, and an output folder that appears complete or not at all.

Images are the stored payload bytes when the codec is JPEG or PNG (no re-encode: the exported
file is exactly what was stored); raw and zstd images are decoded and encoded once, as PNG
(lossless) or JPEG. Boxes are exported in the stored image's pixels, matching the exported image.

The export is written into a hidden folder beside ``out`` and renamed into place at the end, so
an interrupted export leaves no half-written folder under the name asked for. An existing
``out`` is replaced only with ``overwrite`` and only when it is an earlier detfmt export (it
holds `MARKER`) or empty: a folder of the user's own files is never removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np

from detfmt import errors
from detfmt.reading.protocol import DatasetLike
from detfmt.workflows._copy import Source, opened

__all__ = ["MARKER", "ExportImages", "Part", "export_parts", "staged_folder"]

MARKER = ".detfmt-export"
ImageFormat = Literal["png", "jpg"]
_UNSAFE = re.compile(r"[^A-Za-z0-9_.+-]+")


@dataclasses.dataclass
class Part:
    """One dataset to export and the split name it goes under."""

    name: str
    ds: DatasetLike


@contextlib.contextmanager
def export_parts(src: Source, default_split: str = "train") -> Iterator[list[Part]]:
    """The datasets of ``src``: every split of a split root (``splits.json``), else the dataset
    itself under its card's split name (``card.split``) or ``default_split``."""
    if isinstance(src, (str, os.PathLike)):
        from detfmt.reading.opener import read_split_index, split_location

        index = read_split_index(src)
        if index is not None:
            with contextlib.ExitStack() as stack:
                parts = [Part(name, stack.enter_context(opened(split_location(src, name))))
                         for name in index]
                yield parts
            return
    with opened(src) as ds:
        yield [Part(ds.metadata.get("card.split") or default_split, ds)]


class ExportImages:
    """Writes each sample's image file, named uniquely within a namespace (a folder)."""

    def __init__(self, image_format: ImageFormat = "png", jpeg_quality: int = 95) -> None:
        if image_format not in ("png", "jpg"):
            raise errors.UsageError(f"image_format must be 'png' or 'jpg', got {image_format!r}")
        if isinstance(jpeg_quality, bool) or not isinstance(jpeg_quality, int) or \
                not 1 <= jpeg_quality <= 100:
            raise errors.UsageError(f"jpeg_quality must be an int in 1..100, got {jpeg_quality!r}")
        self.image_format = image_format
        self.jpeg_quality = jpeg_quality
        self.copied = 0
        self.encoded = 0

    def stem(self, ds: DatasetLike, i: int, taken: set[str]) -> str:
        """A file stem for sample ``i``: its stored file name's stem (made safe), made unique
        in ``taken`` with the sample index; the index alone when it has no name."""
        name = ds.string_field("file_name", i) if "file_name" in ds.schema.image_fields else ""
        stem = _UNSAFE.sub("_", Path(name.replace("\\", "/")).stem).strip("._")[:200]
        if not stem:
            stem = f"{i:08d}"
        if stem.lower() in taken:
            stem = f"{stem}_{i}"
            while stem.lower() in taken:
                stem += "_"
        taken.add(stem.lower())
        return stem

    def write(self, ds: DatasetLike, i: int, folder: Path, stem: str) -> str:
        """Write sample ``i``'s image into ``folder``; returns the file name."""
        codec = ds.codec(i)
        if codec in ("jpeg", "png"):
            name = f"{stem}.{'jpg' if codec == 'jpeg' else 'png'}"
            (folder / name).write_bytes(ds.payload(i))
            self.copied += 1
            return name
        from PIL import Image

        image = Image.fromarray(np.ascontiguousarray(ds[i].image), "RGB")
        buffer = io.BytesIO()
        if self.image_format == "png":
            image.save(buffer, format="PNG", compress_level=3)
        else:
            image.save(buffer, format="JPEG", quality=self.jpeg_quality, subsampling=0)
        name = f"{stem}.{self.image_format}"
        (folder / name).write_bytes(buffer.getvalue())
        self.encoded += 1
        return name


@contextlib.contextmanager
def staged_folder(out: str | os.PathLike[str], overwrite: bool) -> Iterator[Path]:
    """A hidden folder beside ``out`` to write the export into; renamed to ``out`` when the
    block ends without an error, removed otherwise."""
    target = Path(os.path.abspath(os.fspath(out)))
    _check_target(target, overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = target.with_name(f".{target.name}.export-{uuid.uuid4().hex[:12]}")
    try:
        stage.mkdir()
        (stage / MARKER).write_text("written by detfmt export; `--overwrite` may replace this "
                                    "folder\n", encoding="utf-8")
        yield stage
        _check_target(target, overwrite)
        _publish(stage, target)
    except OSError as error:
        if isinstance(error, errors.DetfmtError):
            raise
        raise errors.WriteError(f"export failed: {error.strerror or error}", errno=error.errno,
                                path=target) from error
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)


def _check_target(target: Path, overwrite: bool) -> None:
    if not os.path.lexists(target):
        return
    if target.is_symlink() or not target.is_dir():
        raise errors.TargetExistsError("the output exists and is not a folder", path=target)
    entries = os.listdir(target)
    if not entries:
        return
    if MARKER not in entries:
        raise errors.TargetExistsError("the output folder holds files that are not a detfmt "
                                       "export; choose another folder", path=target)
    if not overwrite:
        raise errors.TargetExistsError("the output holds an earlier export; pass "
                                       "overwrite=True to replace it", path=target)


def _publish(stage: Path, target: Path) -> None:
    if not os.path.lexists(target):
        os.rename(stage, target)
        return
    old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:12]}")
    os.rename(target, old)
    try:
        os.rename(stage, target)
    except OSError:
        os.rename(old, target)  # put the earlier export back
        raise
    shutil.rmtree(old, ignore_errors=True)
