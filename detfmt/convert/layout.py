"""The split layout converters write: one detfmt dataset per split under one folder.

    OUT/
      splits.json            the split index (`detfmt.format.splits`), written last
      train/                 an ordinary detfmt dataset (header.json, ...)
      train.report.json      its conversion report
      val/
      val.report.json
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from detfmt.convert.report import ConversionReport
from detfmt.writing.splitroot import write_split_counts

__all__ = ["write_splits_index"]


def write_splits_index(root: Path, reports: Mapping[str, ConversionReport],
                       source_format: str, source: str) -> Path:
    """Write ``splits.json`` (atomically) listing the written splits in order."""
    return write_split_counts(root, {name: (report.images_kept, report.boxes_kept)
                                     for name, report in reports.items()}, source_format, source)
