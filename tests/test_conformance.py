"""detfmt's own reader against every conformance case, plus the suite's own safeguards."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools"))

import make_conformance  # noqa: E402

from conformance import spec_reader  # noqa: E402
from conformance.dump import canonical_dump  # noqa: E402
from conformance.runner import check_dump, load_cases, materialize  # noqa: E402
from detfmt import DetfmtError  # noqa: E402

CASES = load_cases()
#: The cases of format 1.2's ragged labels (SPEC §10.2).
RAGGED = {case.id for case in CASES if case.format_version == "1.2"}


def _params(cases: list) -> list:
    return [pytest.param(case, id=case.id) for case in cases]


VALID = [case for case in CASES if case.kind == "valid"]
INVALID = [case for case in CASES if case.kind == "invalid"]


def _expected(case) -> dict:
    return json.loads(case.expected.read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", _params(VALID))
def test_valid_case(case) -> None:
    dump = json.loads(json.dumps(canonical_dump(case.path)))  # what a subprocess would print
    assert check_dump(dump, _expected(case)) == []


@pytest.mark.parametrize("case", _params(INVALID))
def test_invalid_case(case) -> None:
    with materialize(case) as path, pytest.raises(DetfmtError) as caught:
        canonical_dump(path)
    assert caught.value.rule == case.rule, str(caught.value)


@pytest.mark.parametrize("case", CASES, ids=[f"{case.kind}-{case.id}" for case in CASES])
def test_spec_reader_agrees(case) -> None:
    """The second reader, written from SPEC.md alone, passes every case too."""
    with materialize(case) as path:
        if case.kind == "valid":
            dump = json.loads(json.dumps(spec_reader.dump(str(path))))
            assert check_dump(dump, _expected(case)) == []
        else:
            with pytest.raises(spec_reader.Reject) as caught:
                spec_reader.dump(str(path))
            assert caught.value.rule == case.rule


def test_goldens_are_what_the_generator_writes() -> None:
    """Golden files are never regenerated silently: any drift is a failure to look at."""
    assert make_conformance.differences() == []


def _suite_bytes(name: str) -> int:
    files = [path for path in (REPO / "conformance" / name).rglob("*") if path.is_file()]
    return sum(path.stat().st_size for path in files)


def test_suite_is_small_and_complete() -> None:
    assert _suite_bytes("v1") < 1_000_000
    assert _suite_bytes("v1_1") < 650_000  # 1.2.1: 26 KB for a manifest over the header's limits
    assert _suite_bytes("v1_2") < 200_000
    assert len({case.id for case in CASES}) == len(CASES)
    for case in VALID:
        assert case.path.is_dir() and case.expected.is_file()
    folders = {"1.0": "v1", "1.1": "v1_1", "1.2": "v1_2"}
    for case in CASES:
        assert case.path.parent.parent.name == folders[case.format_version], case.id
        sharded = any(case.path.joinpath(name).exists() for name in ("manifest.json",
                                                                      "manifest-real.json"))
        assert sharded == (case.format_version == "1.1") or case.format_version == "1.2", case.id
    for case in CASES:  # the 1.2 cases are exactly those that use the feature ragged_labels
        text = "".join(p.read_text("utf-8", "replace") for p in case.path.rglob("*.json")
                       if p.is_file())
        if case.path.is_dir() and (case.path / "shards").is_dir():
            text += "".join(p.read_bytes()[:8192].decode("latin-1")
                            for p in (case.path / "shards").iterdir())
        assert ("ragged_labels" in text) == (case.id in RAGGED), case.id


# Every rule of SPEC.md section 19 that a reader reports, and the 1.0 rules a shard can break.
SHARDED_RULES = {
    "ROOT_LAYOUT", "MANIFEST_SCHEMA", "NOT_DETFMT", "VERSION_UNSUPPORTED", "FEATURE_UNSUPPORTED",
    "SHARD_INDEXING", "PATH_UNSAFE", "FILE_MISSING", "SHARD_SIZE", "SHARD_CHECKSUM",
    "SCHEMA_MISMATCH", "PACK_MAGIC", "PACK_LAYOUT", "CHECKSUM", "BOX_OUT_OF_IMAGE", "FILE_SIZE",
    "NPY_ORDER", "HEADER_SCHEMA",  # schema_codec_records: S-8 compares headers, not records
}


def test_sharded_cases_cover_section_19() -> None:
    rules = {case.rule for case in INVALID if case.format_version == "1.1"}
    assert rules == SHARDED_RULES
    valid = {case.id: _expected(case) for case in VALID if case.format_version == "1.1"}
    assert {"sharded", "sharded_empty_shard", "sharded_no_shards", "sharded_orphans"} <= set(valid)
    # the cases still exercise what they are named for
    shards = valid["sharded"]["manifest"]["shards"]
    assert len(shards) == 3 and len({shard["max_boxes"] for shard in shards}) == 3  # S-12
    assert len({(s["height"], s["width"]) for s in valid["sharded"]["samples"]}) > 3
    assert 0 in [s["num_samples"] for s in valid["sharded_empty_shard"]["manifest"]["shards"]]
    assert valid["sharded_no_shards"]["manifest"]["shards"] == []
    minimal = valid["sharded_minimal_manifest"]["manifest"]
    assert not {"extensions", "writer", "metadata"} & set(minimal)
    assert set(minimal["schema"]) == {"codec", "classes"}
    orphans = REPO / "conformance" / "v1_1" / "valid" / "sharded_orphans" / "shards"
    named = {shard["path"] for shard in valid["sharded_orphans"]["manifest"]["shards"]}
    assert {f"shards/{p.name}" for p in orphans.iterdir()} - named  # files it must not read


def test_generator_and_spec_reader_do_not_import_detfmt() -> None:
    code = ("import sys; sys.path[:0] = ['tools', '.']; import make_conformance; "
            "import conformance.spec_reader; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'detfmt'))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_check_dump_rejects_wrong_answers() -> None:
    case = next(case for case in VALID if case.id == "raw_variable")
    good = json.loads(json.dumps(canonical_dump(case.path)))
    assert check_dump(good, _expected(case)) == []
    for mutate in (
        lambda d: d["samples"][0].__setitem__("pixels", d["samples"][1]["pixels"]),
        lambda d: d["samples"][1].__setitem__("boxes_sha256", "0" * 64),
        lambda d: d["samples"].pop(),
        lambda d: d["header"].__setitem__("max_boxes", 9),
        lambda d: d["samples"][2].__setitem__("count", 2),
    ):
        bad = copy.deepcopy(good)
        mutate(bad)
        assert check_dump(bad, _expected(case)) != []


def test_check_dump_rejects_wrong_sharded_answers() -> None:
    case = next(case for case in VALID if case.id == "sharded")
    good = json.loads(json.dumps(canonical_dump(case.path)))
    assert set(good) == {"manifest", "samples"}
    assert check_dump(good, _expected(case)) == []
    for mutate in (
        lambda d: d.__setitem__("header", d.pop("manifest")),  # a 1.0-shaped answer
        lambda d: d["manifest"]["shards"][1].__setitem__("max_boxes", 9),
        lambda d: d["samples"].insert(3, d["samples"].pop(2)),  # global order across shards
        lambda d: d["samples"][4]["box_fields"].__setitem__("iscrowd", "0" * 64),
        lambda d: d["samples"][7]["image_fields"].__setitem__("source_id", 0),
    ):
        bad = copy.deepcopy(good)
        mutate(bad)
        assert check_dump(bad, _expected(case)) != []


def test_jpeg_tolerance_is_enforced() -> None:
    case = next(case for case in VALID if case.id == "jpeg")
    dump = json.loads(json.dumps(canonical_dump(case.path)))
    import base64

    pixels = bytearray(base64.b64decode(dump["samples"][1]["pixels"]))
    pixels[0] ^= 0x80  # one pixel off by 128 exceeds max_abs_error
    dump["samples"][1]["pixels"] = base64.b64encode(bytes(pixels)).decode()
    assert any("JPEG" in problem for problem in check_dump(dump, _expected(case)))


def test_command_protocol_end_to_end() -> None:
    reader = f"{sys.executable} -m conformance.detfmt_reader"
    done = subprocess.run(
        [sys.executable, "-m", "conformance", "--reader", reader, "--json",
         "--case", "mixed_codecs", "--case", "checksum", "--case", "header_too_large",
         "--case", "sharded", "--case", "root_both_layouts", "--case", "member_symlink",
         "--case", "path_symlink_component"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == {"passed": 7, "failed": {}}
    broken = f"{sys.executable} -c print(1)"
    done = subprocess.run([sys.executable, "-m", "conformance", "--reader", broken,
                           "--case", "checksum"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 1 and "FAIL" in done.stdout


def test_links_are_made_by_the_runner() -> None:
    """Cases with symbolic links commit plain files; the runner makes the links in a copy."""
    case = next(case for case in INVALID if case.id == "member_symlink")
    assert not (case.path / "boxes.npy").exists() and (case.path / "boxes-real.npy").is_file()
    with materialize(case) as path:
        assert (path / "boxes.npy").is_symlink() and path != case.path
    assert not (case.path / "boxes.npy").exists()


def test_subsampled_jpeg_case_refuses_replicated_chroma() -> None:
    """The 4:2:0 and 4:2:2 goldens pin SPEC §9.3's interpolated chroma: libjpeg-turbo's
    replicating "fast upsampling" (what common JavaScript decoders do) fails the tolerance."""
    import base64

    import simplejpeg

    case = next(case for case in VALID if case.id == "jpeg_subsampled")
    good = json.loads(json.dumps(canonical_dump(case.path)))
    assert check_dump(good, _expected(case)) == []
    index = np.load(case.path / "index.npy")
    blob = (case.path / "images.bin").read_bytes()
    for i, record in enumerate(index):
        payload = blob[int(record["offset"]):int(record["offset"]) + int(record["nbytes"])]
        replicated = simplejpeg.decode_jpeg(payload, colorspace="RGB", fastupsample=True)
        bad = copy.deepcopy(good)
        bad["samples"][i]["pixels"] = base64.b64encode(replicated.tobytes()).decode()
        assert any("JPEG" in problem for problem in check_dump(bad, _expected(case))), i


def test_ragged_labels_cost_little_more_than_their_payload() -> None:
    """SPEC §10.2 on a crowded dataset (one image with 1,000 boxes among others with at most 5),
    laid out by the independent generator: the label files stay within 1.2 times the bytes of
    the boxes, classes and per-box fields they hold; the padded layout needs hundreds of times."""
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 6, 20_000)
    counts[123] = 1000
    image = np.zeros((1, 1, 3), np.uint8)
    samples = [make_conformance.Sample(image, boxes=[[0, 0, 1, 1]] * int(k), classes=[0] * int(k),
                                       box_fields={"iscrowd": [1] * int(k)}) for k in counts]
    dataset = make_conformance.build(samples, [("a", None)], ragged=True,
                                     box_fields=[("iscrowd", "|u1")])
    names = ("counts.npy", "boxes.npy", "classes.npy", "box_iscrowd.npy")
    labels = sum(len(dataset.files[name]) for name in names)
    payload = int(counts.sum()) * (16 + 4 + 1)
    assert labels <= 1.2 * payload
    assert len(counts) * int(counts.max()) * (16 + 4 + 1) > 100 * payload  # padded: N M slots
    assert dataset.header["num_boxes"] == int(counts.sum())
    assert spec_reader.label_rows(dataset.header, {"counts.npy": counts})[124] == \
        int(counts[:124].sum())
