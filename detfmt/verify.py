"""``detfmt.verify``: the full check of a dataset (every byte, every label, every checksum).

``open`` is structural and cheap; ``verify`` reads everything: it hashes every file, checks every
payload's checksum and zero padding, decodes every image and checks every label, and reports all
violations with their rule id, file and sample index.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xxhash

from detfmt import errors, spec, validate
from detfmt.reader import Dataset
from detfmt.validate import Violation

__all__ = ["VerifyReport", "verify"]

MAX_REPORTED = 1000


@dataclass
class VerifyReport:
    """The outcome of :func:`verify`: ``ok`` when ``violations`` is empty."""

    path: Path
    num_samples: int = 0
    violations: list[Violation] = field(default_factory=list)
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, violation: Violation) -> None:
        if len(self.violations) < MAX_REPORTED:
            self.violations.append(violation)
        else:
            self.truncated = True


def verify(path: str | os.PathLike[str], *, raise_on_error: bool = True,
           max_header_bytes: int = spec.MAX_HEADER_BYTES) -> VerifyReport:
    """Check everything SPEC.md requires of the dataset at ``path``.

    Returns:
        a `VerifyReport` listing every violation (up to 1000).

    Raises:
        FormatError: (when ``raise_on_error``) the first violation's typed error, with the full
            list attached as ``error.violations``.
    """
    root = Path(path)
    if os.path.lexists(root / "manifest.json"):  # a 1.1 sharded root (S-1, §19.2: any entry)
        from detfmt.shard.verify import verify_sharded

        return verify_sharded(root, raise_on_error=raise_on_error)
    report = VerifyReport(path=root)
    try:
        dataset = Dataset(root, max_header_bytes=max_header_bytes)
    except errors.FormatError as error:
        report.add(Violation(error.rule or "FORMAT", error.path or str(root), error.message,
                             error.index))
        return _finish(report, raise_on_error)
    report.num_samples = len(dataset)
    try:
        dataset.validate_index()
    except errors.FormatError as error:
        report.add(Violation(error.rule or "FORMAT", error.path or str(root), error.message,
                             error.index))
        _check_files(dataset, report)
        return _finish(report, raise_on_error)
    _check_files(dataset, report)
    # SPEC §12 steps 7-9: labels, then image fields, then payloads (cheap checks first)
    _check_labels(dataset, report)
    _check_image_fields(dataset, report)
    _check_payloads(dataset, report)
    return _finish(report, raise_on_error)


def _finish(report: VerifyReport, raise_on_error: bool) -> VerifyReport:
    if raise_on_error and report.violations:
        error = report.violations[0].to_error()
        error.violations = list(report.violations)  # type: ignore[attr-defined]
        raise error
    return report


def _check_files(dataset: Dataset, report: VerifyReport) -> None:
    for name, info in dataset.header.files.items():
        member = dataset._members[name]
        digest = xxhash.xxh3_64()
        if member.map is not None:
            view = memoryview(member.map)
            step = 64 << 20
            for start in range(0, member.size, step):
                digest.update(view[start : start + step])
            view.release()
        if digest.hexdigest() != info.xxh3_64:
            report.add(Violation("FILE_CHECKSUM", member.path,
                                 f"xxh3-64 is {digest.hexdigest()}, header says {info.xxh3_64}"))
    check_codec_counts(dataset, report)


def check_codec_counts(dataset: Dataset, report: VerifyReport) -> None:
    """SPEC §12 step 6: the non-zero entries of ``image.codecs`` equal the index's counts."""
    codecs = np.bincount(dataset.index["codec"], minlength=4) if len(dataset) else np.zeros(4)
    declared = dataset.header.image.codecs
    if declared:
        actual = {spec.CODEC_NAMES[i]: int(c) for i, c in enumerate(codecs[:4]) if c}
        if {k: v for k, v in declared.items() if v} != actual:
            report.add(Violation("HEADER_SCHEMA", str(dataset.path / spec.HEADER_FILE),
                                 f"image.codecs says {declared}, the index has {actual}"))


def _check_payloads(dataset: Dataset, report: VerifyReport) -> None:
    blob = dataset._blob
    path = dataset.blob_path
    index = dataset.index
    scratch = np.empty(0, np.uint8)
    for i in range(len(dataset)):
        start = int(index["offset"][i])
        length = int(index["nbytes"][i])
        payload = blob[start : start + length]
        if xxhash.xxh3_64_intdigest(payload) != int(index["checksum"][i]):
            report.add(Violation("CHECKSUM", path, "payload does not match its xxh3-64 checksum",
                                 i))
            continue
        end = start + length
        padding = blob[end : spec.align_up(end)]
        if padding.any():
            report.add(Violation("PADDING_NONZERO", path,
                                 f"alignment padding after the payload (bytes {end}.."
                                 f"{spec.align_up(end)}) is not zero", i))
        if int(index["codec"][i]) == spec.CODEC_RAW:
            continue
        h, w = int(index["height"][i]), int(index["width"][i])
        if scratch.size < h * w * 3:
            scratch = np.empty(h * w * 3, np.uint8)
        try:
            dataset.decode_into(i, scratch[: h * w * 3].reshape(h, w, 3))
        except errors.FormatError as error:
            report.add(Violation(error.rule or "IMAGE_DECODE", path, error.message, i))


def _check_labels(dataset: Dataset, report: VerifyReport) -> None:
    block = 4096
    seen: set[tuple[str, int]] = set()
    for violation in dataset.iter_label_violations(block):
        key = (violation.rule, (violation.index or 0) // block)
        if key not in seen:  # one report per rule per block keeps output short
            seen.add(key)
            report.add(violation)


def _check_image_fields(dataset: Dataset, report: VerifyReport) -> None:
    fields = dataset.image_fields
    if "orig_size" in fields:
        bad = np.flatnonzero((fields["orig_size"] < 1).any(axis=1))
        if bad.size:
            report.add(Violation("IMAGE_FIELD", str(dataset.path / "orig_size.npy"),
                                 "orig_size must be positive", int(bad[0])))
    if "scale_offset" in fields:
        values = fields["scale_offset"]
        bad = np.flatnonzero(~np.isfinite(values).all(axis=1) | (values[:, :2] <= 0).any(axis=1))
        if bad.size:
            report.add(Violation("IMAGE_FIELD", str(dataset.path / "scale_offset.npy"),
                                 "scale_offset must be finite with positive scales", int(bad[0])))
    for name, (offsets, member) in dataset._strings.items():
        path = str(dataset.path / f"{name}.offsets.npy")
        problems = list(validate.check_string_offsets(offsets, member.size, path))
        for violation in problems:
            report.add(violation)
        if problems:
            continue
        for i in range(len(dataset)):
            try:
                dataset.string_field(name, i)
            except errors.FormatError as error:
                report.add(Violation(error.rule or "IMAGE_FIELD", error.path or "", error.message,
                                     i))
                break
