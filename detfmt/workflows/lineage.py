"""Provenance of derived datasets: the dataset card's ``card.lineage`` entry.

A dataset made by split, filter, remap or merge keeps its source's card (license, source,
fingerprint, conversion report) and appends one step to ``card.lineage``: a JSON list of
``{"op", "args", "sources": [{"path", "samples", "fingerprint"?}], "samples"}``, oldest first,
so ``detfmt info`` tells where a dataset came from and what was done to it. The list is kept
within `LINEAGE_BUDGET` characters (oldest steps go first; ``"earlier"`` counts them) and the
whole metadata within SPEC's limit, so a long history never makes a write fail.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from detfmt.convert.card import LINEAGE_KEY, read_lineage
from detfmt.format import spec
from detfmt.reading.protocol import DatasetLike

__all__ = ["LINEAGE_BUDGET", "LINEAGE_KEY", "derived_metadata", "merged_metadata", "read_lineage",
           "source_entry"]

LINEAGE_BUDGET = 8192
MAX_SOURCES_LISTED = 16


def source_entry(ds: DatasetLike) -> dict[str, Any]:
    """How a step names one of its sources: location, size and the source card's fingerprint."""
    entry: dict[str, Any] = {"path": ds.location, "samples": len(ds)}
    fingerprint = ds.metadata.get("card.fingerprint")
    if fingerprint:
        entry["fingerprint"] = fingerprint
    return entry


def derived_metadata(base: Mapping[str, str], op: str, args: Mapping[str, Any],
                     sources: Sequence[Mapping[str, Any]], samples: int,
                     updates: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (the source's metadata) with ``updates`` and one more lineage step."""
    metadata = {**base, **(updates or {})}
    metadata.pop(LINEAGE_KEY, None)
    listed = list(sources[:MAX_SOURCES_LISTED])
    step: dict[str, Any] = {"op": op, "args": dict(args), "sources": listed, "samples": samples}
    if len(sources) > len(listed):
        step["more_sources"] = len(sources) - len(listed)
    steps = [*read_lineage(base), step]
    used = sum(len(k) + len(v) for k, v in metadata.items())
    budget = min(LINEAGE_BUDGET, spec.MAX_METADATA_BYTES - used - len(LINEAGE_KEY))
    earlier = 0
    while steps:
        text = json.dumps(steps, separators=(",", ":"), ensure_ascii=False)
        if len(text) <= budget and (len(metadata) < spec.MAX_METADATA_ITEMS):
            metadata[LINEAGE_KEY] = text
            break
        dropped = steps.pop(0)
        earlier += 1 + int(dropped.get("earlier", 0))
        if steps:
            steps[0] = {**steps[0], "earlier": earlier + int(steps[0].get("earlier", 0))}
    return metadata


def merged_metadata(metadatas: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """What several sources' metadata agree on: the pairs every one holds with the same value
    (a card.license all sources share survives a merge; their differing reports do not)."""
    if not metadatas:
        return {}
    common = dict(metadatas[0])
    for other in metadatas[1:]:
        common = {key: value for key, value in common.items() if other.get(key) == value}
    common.pop(LINEAGE_KEY, None)
    return common
