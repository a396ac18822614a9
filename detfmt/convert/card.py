"""The dataset card: license, description, source, fingerprint and conversion report, stored
inside the dataset as documented keys of the header's ``metadata`` (docs/converters.md).

No format change: ``metadata`` is SPEC.md's free string-to-string map (at most 1024 members and
65536 characters in all, §15). The card keeps well inside that (`CARD_BUDGET`), so a dataset
always has room for its own metadata too, and the report is cut to `REPORT_BUDGET`: counts are
always complete, the list of problems is shortened first (``"truncated": true`` says so).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from detfmt.convert.errors import ConversionError
from detfmt.convert.report import ConversionReport

__all__ = ["CARD_BUDGET", "CARD_KEYS", "LINEAGE_KEY", "REPORT_BUDGET", "DatasetCard",
           "card_lines", "card_metadata", "read_card", "read_lineage"]

CARD_FORMAT = "detfmt-card/1"
CARD_BUDGET = 32768  # characters of all card names and values together: half of SPEC's limit
REPORT_BUDGET = 16384  # characters of the compact report JSON
TEXT_LIMITS = {"description": 8192, "license": 1024, "source": 2048}
DETAIL_LIMIT = 160

#: Every key a card may hold (``card.extra.*`` keys come from `DatasetCard.extra`).
CARD_KEYS = (
    "card.format", "card.description", "card.license", "card.source", "card.source_format",
    "card.split", "card.fingerprint", "card.fingerprint_files", "card.fingerprint_bytes",
    "conversion.report", "card.lineage",
)
#: JSON list of the steps (split, filter, remap, merge) that derived a dataset from its sources
LINEAGE_KEY = "card.lineage"
_EXTRA_KEY = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}\Z")


@dataclasses.dataclass
class DatasetCard:
    """What the user tells about a dataset; the converter adds the source format, split,
    fingerprint and conversion report.

    ``source``: where the data comes from (a URL, a citation); default: the source path given to
    the converter. ``extra``: further ``{key: text}`` pairs, stored as ``card.extra.<key>``.
    """

    description: str | None = None
    license: str | None = None
    source: str | None = None
    extra: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def coerce(cls, value: DatasetCard | Mapping[str, Any] | None) -> DatasetCard:
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            known = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise ConversionError(f"unknown card fields {unknown}; use {sorted(known)}",
                                      rule="USAGE")
            return cls(**value)
        raise ConversionError(f"card must be a DatasetCard or a mapping, got "
                              f"{type(value).__name__}", rule="USAGE")

    def check(self) -> None:
        for name, limit in TEXT_LIMITS.items():
            text = getattr(self, name)
            if text is not None and (not isinstance(text, str) or len(text) > limit):
                raise ConversionError(f"card {name} must be text of at most {limit} characters",
                                      rule="USAGE")
        for key, text in self.extra.items():
            if not isinstance(key, str) or not _EXTRA_KEY.match(key):
                raise ConversionError(f"card extra key {key!r} must match {_EXTRA_KEY.pattern}",
                                      rule="USAGE")
            if not isinstance(text, str):
                raise ConversionError(f"card extra {key!r} must be text", rule="USAGE")


def compact_report(report: ConversionReport, budget: int = REPORT_BUDGET) -> str:
    """The report as compact JSON of at most ``budget`` characters: every count, then as many
    of the listed problems (skipped images first) as fit."""
    data: dict[str, Any] = {
        "images": {"source": report.images_source, "kept": report.images_kept,
                   "skipped": dict(sorted(report.images_skipped.items()))},
        "boxes": {"source": report.boxes_source, "kept": report.boxes_kept,
                  "dropped": dict(sorted(report.boxes_dropped.items())),
                  "fixed": dict(sorted(report.boxes_fixed.items()))},
        "notes": dict(sorted(report.notes.items())),
        "balanced": report.balanced,
        "codec": report.codec,
        "max_side": report.max_side,
        "problems_listed": len(report.issues),
        "problems": [],
        "truncated": False,
    }
    skipped = [i for i in report.issues if i.reason in report.images_skipped]
    others = [i for i in report.issues if i.reason not in report.images_skipped]
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    if len(text) > budget:  # only absurd counters get here: keep the totals
        return json.dumps({"images": {"source": report.images_source,
                                      "kept": report.images_kept},
                           "boxes": {"source": report.boxes_source, "kept": report.boxes_kept},
                           "truncated": True}, separators=(",", ":"))
    used = len(text)
    for issue in skipped + others:
        item = [issue.reason, issue.path, issue.detail[:DETAIL_LIMIT], issue.boxes]
        size = len(json.dumps(item, separators=(",", ":"), ensure_ascii=False)) + 1
        if used + size + 8 > budget:
            data["truncated"] = True
            break
        data["problems"].append(item)
        used += size
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def card_metadata(
    card: DatasetCard,
    *,
    source_format: str,
    source: str,
    split: str | None,
    fingerprint: tuple[str, int, int] | None,
    report: ConversionReport | None,
) -> dict[str, str]:
    """The header metadata members of a card (see `CARD_KEYS`)."""
    card.check()
    meta = {"card.format": CARD_FORMAT, "card.source_format": source_format,
            "card.source": card.source if card.source is not None else source}
    if card.description is not None:
        meta["card.description"] = card.description
    if card.license is not None:
        meta["card.license"] = card.license
    if split is not None:
        meta["card.split"] = split
    if fingerprint is not None:
        digest, files, size = fingerprint
        meta.update({"card.fingerprint": digest, "card.fingerprint_files": str(files),
                     "card.fingerprint_bytes": str(size)})
    for key, text in sorted(card.extra.items()):
        meta[f"card.extra.{key}"] = text
    used = sum(len(k) + len(v) for k, v in meta.items())
    if used > CARD_BUDGET - 1024:
        raise ConversionError(f"the card texts take {used} characters, over the "
                              f"{CARD_BUDGET - 1024} available", rule="USAGE")
    if report is not None:
        budget = min(REPORT_BUDGET, CARD_BUDGET - used - len("conversion.report"))
        meta["conversion.report"] = compact_report(report, budget)
    return meta


def read_card(metadata: Mapping[str, str]) -> dict[str, Any]:
    """The card of a dataset's header metadata as plain data ({} when it has none); the report
    is parsed back from JSON (or kept as text if it is not valid JSON)."""
    card: dict[str, Any] = {}
    for key, value in metadata.items():
        if key.startswith("card.") and key != LINEAGE_KEY:
            card[key[len("card."):]] = value
    if LINEAGE_KEY in metadata:
        card["lineage"] = read_lineage(metadata)
    report = metadata.get("conversion.report")
    if report is not None:
        try:
            card["report"] = json.loads(report)
        except ValueError:
            card["report"] = report
    return card


def card_lines(metadata: Mapping[str, str]) -> list[str]:
    """The card as the indented lines ``detfmt info`` prints ([] without a card)."""
    card = read_card(metadata)
    if not card:
        return []
    lines = ["  card:"]
    for key in ("description", "license", "source", "source_format", "split"):
        if key in card:
            text = " ".join(str(card[key]).split())
            lines.append(f"    {key}: {text[:300]}{'...' if len(text) > 300 else ''}")
    if "fingerprint" in card:
        lines.append(f"    fingerprint: {card['fingerprint']} ({card.get('fingerprint_files', '?')}"
                     f" files, {card.get('fingerprint_bytes', '?')} bytes)")
    for key in sorted(k for k in card if k.startswith("extra.")):
        lines.append(f"    {key[len('extra.'):]}: {card[key]}")
    report = card.get("report")
    if isinstance(report, dict) and "images" in report:
        images, boxes = report["images"], report.get("boxes", {})
        skipped = images.get("skipped", {})
        dropped = boxes.get("dropped", {})
        lines.append(f"    conversion: images {images.get('source')} in source, "
                     f"{images.get('kept')} kept, {sum(skipped.values())} skipped; boxes "
                     f"{boxes.get('source')} in source, {boxes.get('kept')} kept, "
                     f"{sum(dropped.values())} dropped")
        for title, counter in (("skipped", skipped), ("dropped", dropped),
                               ("fixed", boxes.get("fixed", {})),
                               ("notes", report.get("notes", {}))):
            if counter:
                items = ", ".join(f"{k} {v}" for k, v in counter.items())
                lines.append(f"      {title}: {items}")
    elif report is not None:
        lines.append("    conversion report: present but not valid JSON")
    return lines + _lineage_lines(card.get("lineage", []))


def read_lineage(metadata: Mapping[str, str]) -> list[dict[str, Any]]:
    """The lineage steps of a dataset's metadata, oldest first ([] when it has none or it is
    unreadable); see `detfmt.workflows.lineage`."""
    try:
        steps = json.loads(metadata.get(LINEAGE_KEY, "[]"))
    except ValueError:
        return []
    return [step for step in steps if isinstance(step, dict)] if isinstance(steps, list) else []


def _lineage_lines(steps: list[dict[str, Any]]) -> list[str]:
    if not steps:
        return []
    lines = ["    lineage (oldest first):"]
    if steps[0].get("earlier"):
        lines.append(f"      ... {steps[0]['earlier']} earlier step(s) not kept")
    for step in steps:
        args = step.get("args") if isinstance(step.get("args"), dict) else {}
        shown = " ".join(f"{key}={_short(value)}" for key, value in args.items()
                         if value not in (None, False, [], ""))
        sources = [s for s in step.get("sources", []) if isinstance(s, dict)]
        names = ", ".join(f"{s.get('path')} ({s.get('samples')} samples)" for s in sources[:4])
        more = len(sources) - min(4, len(sources)) + int(step.get("more_sources", 0) or 0)
        if more > 0:
            names += f" and {more} more"
        lines.append(f"      {step.get('op')} {shown}".rstrip() + f" -> {step.get('samples')} "
                     f"samples, from {names}")
    return lines


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."
