"""Load the cases, materialize them, and judge a reader's answer (shared by the CLI and pytest)."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent

__all__ = ["ROOT", "Case", "check_dump", "load_cases", "materialize"]


@dataclass(frozen=True)
class Case:
    id: str
    kind: str  # "valid" or "invalid"
    path: Path
    description: str
    format_version: str = "1.0"  # "1.1": a sharded root (SPEC.md section 19)
    rule: str | None = None  # invalid cases: the rule id the reader must report
    expected: Path | None = None  # valid cases: the expected-output sidecar
    grow: dict[str, Any] | None = None
    links: tuple[tuple[str, str], ...] = ()  # (path, target): symbolic links to make first


def load_cases(root: Path = ROOT) -> list[Case]:
    catalog = json.loads((root / "cases.json").read_text(encoding="utf-8"))
    cases = [Case(id=c["id"], kind="valid", path=root / c["path"], description=c["description"],
                  format_version=c.get("format_version", "1.0"), expected=root / c["expected"],
                  links=tuple(tuple(link) for link in c.get("links", [])))
             for c in catalog["valid"]]
    cases += [Case(id=c["id"], kind="invalid", path=root / c["path"],
                   description=c["description"], format_version=c.get("format_version", "1.0"),
                   rule=c["rule"], grow=c.get("grow"),
                   links=tuple(tuple(link) for link in c.get("links", [])))
              for c in catalog["invalid"]]
    return cases


@contextmanager
def materialize(case: Case) -> Iterator[Path]:
    """The dataset directory to hand to a reader: the committed one, or a temporary copy for
    cases that cannot be committed as they are: "grow" (a file grown to a size) and "links"
    (symbolic links, made here so the suite holds plain files only)."""
    if case.grow is None and not case.links:
        yield case.path
        return
    with tempfile.TemporaryDirectory(prefix="detfmt-conformance-") as scratch:
        target = Path(scratch) / case.id
        shutil.copytree(case.path, target)
        if case.grow is not None:
            member = target / case.grow["file"]
            data = member.read_bytes()
            filler = case.grow["byte"].encode("ascii")
            member.write_bytes(data + filler * (case.grow["size"] - len(data)))
        for path, link_target in case.links:
            (target / path).symlink_to(link_target)
        yield target


def _pixels_problem(expected: dict[str, Any], pixels: bytes) -> str | None:
    if "pixels_sha256" in expected:
        got = hashlib.sha256(pixels).hexdigest()
        return None if got == expected["pixels_sha256"] else "pixels differ (sha256)"
    tolerance = expected["pixels_tolerance"]
    reference = np.frombuffer(base64.b64decode(tolerance["reference"]), np.uint8)
    decoded = np.frombuffer(pixels, np.uint8)
    if decoded.size != reference.size:
        return f"pixels: {decoded.size} bytes, expected {reference.size}"
    error = np.abs(decoded.astype(np.int16) - reference.astype(np.int16))
    if error.mean() > tolerance["max_mean_abs_error"] or error.max() > tolerance["max_abs_error"]:
        return (f"JPEG pixels: mean/max abs error {error.mean():.3f}/{int(error.max())}, allowed "
                f"{tolerance['max_mean_abs_error']}/{tolerance['max_abs_error']}")
    return None


def check_dump(dump: Any, expected: dict[str, Any]) -> list[str]:
    """Every way ``dump`` departs from the expected output (empty when it conforms)."""
    # 1.0 datasets: {"header", "samples"}; 1.1 sharded roots: {"manifest", "samples"}
    if not isinstance(dump, dict) or set(dump) != set(expected):
        return [f"the dump must be an object with exactly {sorted(expected)}"]
    problems = []
    for key in sorted(set(expected) - {"samples"}):
        if dump[key] != expected[key]:
            problems.append(f"{key} differs from {key}.json")
    samples = dump["samples"]
    if not isinstance(samples, list) or len(samples) != len(expected["samples"]):
        return [*problems, f"expected {len(expected['samples'])} samples"]
    keys = ("height", "width", "channels", "codec", "count", "boxes_sha256", "classes_sha256",
            "box_fields", "image_fields")
    for i, (got, want) in enumerate(zip(samples, expected["samples"], strict=True)):
        if not isinstance(got, dict):
            problems.append(f"sample {i}: not an object")
            continue
        for key in keys:
            if got.get(key) != want[key]:
                problems.append(f"sample {i}: {key} is {got.get(key)!r}, expected {want[key]!r}")
        try:
            pixels = base64.b64decode(got.get("pixels", ""), validate=True)
        except (ValueError, TypeError):
            problems.append(f"sample {i}: pixels is not base64")
            continue
        problem = _pixels_problem(want, pixels)
        if problem:
            problems.append(f"sample {i}: {problem}")
    return problems
