"""``detfmt.writing.writer.write_stored``: samples whose images are stored payloads, copied byte for
byte through the writer's pipeline (what filter, remap, merge and split share, issue 13)."""

from __future__ import annotations

import gc
import os
import weakref

import numpy as np
import pytest
import xxhash

import detfmt
from detfmt.errors import IntegrityError, InvalidSampleError, TargetExistsError, UsageError
from detfmt.writing.writer import StoredSample, write_stored
from tests.samples import CLASSES, make_samples


def _records(ds, indices=None):
    """Every sample of ``ds`` as a StoredSample, the way the workflows read them."""
    indices = range(len(ds)) if indices is None else indices
    fields = ds.schema.image_fields
    for i in indices:
        sample = ds[i]
        h, w = (int(v) for v in ds.sizes[i])
        yield StoredSample(
            payload=ds.payload(i), codec=ds.codec(i), height=h, width=w, boxes=sample.boxes,
            classes=sample.classes,
            box_fields={f.name: sample.fields[f.name] for f in ds.schema.box_fields},
            orig_size=tuple(ds.image_field("orig_size")[i]) if "orig_size" in fields else None,
            scale_offset=tuple(ds.image_field("scale_offset")[i]),
            source_id=int(ds.image_field("source_id")[i]),
            file_name=ds.string_field("file_name", i), checksum=ds.payload_checksum(i))


def _options(ds):
    return {"box_fields": [(f.name, f.dtype) for f in ds.schema.box_fields],
            "max_side": ds.schema.max_side, "metadata": ds.metadata}


@pytest.mark.parametrize("codec,labels", [("raw", "padded"), ("jpeg", "auto"),
                                          ("zstd", "ragged"), ("png", "padded")])
def test_a_full_copy_reproduces_every_member_file(tmp_path, codec, labels):
    """Same payloads, labels, fields and options: the copy is the source, byte for byte."""
    detfmt.write(make_samples(9, fields=True), tmp_path / "src", classes=CLASSES, codec=codec,
                 labels=labels, box_fields={"iscrowd": "uint8"}, max_side=32,
                 metadata={"k": "v"})
    with detfmt.open(tmp_path / "src") as ds:
        report = write_stored(_records(ds), tmp_path / "copy", classes=ds.schema.classes,
                              labels=labels, **_options(ds))
    assert report.num_samples == 9
    names = sorted(os.listdir(tmp_path / "src"))
    assert names == sorted(os.listdir(tmp_path / "copy"))
    for name in names:
        assert (tmp_path / "src" / name).read_bytes() == (tmp_path / "copy" / name).read_bytes()


def test_a_subset_keeps_payload_bytes_and_fields(tmp_path):
    detfmt.write(make_samples(10, fields=True), tmp_path / "src", classes=CLASSES, codec="jpeg",
                 box_fields={"iscrowd": "uint8"})
    with detfmt.open(tmp_path / "src") as ds:
        write_stored(_records(ds, [7, 2, 5]), tmp_path / "sub", classes=CLASSES,
                     **_options(ds))
        with detfmt.open(tmp_path / "sub") as sub:
            for j, i in enumerate([7, 2, 5]):
                assert bytes(sub.payload(j)) == bytes(ds.payload(i))
                a, b = ds[i], sub[j]
                np.testing.assert_array_equal(a.boxes, b.boxes)
                np.testing.assert_array_equal(a.fields["iscrowd"], b.fields["iscrowd"])
                assert a.fields["file_name"] == b.fields["file_name"]
                assert a.fields["source_id"] == b.fields["source_id"]
    assert detfmt.verify(tmp_path / "sub").ok


def _one(**changes):
    payload = np.arange(4 * 5 * 3, dtype=np.uint8).tobytes()
    values = {"payload": payload, "codec": "raw", "height": 4, "width": 5,
              "boxes": [[0, 0, 2, 2]], "classes": [1]}
    values.update(changes)
    return StoredSample(**values)


def test_a_damaged_source_payload_is_an_integrity_error_and_nothing_is_written(tmp_path):
    good = _one()
    bad = _one(checksum=xxhash.xxh3_64_intdigest(good.payload) ^ 1)
    with pytest.raises(IntegrityError) as caught:
        write_stored([good, bad], tmp_path / "out", classes=CLASSES, on_error="skip")
    assert caught.value.index == 1 and caught.value.rule == "CHECKSUM"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("changes", [
    {"payload": b"\xff\xd8not a jpeg\xff\xd9", "codec": "jpeg"},
    {"codec": "png"},
    {"codec": "zstd"},
    {"height": 5},  # a raw payload of the wrong length
    {"payload": b""},
    {"codec": "webp"},
    {"height": 0},
    {"boxes": [[0, 0, 9, 9]]},  # outside the 5x4 image
    {"classes": [7]},
    {"box_fields": {"unknown": [1]}},
    {"file_name": 3},
])
def test_an_invalid_record_is_named_and_can_be_skipped(tmp_path, changes):
    with pytest.raises(InvalidSampleError) as caught:
        write_stored([_one(), _one(**changes)], tmp_path / "out", classes=CLASSES)
    assert caught.value.index == 1
    assert not (tmp_path / "out").exists()
    with pytest.warns(UserWarning, match="skipped 1"):
        report = write_stored([_one(), _one(**changes), _one()], tmp_path / "out",
                              classes=CLASSES, on_error="skip")
    assert report.num_samples == 2 and report.skipped == 1


def test_payloads_of_every_codec_are_checked_against_their_size(tmp_path):
    """An encoded payload whose frame says another size than the record is refused."""
    detfmt.write(make_samples(2, size=(20, 21)), tmp_path / "src", classes=CLASSES,
                 codec="jpeg")
    with detfmt.open(tmp_path / "src") as ds:
        record = next(_records(ds))
    record.width += 1
    with pytest.raises(InvalidSampleError, match="does not match"):
        write_stored([record], tmp_path / "out", classes=CLASSES)


def test_options_that_would_reencode_are_refused(tmp_path):
    for option in ({"codec": "jpeg"}, {"fixed_size": 8}, {"jpeg_quality": 80}):
        with pytest.raises(UsageError, match="copies payloads as stored"):
            write_stored([_one()], tmp_path / "out", classes=CLASSES, **option)
    with pytest.raises(InvalidSampleError, match="max_side"):
        write_stored([_one()], tmp_path / "out", classes=CLASSES, max_side=4)
    with pytest.raises(UsageError):
        write_stored(_one(), tmp_path / "out", classes=CLASSES)  # not an iterable of records
    assert not (tmp_path / "out").exists()


def test_fixed_shape_only_for_raw_payloads(tmp_path):
    """Same-size images get a fixed shape only when every payload is raw (SPEC §9.5)."""
    detfmt.write(make_samples(3, size=(16, 17)), tmp_path / "jpeg", classes=CLASSES,
                 codec="jpeg", fixed_size=16)
    with detfmt.open(tmp_path / "jpeg") as ds:
        write_stored(_records(ds), tmp_path / "copy", classes=CLASSES)
    with detfmt.open(tmp_path / "copy") as ds:
        assert ds.schema.fixed_shape is None
    write_stored([_one(), _one()], tmp_path / "raw", classes=CLASSES)
    with detfmt.open(tmp_path / "raw") as ds:
        assert ds.schema.fixed_shape == (4, 5, 3)


def test_target_rules_are_the_writers(tmp_path):
    write_stored([_one()], tmp_path / "out", classes=CLASSES)
    with pytest.raises(TargetExistsError):
        write_stored([_one()], tmp_path / "out", classes=CLASSES)
    write_stored([_one(), _one()], tmp_path / "out", classes=CLASSES, overwrite=True)
    with detfmt.open(tmp_path / "out") as ds:
        assert len(ds) == 2


def test_records_are_streamed_one_payload_at_a_time(tmp_path):
    """The writer holds no earlier payload while the next record is produced (bounded memory
    on a copy of any size)."""
    alive: list[weakref.ref] = []
    most = [0]

    def records():
        for _ in range(50):
            gc.collect()
            most[0] = max(most[0], sum(ref() is not None for ref in alive))
            payload = np.arange(4 * 5 * 3, dtype=np.uint8)
            alive.append(weakref.ref(payload))
            yield _one(payload=payload)
            del payload

    write_stored(records(), tmp_path / "out", classes=CLASSES)
    assert most[0] <= 1


def test_a_jpeg_payload_breaking_the_entropy_rules_is_refused(tmp_path):
    """SPEC 1.2.1 §9.3 J4: a copied JPEG whose coded data has stray bytes before EOI (what a
    dataset written before 1.2.1 may hold) is refused, not copied into a dataset that fails
    verification."""
    detfmt.write(make_samples(1, size=(20, 21)), tmp_path / "src", classes=CLASSES,
                 codec="jpeg")
    with detfmt.open(tmp_path / "src") as ds:
        record = next(_records(ds))
    payload = bytes(record.payload)
    record.payload = payload[:-2] + b"\x00\x00" + payload[-2:]
    record.checksum = None
    with pytest.raises(InvalidSampleError, match="extraneous") as caught:
        write_stored([record], tmp_path / "out", classes=CLASSES)
    assert caught.value.rule == "IMAGE_INVALID"
