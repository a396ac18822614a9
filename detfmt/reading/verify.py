"""``detfmt.verify``: the full check of a dataset (every byte, every label, every checksum).

``open`` is structural and cheap; ``verify`` reads everything: it hashes every member, checks
every payload's checksum and zero padding, decodes every image and checks every label, and
reports all violations with their rule id, file and sample index. A sharded root is checked
shard by shard (its manifest entry: existence, size, xxh3-64; then the same 1.0 checks inside
it), so the two kinds can never disagree about a 1.0 rule.
"""

from __future__ import annotations

import collections
import contextlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from detfmt import errors
from detfmt.format import rules, spec
from detfmt.format.jpeg_entropy import check_entropy
from detfmt.format.rules import Violation
from detfmt.reading.dataset import Dataset
from detfmt.reading.opener import is_sharded_root
from detfmt.reading.sources import PackedSource
from detfmt.storage import file_digest

__all__ = ["VerifyReport", "check_dataset", "verify"]

MAX_REPORTED = 1000


@dataclass
class VerifyReport:
    """The outcome of :func:`verify`: ``ok`` when ``violations`` is empty."""

    path: Path | str
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

    def add_error(self, error: errors.DetfmtError, where: str, rule: str = "FORMAT") -> None:
        self.add(Violation(error.rule or rule, error.path or where, error.message, error.index))


def verify(path: str | os.PathLike[str], *, raise_on_error: bool = True,
           max_header_bytes: int = spec.MAX_HEADER_BYTES,
           **sharded_options: Any) -> VerifyReport:
    """Check everything SPEC.md requires of the dataset at ``path`` (a 1.0 directory, a sharded
    root, or a sharded root's URL: its shards are fetched through the node cache).

    Returns:
        a `VerifyReport` listing every violation (up to 1000).

    Raises:
        FormatError: (when ``raise_on_error``) the first violation's typed error, with the full
            list attached as ``error.violations``.
    """
    if is_sharded_root(path):
        report = _verify_sharded(path, sharded_options)
    else:
        report = VerifyReport(path=Path(path))
        try:
            dataset = Dataset(path, max_header_bytes=max_header_bytes)
        except errors.FormatError as error:
            report.add_error(error, str(path))
        else:
            with dataset:
                report.num_samples = len(dataset)
                check_dataset(dataset, report)
    if raise_on_error and report.violations:
        error = report.violations[0].to_error()
        error.violations = list(report.violations)  # type: ignore[attr-defined]
        raise error
    return report


def check_dataset(dataset: Dataset, report: VerifyReport) -> None:
    """Every check of one opened 1.0 dataset (a directory or a shard), violations into
    ``report``, in the order of SPEC §12: the index (step 4), then `check_contents`."""
    try:
        dataset.validate_index()
    except errors.FormatError as error:
        report.add_error(error, dataset.location)
        _check_members(dataset, report)
        return
    check_contents(dataset, report)


def check_contents(dataset: Dataset, report: VerifyReport, *,
                   whole_file: WholeFile | None = None) -> None:
    """SPEC §12 steps 6-9 of a dataset whose index was checked: member checksums and the codec
    counts, then labels, image fields and payloads (cheap checks first), sample by sample.

    The bytes of images.bin are read once: one pass (`_scan_blob`) feeds its file digest (step
    6), each payload's checksum, padding and codec (step 9) and, for a shard, the shard file's
    digest (``whole_file``); the violations are still reported in the order of the steps.
    """
    scan = _scan_blob(dataset, whole_file)
    if whole_file is not None:
        whole_file.report(report)
    _check_members(dataset, report, blob_digest=scan.blob_digest)
    _check_labels(dataset, report)
    _check_image_fields(dataset, report)
    for violation in scan.violations:
        report.add(violation)


class WholeFile:
    """The digest of a whole shard file, fed in file order while its images.bin is scanned."""

    def __init__(self, view: memoryview, expected: str, where: str) -> None:
        import xxhash

        self.view = view
        self.expected = expected
        self.where = where
        self.hasher = xxhash.xxh3_64()

    def hash_all(self) -> None:
        self.hasher.update(self.view)

    def report(self, report: VerifyReport) -> None:
        digest = self.hasher.hexdigest()
        if digest != self.expected:
            report.add(Violation("SHARD_CHECKSUM", self.where,
                                 f"xxh3-64 is {digest}, manifest says {self.expected}"))


@dataclass
class _Scan:
    blob_digest: str
    violations: list[Violation]


def _scan_blob(dataset: Dataset, whole_file: WholeFile | None) -> _Scan:
    """One pass over images.bin in file order: the file digest, and for every payload its
    checksum (R-30), its zero padding (R-24) and its codec's checks (§9), in sample order.

    The file digest takes blocks of about `_SCAN_BLOCK` bytes (each byte once, in order) in a
    helper thread, one block ahead of this thread, which hashes and checks the payloads of the
    block the helper has just read: xxhash releases the GIL, so the two digests the spec
    requires run on two cores, and the page faults of a fresh mapping are taken once."""
    import xxhash

    member = dataset.blob_member
    view = member.view if member.view is not None else memoryview(b"")
    size = len(view)
    file_hash = xxhash.xxh3_64()
    feeds = [file_hash.update]
    if whole_file is not None:
        whole_file.hasher.update(whole_file.view[: member.base])
        feeds.append(whole_file.hasher.update)
    violations: list[Violation] = []
    starts = dataset.offsets.astype(np.int64)
    ends = starts + dataset.nbytes.astype(np.int64)
    stops = np.minimum(size, ends + (-ends % spec.ALIGNMENT))
    blocks = []  # (first, last, lo, hi): samples first..last-1 end by byte hi; the digests
    position, first = 0, 0  # take bytes lo..hi (each byte once, in file order)
    n = len(dataset)
    while first < n:
        last = max(first + 1, int(np.searchsorted(stops, position + _SCAN_BLOCK, "right")))
        last = min(n, last)
        stop = max(position, int(stops[first:last].max()))
        blocks.append((first, last, position, stop))
        position, first = stop, last
    threaded = size >= _THREADED_BYTES
    lead = 1 if threaded else 0  # blocks the digest thread starts ahead: it takes the page
    fed = 0                      # faults, and the checks then read mapped, cached bytes
    with _Digests(feeds, threaded=threaded) as digests:
        for j, (first, last, _, _) in enumerate(blocks):
            while fed < len(blocks) and fed <= j + lead:
                lo, hi = blocks[fed][2:]
                if hi > lo:
                    digests.feed(view[lo:hi])
                fed += 1
            _check_block(dataset, view, first, last, starts, ends, stops, violations)
        if position < size:
            digests.feed(view[position:])
    if whole_file is not None:
        whole_file.hasher.update(whole_file.view[member.base + size :])
    return _Scan(file_hash.hexdigest(), violations)


class _Digests:
    """Feeds blocks, in order, to running digests: in one helper thread (a FIFO queue keeps
    the order; at most `_AHEAD` blocks wait), or inline."""

    def __init__(self, feeds: list, *, threaded: bool) -> None:
        self.feeds = feeds
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="detfmt-verify") if threaded \
            else None
        self.pending: collections.deque = collections.deque()

    def _feed_all(self, part: memoryview) -> None:
        for feed in self.feeds:
            feed(part)

    def feed(self, part: memoryview) -> None:
        if self.pool is None:
            self._feed_all(part)
            return
        self.pending.append(self.pool.submit(self._feed_all, part))
        while len(self.pending) > _AHEAD:
            self.pending.popleft().result()

    def __enter__(self) -> _Digests:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            try:
                while self.pending:
                    self.pending.popleft().result()
            finally:
                self.pool.shutdown(wait=True, cancel_futures=True)


_SCAN_BLOCK = 4 << 20
_THREADED_BYTES = 8 << 20  # below this a helper thread costs more than it saves
_AHEAD = 4  # blocks the digest thread may lag behind the checks


def _check_block(dataset: Dataset, view: memoryview, first: int, last: int, starts: np.ndarray,
                 ends: np.ndarray, stops: np.ndarray, violations: list[Violation]) -> None:
    """Step 9 for samples ``first .. last - 1``: checksum, padding, codec, in that order. The
    checksums and the padding bytes are compared in bulk; only broken samples and samples to
    decode take a Python step of their own."""
    import xxhash

    digest = xxhash.xxh3_64_intdigest
    path = dataset.blob_path
    if last - first < _BULK:  # a few large payloads: plain steps beat the bulk bookkeeping
        for i in range(first, last):
            start, end, stop = int(starts[i]), int(ends[i]), int(stops[i])
            if digest(view[start:end]) != int(dataset.index["checksum"][i]):
                violations.append(Violation("CHECKSUM", path,
                                            "payload does not match its xxh3-64 checksum", i))
                continue
            if stop > end and view[end:stop] != _ZEROS[: stop - end]:
                violations.append(Violation(
                    "PADDING_NONZERO", path, f"alignment padding after the payload (bytes "
                    f"{end}..{spec.align_up(end)}) is not zero", i))
            _decode_check(dataset, i, start, end, violations)
        return
    block_ends = ends[first:last]
    spans = map(slice, starts[first:last].tolist(), block_ends.tolist())
    sums = np.fromiter(map(digest, map(view.__getitem__, spans)), np.uint64, last - first)
    bad_sum = sums != dataset.index["checksum"][first:last]
    # a sample's padding (0 .. 63 bytes) lies in the last 64-byte line of its slot
    pad = stops[first:last] - block_ends
    padded = np.flatnonzero(pad)
    lines = dataset.blob[: len(dataset.blob) // spec.ALIGNMENT * spec.ALIGNMENT].reshape(
        -1, spec.ALIGNMENT)[stops[first:last][padded] // spec.ALIGNMENT - 1]
    in_padding = np.arange(spec.ALIGNMENT) >= (spec.ALIGNMENT - pad[padded])[:, None]
    bad_pad = np.zeros(last - first, bool)
    bad_pad[padded] = ((lines != 0) & in_padding).any(axis=1)
    codecs = dataset.codecs[first:last]
    for j in np.flatnonzero(bad_sum | bad_pad | (codecs != spec.CODEC_RAW)).tolist():
        i = first + j
        if bad_sum[j]:
            violations.append(Violation("CHECKSUM", path,
                                        "payload does not match its xxh3-64 checksum", i))
            continue
        start, end = int(starts[i]), int(ends[i])
        if bad_pad[j]:
            violations.append(Violation(
                "PADDING_NONZERO", path, f"alignment padding after the payload (bytes {end}.."
                f"{spec.align_up(end)}) is not zero", i))
        _decode_check(dataset, i, start, end, violations)


_BULK = 16  # samples per block from which checksums and padding are compared in bulk
_ZEROS = bytes(spec.ALIGNMENT)


def _decode_check(dataset: Dataset, i: int, start: int, end: int,
                  violations: list[Violation]) -> None:
    """The codec's procedure (§9) and a full decode of sample ``i`` (nothing for raw)."""
    from detfmt.format import codecs as _codecs

    codec = int(dataset.codecs[i])
    if codec == spec.CODEC_RAW:
        return
    out = np.empty((int(dataset.heights[i]), int(dataset.widths[i]), 3), np.uint8)
    try:
        _codecs.decode_into(dataset.blob[start:end], codec, out, path=dataset.blob_path, index=i)
        if codec == spec.CODEC_JPEG:  # §9.3 J4's entropy rules: verification only (step 9)
            check_entropy(dataset.blob[start:end], path=dataset.blob_path, index=i)
    except errors.FormatError as error:
        violations.append(Violation(error.rule or "IMAGE_DECODE", dataset.blob_path,
                                    error.message, i))


def _check_members(dataset: Dataset, report: VerifyReport, *,
                   blob_digest: str | None = None) -> None:
    import xxhash

    for name, info in dataset.header.files.items():
        member = dataset.members[name]
        if name == spec.BLOB_FILE and blob_digest is not None:
            digest = blob_digest
        else:
            digest = xxhash.xxh3_64_hexdigest(member.view if member.view is not None else b"")
        if digest != info.xxh3_64:
            report.add(Violation("FILE_CHECKSUM", member.path,
                                 f"xxh3-64 is {digest}, header says {info.xxh3_64}"))
    codecs = np.bincount(dataset.codecs, minlength=4) if len(dataset) else np.zeros(4)
    declared = dataset.header.image.codecs
    if declared:
        actual = {spec.CODEC_NAMES[i]: int(c) for i, c in enumerate(codecs[:4]) if c}
        if {k: v for k, v in declared.items() if v} != actual:
            report.add(Violation("HEADER_SCHEMA", dataset.member_path(spec.HEADER_FILE),
                                 f"image.codecs says {declared}, the index has {actual}"))


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
            where = dataset.member_path(spec.image_field_array("orig_size"))
            report.add(Violation("IMAGE_FIELD", where,
                                 "orig_size must be positive", int(bad[0])))
    if "scale_offset" in fields:
        values = fields["scale_offset"]
        bad = np.flatnonzero(~np.isfinite(values).all(axis=1) | (values[:, :2] <= 0).any(axis=1))
        if bad.size:
            where = dataset.member_path(spec.image_field_array("scale_offset"))
            report.add(Violation("IMAGE_FIELD", where,
                                 "scale_offset must be finite with positive scales", int(bad[0])))
    for name in dataset.header.image_fields:
        if name not in spec.STRING_FIELDS:
            continue
        offsets_path = dataset.member_path(spec.image_field_array(name))
        text = dataset.members[spec.string_field_bytes(name)]
        offsets = dataset.string_offsets(name)
        problems = list(rules.check_string_offsets(offsets, text.size, offsets_path))
        for violation in problems:
            report.add(violation)
        if problems:
            continue
        for i in range(len(dataset)):
            try:
                dataset.string_field(name, i)
            except errors.FormatError as error:
                report.add_error(error, offsets_path, "IMAGE_FIELD")
                break


def _verify_sharded(root: str | os.PathLike[str], options: dict[str, Any]) -> VerifyReport:
    """SPEC §19.4's order: the root and manifest, every shard file (existence, kind, size),
    then shard by shard its checksum, its inner open and index, S-8, and its contents; every
    problem is reported (not only the first)."""
    from detfmt.reading.sharded import ShardedDataset, check_shard_schema
    from detfmt.storage import shard_lstat

    report = VerifyReport(path=os.fspath(root))
    try:
        sharded = ShardedDataset(root, check_files=False, **options)  # files are checked below
    except errors.FormatError as error:
        report.add_error(error, os.fspath(root), "MANIFEST_SCHEMA")
        return report
    with sharded:
        report.num_samples = len(sharded)
        storage = sharded.storage
        for info in sharded.shards:  # step 9: every shard file, before any content
            where = storage.where(info.path)
            try:
                if storage.is_local:
                    size = shard_lstat(storage.local_path(""), info.path).st_size
                else:
                    size = storage.size(info.path)
            except errors.FormatError as error:
                report.add_error(error, where, "FILE_MISSING")
                continue
            except (FileNotFoundError, NotADirectoryError):
                report.add(Violation("FILE_MISSING", where,
                                     "shard file listed by the manifest is missing"))
                continue
            if size != info.bytes:
                report.add(Violation("SHARD_SIZE", where, f"{size} bytes, manifest says "
                                     f"{info.bytes}"))
        if report.violations:
            return report
        for k, info in enumerate(sharded.shards):  # step 10, shard by shard
            where = storage.where(info.path)
            try:
                path = sharded.shard_file(k)  # a remote shard: downloaded and its checksum checked
            except errors.FormatError as error:
                report.add_error(error, where, "SHARD_CHECKSUM")
                continue
            try:
                source = PackedSource(path)
            except errors.FormatError as error:
                with contextlib.suppress(errors.FormatError, OSError):
                    _check_shard_digest(path, info.xxh3_64, where, report)
                report.add_error(error, where)
                continue
            # the shard's digest is fed by the pass over its images.bin (one read of the bytes)
            whole = WholeFile(source.file_view, info.xxh3_64, where)
            try:
                shard = Dataset(source)
                shard.validate_index()
                check_shard_schema(shard, sharded.manifest, k)
            except errors.FormatError as error:
                whole.hash_all()
                whole.report(report)
                report.add_error(error, where)
                continue
            with shard:
                check_contents(shard, report, whole_file=whole)
    return report


def _check_shard_digest(path: str, expected: str, where: str, report: VerifyReport) -> None:
    digest = _shard_digest(path)
    if digest != expected:
        report.add(Violation("SHARD_CHECKSUM", where, f"xxh3-64 is {digest}, manifest says "
                             f"{expected}"))


def _shard_digest(path: str) -> str:
    """xxh3-64 of a shard file (checked to be a regular file before: R-11)."""
    return file_digest(path).xxh3_64
