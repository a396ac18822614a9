"""The conversion report: every image and box of the source is counted as kept, fixed or skipped.

A converter never drops anything silently: each decision goes through `ConversionReport`, which is
printed at the end of a conversion and saved as JSON next to the dataset.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from detfmt.convert.codec import size_advice
from detfmt.convert.inputs import printable

__all__ = ["ConversionReport", "Issue", "report_path"]

MAX_LISTED_ISSUES = 1000  # per reason; counts stay exact beyond it


@dataclasses.dataclass(frozen=True)
class Issue:
    """One decision about one file: ``reason`` is a stable id (see docs/converters.md)."""

    reason: str
    path: str
    detail: str = ""
    boxes: int = 0  # boxes affected (dropped with a skipped image, clipped, ...)


@dataclasses.dataclass
class ConversionReport:
    """Counts and itemised decisions of one conversion.

    Invariants (checked by the tests): ``images_source == images_kept + sum(images_skipped)`` and
    ``boxes_source == boxes_kept + sum(boxes_dropped)``; fixes (``boxes_fixed``) are counted among
    the kept boxes.
    """

    source_format: str
    source: str
    destination: str
    split: str | None = None
    images_source: int = 0
    images_kept: int = 0
    boxes_source: int = 0
    boxes_kept: int = 0
    images_skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    boxes_dropped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    boxes_fixed: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    notes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    issues: list[Issue] = dataclasses.field(default_factory=list)
    classes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    codec: str = ""
    codec_reason: str = ""
    #: {codec: estimated bytes of the stored images}, said before writing (see codec.py)
    size_estimates: dict[str, int] = dataclasses.field(default_factory=dict)
    source_bytes: int = 0  # bytes of the kept images' source files
    max_side: int | None = None
    workers: int = 0
    seconds: float = 0.0
    written: bool = False
    error: str | None = None  # why a conversion failed (its report is saved all the same)
    _listed: collections.Counter = dataclasses.field(
        default_factory=collections.Counter, repr=False
    )

    def _issue(self, reason: str, path: str | os.PathLike[str], detail: str, boxes: int) -> None:
        if self._listed[reason] < MAX_LISTED_ISSUES:
            self._listed[reason] += 1
            self.issues.append(Issue(reason, printable(path), printable(detail), boxes))

    def skip_image(self, reason: str, path, detail: str = "", boxes: int = 0) -> None:
        """The image and its ``boxes`` source boxes are left out of the dataset."""
        self.images_skipped[reason] += 1
        if boxes:
            self.boxes_dropped[f"image_skipped:{reason}"] += boxes
        self._issue(reason, path, detail, boxes)

    def drop_boxes(self, reason: str, path, count: int, detail: str = "") -> None:
        """``count`` boxes of a kept image are left out."""
        if count:
            self.boxes_dropped[reason] += count
            self._issue(reason, path, detail, count)

    def fix_boxes(self, reason: str, path, count: int, detail: str = "") -> None:
        """``count`` kept boxes were changed (e.g. clipped to the image)."""
        if count:
            self.boxes_fixed[reason] += count
            self._issue(reason, path, detail, count)

    def note(self, reason: str, path=None, detail: str = "", count: int = 1) -> None:
        """Something worth knowing that changes no box (e.g. an image without a label file)."""
        self.notes[reason] += count
        if path is not None:
            self._issue(reason, path, detail, 0)

    @property
    def balanced(self) -> bool:
        """True when every source image and box is accounted for."""
        return (
            self.images_source == self.images_kept + sum(self.images_skipped.values())
            and self.boxes_source == self.boxes_kept + sum(self.boxes_dropped.values())
        )

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        del data["_listed"]
        for key in ("images_skipped", "boxes_dropped", "boxes_fixed", "notes"):
            data[key] = dict(sorted(getattr(self, key).items()))
        data["balanced"] = self.balanced
        return data

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the report as JSON, atomically (a temporary file renamed over ``path``)."""
        path = Path(path)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            temporary.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
            os.replace(temporary, path)
        finally:
            if temporary.exists():
                temporary.unlink()
        return path

    def summary(self) -> str:
        """The human-readable report printed by the CLI."""
        split = f" (split {self.split})" if self.split else ""
        lines = [
            f"{self.source_format} {self.source}{split} -> {self.destination}",
            f"  images: {self.images_source} in source, {self.images_kept} kept, "
            f"{sum(self.images_skipped.values())} skipped",
            f"  boxes:  {self.boxes_source} in source, {self.boxes_kept} kept "
            f"({sum(self.boxes_fixed.values())} fixed), {sum(self.boxes_dropped.values())} dropped",
        ]
        for title, counter in (
            ("images skipped", self.images_skipped),
            ("boxes dropped", self.boxes_dropped),
            ("boxes fixed", self.boxes_fixed),
            ("notes", self.notes),
        ):
            for reason, count in sorted(counter.items()):
                lines.append(f"  {title}: {reason}: {count}")
        if self.codec:
            lines.append(f"  codec: {self.codec} ({self.codec_reason})")
            advice = size_advice(self.codec, self.size_estimates, self.source_bytes)
            if advice:
                lines.append(f"  {advice}")
        listed = [issue for issue in self.issues if issue.reason in self.images_skipped]
        for issue in listed[:20]:
            lines.append(f"  skipped {issue.path}: {issue.reason} {issue.detail}".rstrip())
        if len(listed) > 20:
            lines.append(f"  ... {len(listed) - 20} more skipped images in the saved report")
        if not self.balanced:
            lines.append("  WARNING: the counts do not balance (a converter bug)")
        if self.error:
            lines.append(f"  FAILED: {self.error}")
        return "\n".join(lines)


def report_path(dst: str | os.PathLike[str], *, failed: bool = False) -> Path:
    """Where the report of a conversion into ``dst`` is saved: ``<dst>.report.json`` beside it
    (``<dst>.failed.report.json`` for a failed conversion over a dataset that is kept)."""
    dst = Path(dst)
    return dst.with_name(dst.name + (".failed" if failed else "") + ".report.json")
