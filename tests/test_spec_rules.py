"""SPEC.md, the code and the conformance suite agree on the rules.

- every rule id the code raises is defined in SPEC.md (or listed in docs/error-ids.md);
- every R-, W- and S-rule id of SPEC.md is raised somewhere in detfmt (PENDING_IDS aside);
- every R-, W- and S-requirement with a MUST is exercised by a conformance case or a listed test;
- the generated material (header.schema.json, the rule index, the worked example) and the
  limits are current; the XXH3-64 vectors of §21.3 hold;
- the writer's own output has the exact byte form of W-1 .. W-6, and reading writes nothing.
"""

from __future__ import annotations

import errno
import io
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import xxhash
import zstandard

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools"))

import conformance_payloads  # noqa: E402
import gen_schema  # noqa: E402

import detfmt  # noqa: E402
from conformance import spec_reader  # noqa: E402
from detfmt.format import spec  # noqa: E402

SPEC_TEXT = (REPO / "SPEC.md").read_text(encoding="utf-8")
RULES = gen_schema.parse_rules(SPEC_TEXT)
CASES = json.loads((REPO / "conformance" / "cases.json").read_text(encoding="utf-8"))

#: Rule ids SPEC.md defines that detfmt cannot raise yet (strict: the test fails once it does).
PENDING_IDS: dict[str, str] = {}  # rule id -> why no code raises it yet

#: Requirements checked by tests rather than by a golden dataset: rule -> tests (any one suffices).
LISTED_TESTS: dict[str, list[str]] = {
    "R-45": ["tests/test_conformance.py::test_invalid_case"],
    "W-19": ["tests/writing/test_writer.py::test_ragged_labels_read_back_as_the_padded_ones",
             "tests/writing/test_writer.py::test_auto_keeps_padded_labels_when_padding_is_cheap"],
    "S-11": ["tests/test_conformance.py::test_invalid_case"],
    "S-12": ["tests/test_conformance.py::test_valid_case"],
    "S-13": ["tests/scaleout/test_shard_published_key.py::"
             "test_published_shard_is_never_rewritten_with_other_content"],
    "S-14": ["tests/scaleout/test_sharded.py::test_retry_overwrites_byte_identically"],
    "S-15": ["tests/scaleout/test_sharded.py::test_commit_rejects_mixed_schema_and_bad_metas",
             "tests/scaleout/test_sharded.py::test_commit_orders_by_key_not_arrival"],
    "S-16": ["tests/scaleout/test_sharded.py::test_orphans_are_invisible_and_collected"],
    "S-17": ["tests/order/test_order.py::test_sharded_order_uses_the_loader_prng"],
    "S-18": ["tests/order/test_order.py::test_golden_vectors_from_scalar_references",
             "tests/order/test_order.py::test_sharded_equals_reference"],
    "S-19": ["tests/order/test_order.py::"
             "test_drop_last_gives_the_same_global_batches_on_any_world_size",
             "tests/order/test_order.py::test_wrap_padding_equal_counts_cover_everything"],
    "S-20": ["tests/order/test_order.py::"
             "test_resume_drop_last_on_other_world_size_has_no_gaps_or_duplicates",
             "tests/order/test_order.py::"
             "test_schedule_resumes_on_another_world_size_and_batch_size"],
    "S-21": ["tests/scaleout/test_shard_cache.py::test_checksum_mismatch_leaves_nothing"],
    "S-26": ["tests/test_spec_rules.py::test_shard_writer_uses_the_canonical_layout"],
    "R-42": ["tests/reading/test_reader.py::test_replacement_is_detected"],
    "R-44": ["tests/reading/test_reader.py::test_label_corruption_is_caught_when_read",
             "tests/test_spec_rules.py::"
             "test_chunked_index_validation_checks_the_link_to_the_next_chunk"],
    "R-48": ["tests/test_spec_rules.py::test_reading_leaves_the_dataset_untouched"],
    "W-1": ["tests/test_spec_rules.py::test_writer_output_has_the_exact_form"],
    "W-2": ["tests/test_spec_rules.py::test_writer_output_has_the_exact_form"],
    "W-3": ["tests/test_spec_rules.py::test_writer_output_has_the_exact_form"],
    "W-4": ["tests/test_spec_rules.py::test_writer_output_has_the_exact_form"],
    "W-5": ["tests/test_spec_rules.py::test_writer_output_has_the_exact_form"],
    "W-6": ["tests/test_spec_rules.py::test_writer_output_has_the_exact_form",
            "tests/writing/test_writer.py::test_padding_slots_are_exact"],
    "W-7": ["tests/writing/test_writer.py::test_bad_sample_is_a_typed_error_naming_it"],
    "W-8": ["tests/writing/test_writer.py::test_bad_sample_is_a_typed_error_naming_it"],
    "W-9": ["tests/writing/test_writer.py::test_bad_sample_is_a_typed_error_naming_it"],
    "W-10": ["tests/writing/test_writer.py::test_clip_is_opt_in_and_counted",
             "tests/writing/test_writer.py::test_max_side_resizes_and_records_the_mapping"],
    "W-11": ["tests/writing/test_writer.py::test_bad_sample_is_a_typed_error_naming_it"],
    "W-12": ["tests/reliability/test_rel_faults.py::test_fsync_order",
             "tests/reliability/test_rel_crash.py::test_kill9_loop",
             "tests/writing/test_writer.py::test_concurrent_writers_one_wins"],
    "W-13": ["tests/reliability/test_rel_cases.py::"
             "test_29_overwrite_keeps_old_inodes_for_live_readers"],
    "W-14": ["tests/writing/test_writer.py::test_target_exists_and_overwrite",
             "tests/writing/test_writer.py::test_overwrite_refuses_a_non_dataset"],
    "W-15": ["tests/writing/test_writer.py::test_a_held_lock_is_a_typed_error"],
    "W-16": ["tests/test_spec_rules.py::test_unwritable_parent_is_target_not_writable",
             "tests/reliability/test_rel_faults.py::test_fail_every_nth_call"],
    "W-17": ["tests/writing/test_writer.py::test_a_failing_generator_leaves_nothing",
             "tests/reliability/test_rel_faults.py::test_fail_every_nth_call"],
}

_RAISED = re.compile(r'(?:rule=|Violation\(\s*|default_rule = |rule = |_fail\(\s*|else )'
                     r'"([A-Z][A-Z0-9_]+)"')


def _raised_ids() -> dict[str, set[str]]:
    """Rule ids raised in detfmt/, by id -> files."""
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / "detfmt").rglob("*.py")):
        for match in _RAISED.finditer(path.read_text(encoding="utf-8")):
            for rule in filter(None, match.groups()):
                found.setdefault(rule, set()).add(path.relative_to(REPO).as_posix())
    return found


def _other_ids() -> set[str]:
    """The reference implementation's ids that are not about the format (docs/error-ids.md)."""
    text = (REPO / "docs" / "error-ids.md").read_text(encoding="utf-8")
    return set(re.findall(r"`([A-Z][A-Z0-9_]+)`", text))


def _test_exists(reference: str) -> bool:
    path, name = reference.split("::")
    file = REPO / path
    return file.exists() and re.search(rf"^\s*def {name}\(", file.read_text(encoding="utf-8"),
                                       re.MULTILINE) is not None


def test_rules_are_numbered_uniquely_and_contiguously() -> None:
    for prefix in ("R", "W", "S"):
        numbers = [int(rule.number[2:]) for rule in RULES if rule.number[0] == prefix]
        assert sorted(numbers) == list(range(1, len(numbers) + 1)), prefix
    reader_ids = [rule.id for rule in RULES if rule.number[0] == "R" and rule.id]
    assert len(reader_ids) == len(set(reader_ids))
    for rule in RULES:
        assert rule.keywords, f"{rule.number} has no RFC 2119 keyword"


def test_keywords_are_uppercase_only() -> None:
    prose = re.sub(r"```.*?```", "", SPEC_TEXT, flags=re.DOTALL)
    prose = re.sub(r"`[^`]*`", "", prose)
    lowercase = re.findall(r"\b(must|shall|should|may|Must|Shall|Should|May)\b", prose)
    assert lowercase == [], "use the RFC 2119 verbs in capitals only (RFC 8174)"


def test_every_raised_rule_is_specified() -> None:
    spec_ids = {rule.id for rule in RULES if rule.id}
    known = spec_ids | _other_ids()
    unknown = {rule: files for rule, files in _raised_ids().items() if rule not in known}
    assert unknown == {}, "add these ids to SPEC.md (or docs/error-ids.md if not a format rule)"


def test_no_id_is_both_a_format_rule_and_another_error() -> None:
    assert {rule.id for rule in RULES if rule.id} & _other_ids() == set()


def test_every_specified_rule_id_is_raised() -> None:
    raised = _raised_ids()
    missing = [rule.number + " " + rule.id for rule in RULES
               if rule.id and rule.id not in raised and rule.id not in PENDING_IDS]
    assert missing == []
    assert set(PENDING_IDS) & set(raised) == set(), "raised now: remove it from PENDING_IDS"
    assert set(PENDING_IDS) <= {rule.id for rule in RULES}


def test_every_must_is_covered_by_a_case_or_a_listed_test() -> None:
    """R-rules by an invalid case of a dataset directory naming the id, S-rules by one of a
    sharded root (format 1.1, or 1.2 with a manifest), or either by a case's ``covers`` or a
    listed test; W-rules by a listed test."""
    def sharded(case: dict) -> bool:
        return (REPO / "conformance" / case["path"] / "manifest.json").exists() or any(
            link[0] == "manifest.json" for link in case.get("links", []))

    by_id = {("S" if sharded(case) else "R", case["rule"]) for case in CASES["invalid"]}
    covers = {number for case in CASES["valid"] + CASES["invalid"] for number in case["covers"]}
    uncovered = []
    for rule in RULES:
        if not any(keyword.startswith("MUST") for keyword in rule.keywords):
            continue
        by_case = (rule.number[0], rule.id) in by_id
        by_test = any(_test_exists(test) for test in LISTED_TESTS.get(rule.number, []))
        if not (by_case or rule.number in covers or by_test):
            uncovered.append(rule.number)
    assert uncovered == []


def test_cases_cite_existing_rules() -> None:
    reader_ids = {rule.id for rule in RULES if rule.number[0] in "RS" and rule.id}
    numbers = {rule.number for rule in RULES}
    for case in CASES["invalid"]:
        assert case["rule"] in reader_ids, case["id"]
    for case in CASES["valid"] + CASES["invalid"]:
        assert set(case["covers"]) <= numbers, case["id"]
    for tests in LISTED_TESTS.values():
        assert any(_test_exists(test) for test in tests), tests
    assert set(LISTED_TESTS) <= numbers


def test_every_s_rule_id_a_reader_reports_is_named_by_a_sharded_case() -> None:
    """Every id of an S-rule that binds readers is the rule of an invalid case of a sharded
    root; SHARD_PUBLISHED and SHARD_KEY bind writers (S-13, S-15) and have listed tests."""
    ids = {rule.id for rule in RULES if rule.number[0] == "S" and rule.id}
    assert {"ROOT_LAYOUT", "PACK_LAYOUT", "SHARD_INDEXING", "SCHEMA_MISMATCH"} <= ids
    named = {case["rule"] for case in CASES["invalid"] if case["format_version"] != "1.0"}
    assert ids - {"SHARD_PUBLISHED", "SHARD_KEY"} - named == set()


def test_generated_parts_of_the_spec_are_current() -> None:
    """header.schema.json, the rule index and the worked example are what the tool writes."""
    assert gen_schema.render(SPEC_TEXT) == SPEC_TEXT, "run python tools/gen_schema.py"
    assert gen_schema.SCHEMA_FILE.read_text(encoding="utf-8") == gen_schema.schema_text()
    assert "(header.schema.json)" in SPEC_TEXT


def test_xxh3_vectors_in_the_spec() -> None:
    section = SPEC_TEXT[SPEC_TEXT.index("### 21.3"):SPEC_TEXT.index("### 21.4")]
    rows = re.findall(r"^\| (.+?) \| `([0-9a-f]{16})` \|$", section, re.MULTILINE)
    assert len(rows) >= 10

    def data(label: str) -> bytes:
        if label == "empty":
            return b""
        if label.startswith("`abc`"):
            return b"abc"
        n = int(re.fullmatch(r"`p\((\d+)\)`", label)[1])
        return bytes(i % 251 for i in range(n))

    for label, digest in rows:
        assert xxhash.xxh3_64_hexdigest(data(label)) == digest, label


def test_a_hostile_depth_is_a_typed_error() -> None:
    """The JSON profile (§5.6): nesting far past any recursion limit is HEADER_JSON, not a
    RecursionError or a crash, for every JSON file the library reads."""
    from detfmt.format import rules as validate
    from detfmt.format.manifest import decode_manifest
    from detfmt.format.pack import parse_toc

    deep = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    for parse, rule in ((lambda d: validate.parse_header(d, "header.json"), "HEADER_JSON"),
                        (decode_manifest, "MANIFEST_SCHEMA"),
                        (lambda d: parse_toc(d, 1 << 30, "shard"), "PACK_LAYOUT")):
        with pytest.raises(detfmt.DetfmtError) as caught:
            parse(deep)
        assert caught.value.rule == rule


def test_shard_writer_uses_the_canonical_layout(tmp_path) -> None:
    """S-26: images.bin first at 4096 k, the table of contents padded with spaces to T = 4096 k
    - 16, then the other members in byte-wise name order, each at align64 of the previous end."""
    from detfmt.shard.write import write_shard

    meta = write_shard(_plain(_samples(np.random.default_rng(3))), tmp_path, "a",
                       classes=["a", "b"])
    data = (tmp_path / meta.path).read_bytes()
    length = int.from_bytes(data[12:16], "little")
    toc = data[16:16 + length]
    members = json.loads(toc)["members"]
    assert (16 + length) % 4096 == 0 and toc.rstrip(b" ").endswith(b"}")
    assert members[0]["name"] == "images.bin" and members[0]["offset"] == 16 + length
    names = [m["name"].encode() for m in members[1:]]
    assert names == sorted(names) and b"header.json" in names


def test_limits_in_the_spec_match_the_code() -> None:
    from detfmt.format import codecs

    table = SPEC_TEXT[SPEC_TEXT.index("## 15. Limits"):SPEC_TEXT.index("## 16.")]
    assert f"{spec.MAX_HEADER_BYTES:,} bytes" in table
    assert f"| {spec.MAX_NPY_HEADER_BYTES} bytes |" in table
    assert spec.MAX_SAMPLES == 1 << 40 and "`2^40`" in table
    assert f"| {spec.MAX_BOXES} |" in table and f"| {spec.MAX_CLASSES} |" in table
    assert f"`1 .. {spec.MAX_SIDE}`" in table
    assert f"{spec.MAX_CLASS_NAME_CHARS} code points" in table
    assert f"{spec.MAX_METADATA_ITEMS} members, {spec.MAX_METADATA_BYTES} code points" in table
    from detfmt.format import jsonprofile

    assert jsonprofile.MAX_DEPTH == 64 and jsonprofile.MAX_NUMBER_CHARS == 64
    assert "64 arrays and objects, 64 characters" in table
    assert f"| {spec.MAX_STRING_BYTES} bytes |" in table
    assert codecs.MAX_ZSTD_WINDOW == 1 << 27 and "2^27 bytes" in table
    assert spec.ALIGNMENT == 64 and spec.INDEX_DTYPE.itemsize == 48
    assert spec.CODEC_IDS == {"raw": 0, "zstd": 1, "jpeg": 2, "png": 3}


def _samples(rng: np.random.Generator) -> list[dict]:
    out = []
    for i, (h, w) in enumerate([(5, 7), (9, 4), (16, 16), (3, 3)]):
        k = i % 3
        x1 = rng.uniform(0, w / 2, k)
        y1 = rng.uniform(0, h / 2, k)
        boxes = np.stack([x1, y1, x1 + w / 3, y1 + h / 3], axis=1).astype(np.float32)
        out.append({"image": rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "boxes": boxes,
                    "classes": np.arange(k) % 2, "iscrowd": np.ones(k, np.uint8),
                    "file_name": f"img{i}.png"})
    return out


def _plain(samples: list[dict]) -> list[dict]:
    return [{key: value for key, value in sample.items() if key != "iscrowd"}
            for sample in samples]


@pytest.mark.parametrize("codec", ["raw", "zstd", "jpeg", "png"])
def test_writer_output_has_the_exact_form(tmp_path, codec) -> None:
    """W-1 .. W-6 on detfmt.write's output, checked byte by byte from SPEC.md."""
    path = tmp_path / "ds"
    detfmt.write(_samples(np.random.default_rng(0)), path, classes=["a", "b"], codec=codec,
                 box_fields={"iscrowd": "uint8"})
    raw_header = (path / "header.json").read_bytes()
    assert not raw_header.startswith(b"\xef\xbb\xbf") and len(raw_header) <= spec.MAX_HEADER_BYTES
    header = json.loads(raw_header)
    assert header["format"] == "detfmt" and header["version"] == "1.0"
    assert header["required_features"] == []
    for name, info in header["files"].items():
        data = (path / name).read_bytes()
        assert info == {"size": len(data), "xxh3_64": xxhash.xxh3_64_hexdigest(data)}, name
        if name.endswith(".npy"):  # W-2: numpy's canonical version-1.0 form, data 64-aligned
            array = np.load(io.BytesIO(data))
            assert data == conformance_payloads.npy(array), name
    index = np.load(path / "index.npy")
    blob = (path / "images.bin").read_bytes()
    position = 0
    for record in index:  # W-4: packed at 64-byte steps, zero padding, checksums
        start, length = int(record["offset"]), int(record["nbytes"])
        assert start == position
        payload = blob[start:start + length]
        end = -(-(start + length) // 64) * 64
        assert blob[start + length:end] == bytes(end - start - length)
        assert xxhash.xxh3_64_intdigest(payload) == int(record["checksum"])
        assert int(record["codec"]) == spec.CODEC_IDS[codec]
        position = end
        if codec == "zstd":  # W-5
            frame = zstandard.get_frame_parameters(payload)
            assert frame.content_size == int(record["decoded_nbytes"])
            assert frame.window_size <= 1 << 27 and frame.dict_id == 0
        if codec == "png":
            assert payload[12:16] == b"IHDR" and payload[24:26] == b"\x08\x02"
        if codec == "jpeg":  # W-5: baseline (SOF0), 3 components, every one sampled 1 x 1
            sof = payload.find(b"\xff\xc0")
            assert sof > 0 and payload.find(b"\xff\xc2") < 0 and payload[sof + 9] == 3
            assert [payload[sof + 11 + 3 * k] for k in range(3)] == [0x11] * 3
    assert position == len(blob)
    counts = np.load(path / "counts.npy")
    boxes, classes = np.load(path / "boxes.npy"), np.load(path / "classes.npy")
    crowd = np.load(path / "box_iscrowd.npy")
    padding = np.arange(header["max_boxes"]) >= counts[:, None]  # W-6
    assert (boxes[padding].view(np.uint32) == 0).all() and (classes[padding] == -1).all()
    assert (crowd[padding] == 0).all() and header["max_boxes"] == counts.max()
    assert detfmt.verify(path).ok
    spec_reader.dump(str(path))  # the SPEC-only reader accepts the writer's output (§17)


def _snapshot(path: Path) -> list[tuple]:
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_ino)
                  for p in [path, *path.iterdir()])


def test_reading_leaves_the_dataset_untouched(tmp_path) -> None:
    """R-48: open, access, batch and verify create, modify and lock nothing in the dataset."""
    path = tmp_path / "ds"
    detfmt.write(_plain(_samples(np.random.default_rng(1))), path, classes=["a", "b"],
                 codec="zstd")
    before = _snapshot(path)
    with detfmt.open(path) as dataset:
        _ = [dataset[i] for i in range(len(dataset))]
        dataset.batch([0, 1, 2])
    detfmt.verify(path)
    assert _snapshot(path) == before


def test_unwritable_parent_is_target_not_writable(tmp_path, monkeypatch) -> None:
    """W-16: EROFS/EACCES while creating the temporary directory -> TARGET_NOT_WRITABLE."""
    import detfmt.fileio

    def refuse(path: str) -> None:
        raise OSError(errno.EROFS, "Read-only file system", path)

    monkeypatch.setattr(detfmt.fileio, "mkdir", refuse)
    with pytest.raises(detfmt.TargetNotWritableError) as caught:
        detfmt.write(_plain(_samples(np.random.default_rng(2))), tmp_path / "ds",
                     classes=["a", "b"])
    assert caught.value.rule == "TARGET_NOT_WRITABLE"
    assert not (tmp_path / "ds").exists()


def test_chunked_index_validation_checks_the_link_to_the_next_chunk() -> None:
    """R-44: a reader validating the index lazily in chunks still never uses an unchecked record:
    the last record of a chunk must not overlap the first payload of the next chunk."""
    from detfmt.format import rules as validate
    from detfmt.format.schema import Header, ImageInfo

    chunk = validate.INDEX_CHUNK
    n = chunk + 2
    index = np.zeros(n, spec.INDEX_DTYPE)
    index["offset"] = np.arange(n) * 64
    index["nbytes"] = index["decoded_nbytes"] = 3
    index["height"] = index["width"] = 1
    index["channels"], index["codec"] = 3, spec.CODEC_ZSTD
    header = Header(format="detfmt", version="1.0", num_samples=n, max_boxes=0, classes=[],
                    image=ImageInfo(), files={}, arrays={})
    assert list(validate.check_index(index, header, n * 64, "images.bin", 0, chunk)) == []
    index[chunk - 1]["nbytes"] = 200  # runs into the next chunk's payloads
    found = list(validate.check_index(index, header, n * 64, "images.bin", 0, chunk))
    assert [v.rule for v in found] == ["OFFSETS_NON_MONOTONIC"]


def test_spec_revision_matches_the_code() -> None:
    """SPEC.md's Version row names the revision detfmt implements (spec.SPEC_REVISION), and its
    change log has that revision as its last entry."""
    assert re.search(r"^\| Version \| " + re.escape(spec.SPEC_REVISION) + r" ", SPEC_TEXT, re.M)
    log = re.findall(r"^\| (\d+\.\d+(?:\.\d+)?) \| \d{4}-\d\d-\d\d \|", SPEC_TEXT, re.M)
    assert log[-1] == spec.SPEC_REVISION
