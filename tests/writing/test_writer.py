"""The writer's input rules: every bad sample is a typed error naming the sample and the rule."""

from __future__ import annotations

import io
import json
import os
import threading
import warnings

import numpy as np
import pytest
from PIL import Image

import detfmt
from detfmt.format import spec
from tests.samples import CLASSES, make_samples


def one(image=None, boxes=((1, 1, 5, 5),), classes=(0,), **extra):
    image = np.zeros((10, 20, 3), np.uint8) if image is None else image
    boxes = np.asarray(boxes, float)
    return {"image": image, "boxes": boxes.reshape(-1, 4) if boxes.size % 4 == 0 else boxes,
            "classes": classes, **extra}


def write_one(tmp_path, sample, **options):
    return detfmt.write([one(), sample], tmp_path / "ds", classes=CLASSES, **options)


@pytest.mark.parametrize(
    ("sample", "rule"),
    [
        (one(boxes=[(1, 1, float("nan"), 5)]), "BOX_INVALID"),
        (one(boxes=[(1, 1, float("inf"), 5)]), "BOX_INVALID"),
        (one(boxes=[(6, 1, 5, 5)]), "BOX_INVALID"),
        (one(boxes=[(1, 6, 5, 5)]), "BOX_INVALID"),
        (one(boxes=[(1, 1, 21, 5)]), "BOX_OUT_OF_IMAGE"),
        (one(boxes=[(-0.5, 1, 5, 5)]), "BOX_OUT_OF_IMAGE"),
        (one(classes=[3]), "CLASS_RANGE"),
        (one(classes=[-1]), "CLASS_RANGE"),
        (one(classes=[0.5]), "CLASS_RANGE"),
        (one(classes=[0, 1]), "SAMPLE_INVALID"),
        (one(boxes=[(1, 2, 3)]), "SAMPLE_INVALID"),
        (one(image=np.zeros((10, 20, 4), np.uint8)), "IMAGE_INVALID"),
        (one(image=np.zeros((10, 20, 3), np.uint16)), "IMAGE_INVALID"),
        (one(image=np.zeros((0, 20, 3), np.uint8)), "IMAGE_INVALID"),
        (one(image=b"not an image"), "IMAGE_INVALID"),
        (one(image="/nonexistent/x.jpg"), "IMAGE_INVALID"),
        (one(image=3), "IMAGE_INVALID"),
        (one(typo_field=1), "SAMPLE_INVALID"),
        ({"image": np.zeros((4, 4, 3), np.uint8)}, "SAMPLE_INVALID"),
        ("not a sample", "SAMPLE_INVALID"),
    ],
)
def test_bad_sample_is_a_typed_error_naming_it(tmp_path, sample, rule):
    with pytest.raises(detfmt.InvalidSampleError) as caught:
        write_one(tmp_path, sample)
    assert caught.value.rule == rule
    assert caught.value.index == 1
    assert not (tmp_path / "ds").exists()
    assert not list(tmp_path.glob(".detfmt-tmp-*"))


def test_clip_is_opt_in_and_counted(tmp_path):
    report = write_one(tmp_path, one(boxes=[(-3, 1, 25, 5)]), clip=True)
    assert report.clipped_boxes == 1
    np.testing.assert_array_equal(detfmt.open(tmp_path / "ds")[1].boxes, [[0, 1, 20, 5]])


def test_float_noise_at_the_edge_is_clamped(tmp_path):
    write_one(tmp_path, one(boxes=[(-1e-5, 0, 20 + 1e-5, 10)]))
    np.testing.assert_array_equal(detfmt.open(tmp_path / "ds")[1].boxes, [[0, 0, 20, 10]])


def test_grayscale_becomes_rgb(tmp_path):
    gray = np.arange(200, dtype=np.uint8).reshape(10, 20)
    write_one(tmp_path, one(image=gray))
    image = detfmt.open(tmp_path / "ds")[1].image
    assert image.shape == (10, 20, 3)
    np.testing.assert_array_equal(image[..., 0], gray)
    np.testing.assert_array_equal(image[..., 2], gray)


def test_encoded_bytes_and_paths_are_decoded(tmp_path):
    pixels = np.random.default_rng(0).integers(0, 256, (9, 13, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    (tmp_path / "a.png").write_bytes(buffer.getvalue())
    samples = [one(image=buffer.getvalue(), boxes=[(0, 0, 13, 9)]),
               one(image=tmp_path / "a.png", boxes=[(0, 0, 13, 9)])]
    detfmt.write(samples, tmp_path / "ds", classes=CLASSES)
    ds = detfmt.open(tmp_path / "ds")
    np.testing.assert_array_equal(ds[0].image, pixels)
    np.testing.assert_array_equal(ds[1].image, pixels)
    assert ds[1].file_name == "a.png"


def test_max_side_resizes_and_records_the_mapping(tmp_path):
    image = np.zeros((300, 400, 3), np.uint8)
    detfmt.write([one(image=image, boxes=[(40, 30, 400, 300)])], tmp_path / "ds", classes=CLASSES,
                 max_side=100)
    ds = detfmt.open(tmp_path / "ds")
    sample = ds[0]
    assert sample.image.shape == (75, 100, 3)
    np.testing.assert_allclose(sample.boxes, [[10, 7.5, 100, 75]])
    np.testing.assert_array_equal(sample.orig_size, [300, 400])
    np.testing.assert_allclose(sample.scale_offset, [0.25, 0.25, 0, 0])
    assert ds.header.image.max_side == 100


def test_small_images_are_never_upscaled(tmp_path):
    detfmt.write([one()], tmp_path / "ds", classes=CLASSES, max_side=100)
    assert detfmt.open(tmp_path / "ds")[0].image.shape == (10, 20, 3)


def test_fixed_size_letterboxes_and_gives_one_array(tmp_path):
    samples = [one(image=np.full((10, 20, 3), 7, np.uint8), boxes=[(0, 0, 20, 10)]),
               one(image=np.full((30, 15, 3), 9, np.uint8), boxes=[(0, 0, 15, 30)])]
    detfmt.write(samples, tmp_path / "ds", classes=CLASSES, fixed_size=(32, 32))
    ds = detfmt.open(tmp_path / "ds")
    assert ds.header.image.fixed_shape == (32, 32, 3)
    images = ds.fixed_images
    assert images.shape == (2, 32, 32, 3)
    np.testing.assert_allclose(ds[0].boxes, [[0, 8, 32, 24]])  # 20x10 -> 32x16, top pad 8
    assert images[0, 0, 0, 0] == 114 and images[0, 16, 16, 0] == 7
    np.testing.assert_allclose(ds[1].boxes, [[8, 0, 24, 32]])
    np.testing.assert_array_equal(images[1], ds[1].image)


def test_target_exists_and_overwrite(tmp_path):
    detfmt.write(make_samples(2), tmp_path / "ds", classes=CLASSES)
    with pytest.raises(detfmt.TargetExistsError):
        detfmt.write(make_samples(3), tmp_path / "ds", classes=CLASSES)
    assert len(detfmt.open(tmp_path / "ds")) == 2
    detfmt.write(make_samples(3), tmp_path / "ds", classes=CLASSES, overwrite=True)
    assert len(detfmt.open(tmp_path / "ds")) == 3
    assert not list(tmp_path.glob(".detfmt-tmp-*"))


def test_overwrite_refuses_a_non_dataset(tmp_path):
    victim = tmp_path / "mine"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    with pytest.raises(detfmt.TargetExistsError, match="not a detfmt dataset"):
        detfmt.write(make_samples(1), victim, classes=CLASSES, overwrite=True)
    assert (victim / "precious.txt").read_text() == "keep me"


def test_a_failing_generator_leaves_nothing(tmp_path):
    def broken():
        yield from make_samples(3)
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError, match="source failed"):
        detfmt.write(broken(), tmp_path / "ds", classes=CLASSES)
    assert not (tmp_path / "ds").exists()
    assert not list(tmp_path.glob(".detfmt-tmp-*"))


def test_a_held_lock_is_a_typed_error(tmp_path):
    from detfmt import fileio

    fd = fileio.lock_target(tmp_path / "ds")
    try:
        with pytest.raises(detfmt.TargetLockedError):
            detfmt.write(make_samples(1), tmp_path / "ds", classes=CLASSES)
    finally:
        fileio.unlock(fd)


def test_workers_give_identical_bytes(tmp_path):
    samples = make_samples(20, seed=5)
    detfmt.write(samples, tmp_path / "serial", classes=CLASSES, codec="zstd")
    detfmt.write(samples, tmp_path / "parallel", classes=CLASSES, codec="zstd", workers=2)
    for name in detfmt.open(tmp_path / "serial").header.files:
        assert (tmp_path / "serial" / name).read_bytes() == (tmp_path / "parallel" / name
                                                            ).read_bytes(), name


def test_zero_samples_and_zero_boxes(tmp_path):
    detfmt.write([], tmp_path / "empty", classes=CLASSES)
    ds = detfmt.open(tmp_path / "empty")
    assert len(ds) == 0 and ds.header.max_boxes == 0
    assert detfmt.verify(tmp_path / "empty").ok
    detfmt.write([one(boxes=np.zeros((0, 4)), classes=[])] * 3, tmp_path / "nobox",
                 classes=CLASSES)
    ds = detfmt.open(tmp_path / "nobox")
    assert ds.boxes.shape == (3, 0, 4)
    batch = ds.batch([0, 1, 2])
    assert batch.boxes.shape == (3, 0, 4) and batch.mask.shape == (3, 0)


def test_padding_slots_are_exact(tmp_path):
    samples = make_samples(10, seed=2, fields=True)
    detfmt.write(samples, tmp_path / "ds", classes=CLASSES, box_fields={"iscrowd": "uint8"})
    ds = detfmt.open(tmp_path / "ds")
    mask = np.arange(ds.header.max_boxes) < np.asarray(ds.counts)[:, None]
    assert (np.asarray(ds.boxes)[~mask].view(np.uint32) == 0).all()
    assert (np.asarray(ds.classes)[~mask] == spec.CLASS_PADDING).all()
    assert (np.asarray(ds.box_fields["iscrowd"])[~mask] == 0).all()


@pytest.mark.parametrize(
    "options",
    [{"codec": "webp"}, {"max_side": 0}, {"fixed_size": (0, 3)}, {"workers": -1},
     {"box_fields": {"Bad Name": "uint8"}}, {"box_fields": {"x": "float64"}},
     {"metadata": {"a": 1}}, {"classes": ["a", "a"]}, {"classes": [3]}],
)
def test_bad_options_are_usage_errors(tmp_path, options):
    options = {"classes": CLASSES, **options}
    with pytest.raises(detfmt.UsageError):
        detfmt.write(make_samples(1), tmp_path / "ds", **options)


def test_concurrent_writers_one_wins(tmp_path):
    results = []

    def run(seed):
        try:
            detfmt.write(make_samples(30, seed=seed), tmp_path / "ds", classes=CLASSES)
            results.append(("ok", seed))
        except (detfmt.TargetExistsError, detfmt.TargetLockedError) as error:
            results.append((type(error).__name__, seed))

    threads = [threading.Thread(target=run, args=(seed,)) for seed in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r[0] for r in results).count("ok") == 1
    winner = next(seed for status, seed in results if status == "ok")
    expected = make_samples(30, seed=winner)
    ds = detfmt.open(tmp_path / "ds")
    np.testing.assert_array_equal(ds[7].image, expected[7]["image"])
    assert detfmt.verify(tmp_path / "ds").ok


# ----------------------------------------------------------------------------- the Python API


@pytest.mark.parametrize(
    ("classes", "names"),
    [
        ({0: "cat", 1: "dog", 2: "zebra"}, CLASSES),
        ({2: "zebra", 0: "cat", 1: "dog"}, CLASSES),  # ids, not insertion order
        ({"cat": 0, "zebra": 2, "dog": 1}, CLASSES),
        (np.array(CLASSES), CLASSES),
        (np.array([b"cat", b"dog", b"zebra"]), CLASSES),
        (tuple(CLASSES), CLASSES),
        ([{"name": "cat", "source_id": 7}, "dog", "zebra"], CLASSES),
    ],
)
def test_class_lists_users_pass_are_understood(tmp_path, classes, names):
    detfmt.write(make_samples(3), tmp_path / "ds", classes=classes)
    assert detfmt.open(tmp_path / "ds").class_names == names


@pytest.mark.parametrize(
    "classes",
    ["catdog", b"catdog", 3, None, {1: "cat", 2: "dog"}, {0: "cat", 2: "dog"}, {"cat": "dog"},
     np.array([[b"a"]]), np.array([1, 2]), [{"name": "a", "source_id": 1},
                                            {"name": "b", "source_id": 1}],
     [{"name": "a", "colour": "red"}], ["a", ""]],
)
def test_nonsense_classes_are_refused_before_any_sample(tmp_path, classes):
    consumed = []

    def samples():
        consumed.append(1)
        yield from make_samples(1)

    with pytest.raises(detfmt.UsageError):
        detfmt.write(samples(), tmp_path / "ds", classes=classes)
    assert consumed == [], "classes must be checked before the first sample is read"
    assert not (tmp_path / "ds").exists()


def test_pil_images_are_accepted(tmp_path):
    rgb = np.random.default_rng(1).integers(0, 256, (9, 13, 3), dtype=np.uint8)
    gray = np.arange(117, dtype=np.uint8).reshape(9, 13)
    palette = Image.fromarray(rgb).convert("P")
    samples = [one(image=Image.fromarray(rgb), boxes=[(0, 0, 13, 9)]),
               one(image=Image.fromarray(gray), boxes=[(0, 0, 13, 9)]),
               one(image=palette, boxes=[(0, 0, 13, 9)])]
    detfmt.write(samples, tmp_path / "ds", classes=CLASSES)
    ds = detfmt.open(tmp_path / "ds")
    np.testing.assert_array_equal(ds[0].image, rgb)
    np.testing.assert_array_equal(ds[1].image[..., 1], gray)
    np.testing.assert_array_equal(ds[2].image, np.asarray(palette.convert("RGB")))


def test_normalised_looking_boxes_warn(tmp_path):
    normalised = [one(image=np.zeros((64, 80, 3), np.uint8), boxes=[(0.1, 0.2, 0.5, 0.9)])
                  for _ in range(3)]
    with pytest.warns(detfmt.errors.NormalizedBoxesWarning, match="normalised"):
        detfmt.write(normalised, tmp_path / "a", classes=CLASSES)
    pixels = [one(image=np.zeros((64, 80, 3), np.uint8), boxes=[(0.1, 0.2, 0.5, 0.9)]),
              one(image=np.zeros((64, 80, 3), np.uint8), boxes=[(10, 2, 50, 60)])]
    tiny = [one(image=np.zeros((2, 2, 3), np.uint8), boxes=[(0, 0, 1, 1)])]
    with warnings.catch_warnings():
        warnings.simplefilter("error", detfmt.errors.NormalizedBoxesWarning)
        detfmt.write(pixels, tmp_path / "b", classes=CLASSES)
        detfmt.write(tiny, tmp_path / "c", classes=CLASSES)


def test_on_error_skip_leaves_out_and_counts(tmp_path):
    samples = make_samples(6, seed=4)
    samples[1] = one(boxes=[(1, 1, float("nan"), 5)])
    samples[4] = one(classes=[7])
    with pytest.warns(UserWarning, match="skipped 2 invalid samples"):
        report = detfmt.write(samples, tmp_path / "ds", classes=CLASSES, on_error="skip")
    assert report.num_samples == 4 and report.skipped == 2
    assert report.skipped_rules == {"BOX_INVALID": 1, "CLASS_RANGE": 1}
    assert len(report.skipped_examples) == 2 and "sample 1" in report.skipped_examples[0]
    ds = detfmt.open(tmp_path / "ds")
    kept = [samples[i] for i in (0, 2, 3, 5)]
    for i, sample in enumerate(kept):
        np.testing.assert_array_equal(ds[i].image, sample["image"])
    with pytest.raises(detfmt.UsageError, match="on_error"):
        detfmt.write(samples, tmp_path / "x", classes=CLASSES, on_error="ignore")


def test_write_report_repr_is_short(tmp_path):
    report = detfmt.write(make_samples(4), tmp_path / "ds", classes=CLASSES)
    text = repr(report)
    assert text.startswith("WriteReport(") and "4 samples" in text and len(text) < 160


def test_write_options_one_validation(tmp_path):
    from detfmt.writing.options import WriteOptions

    options = WriteOptions(codec="zstd", fixed_size=16, box_fields={"iscrowd": "uint8"})
    assert options.fixed_size == (16, 16) and options.box_fields == (("iscrowd", "|u1"),)
    report = detfmt.write(make_samples(3, fields=True), tmp_path / "ds", classes=CLASSES,
                          options=options)
    assert report.codecs == {"zstd": 3}
    with pytest.raises(detfmt.UsageError, match="max_side"):
        WriteOptions.from_kwargs(max_sides=3)  # a typo names the option it meant
    with pytest.raises(detfmt.UsageError, match="either"):
        detfmt.write([], tmp_path / "x", classes=CLASSES, options=options, codec="raw")
    for bad in ({"zstd_level": 40}, {"jpeg_quality": True}, {"clip": "yes"},
                {"metadata": {"k": "v" * 70000}}, {"box_fields": {"image": "uint8"}}):
        with pytest.raises(detfmt.UsageError):
            WriteOptions(**bad)


def test_header_limit_is_checked_before_any_sample(tmp_path):
    consumed = []

    def samples():
        consumed.append(1)
        yield from make_samples(1)

    many = [f"class-{i:05d}-" + "x" * 200 for i in range(6000)]  # ~1.4 MB of names
    with pytest.raises(detfmt.UsageError, match="header"):
        detfmt.write(samples(), tmp_path / "ds", classes=many)
    assert consumed == []


# ----------------------------------------------------------------------------- shards


def test_build_shard_equals_packing_the_directory(tmp_path):
    """The streaming shard builder writes exactly the canonical packing of what `write` writes:
    images first at a page boundary, the other members sorted, the TOC padded with spaces."""
    from detfmt.format.pack import pack_directory
    from detfmt.reading.sources import PackedSource
    from detfmt.writing.writer import build_shard

    samples = make_samples(25, seed=9, fields=True)
    options = {"codec": "zstd", "box_fields": {"iscrowd": "uint8"}}
    built = build_shard(samples, tmp_path / "a.detfmt", classes=CLASSES, **options)
    detfmt.write(samples, tmp_path / "ds", classes=CLASSES, **options)
    packed = io.BytesIO()
    pack_directory(tmp_path / "ds", packed)
    data = (tmp_path / "a.detfmt").read_bytes()
    assert data == packed.getvalue()
    members = sorted(PackedSource(tmp_path / "a.detfmt").entries.values(), key=lambda m: m.offset)
    names = [m.name for m in members]
    assert names[0] == "images.bin" and names[1:] == sorted(names[1:])
    assert members[0].offset % 4096 == 0
    assert data[16 : members[0].offset].rstrip(b" ").endswith(b"}")
    assert (built.num_samples, built.bytes) == (25, len(data))
    import xxhash

    assert built.xxh3_64 == xxhash.xxh3_64_hexdigest(data)
    assert built.header.num_samples == 25 and built.max_boxes == built.header.max_boxes
    build_shard(samples, tmp_path / "b.detfmt", classes=CLASSES, **options)
    assert (tmp_path / "b.detfmt").read_bytes() == data  # S-14


def test_build_shard_failure_leaves_no_file(tmp_path):
    from detfmt.writing.writer import build_shard

    samples = make_samples(5)
    samples[3] = one(boxes=[(1, 1, float("nan"), 5)])
    with pytest.raises(detfmt.InvalidSampleError) as caught:
        build_shard(samples, tmp_path / "s.detfmt", classes=CLASSES)
    assert caught.value.index == 3
    assert os.listdir(tmp_path) == []
    (tmp_path / "taken.detfmt").write_bytes(b"mine")
    with pytest.raises(detfmt.TargetExistsError):
        build_shard(make_samples(2), tmp_path / "taken.detfmt", classes=CLASSES)
    assert (tmp_path / "taken.detfmt").read_bytes() == b"mine"


def test_workers_get_only_samples_that_need_decoding(tmp_path, monkeypatch):
    """Arrays already at their stored size are written by the writer itself (pickling them to
    a worker and back only costs); encoded inputs go to workers; the order and the bytes are
    those of a serial write, even when the caller reuses its array buffer between samples."""
    from detfmt.writing import processes as _processes

    started = []
    real_pool = _processes.process_pool

    def recording_pool(*args, **kwargs):
        started.append(args)
        return real_pool(*args, **kwargs)

    monkeypatch.setattr(_processes, "process_pool", recording_pool)
    detfmt.write(make_samples(6), tmp_path / "arrays", classes=CLASSES, workers=2)
    assert started == [], "raw arrays at their size were shipped to worker processes"

    rng = np.random.default_rng(3)
    pngs = []
    for _ in range(4):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (12, 9, 3), dtype=np.uint8)).save(buffer, "PNG")
        pngs.append(buffer.getvalue())
    reused = np.zeros((7, 5, 3), np.uint8)

    def mixed():
        for i in range(12):
            if i % 3 == 0:
                yield one(image=pngs[i // 3], boxes=[(0, 0, 9, 12)])
            else:
                reused[...] = i  # the caller fills one buffer for every sample
                yield one(image=reused, boxes=[(0, 0, 5, 7)])

    detfmt.write(mixed(), tmp_path / "serial", classes=CLASSES)
    detfmt.write(mixed(), tmp_path / "parallel", classes=CLASSES, workers=2)
    assert started, "encoded inputs should go to workers"
    serial, parallel = detfmt.open(tmp_path / "serial"), detfmt.open(tmp_path / "parallel")
    for name in serial.header.files:
        assert (tmp_path / "serial" / name).read_bytes() == (tmp_path / "parallel" / name
                                                            ).read_bytes(), name
    assert (parallel[4].image == 4).all() and (parallel[11].image == 11).all()


def test_spilled_spools_and_small_chunks_give_the_same_bytes(tmp_path, monkeypatch):
    """The bounded-memory paths (labels moved to scratch files, padded arrays written a few
    rows at a time, blocks flushed often) write exactly what the in-memory path writes."""
    from detfmt.writing import builder

    samples = make_samples(300, seed=11, max_boxes=9, fields=True)
    options = {"box_fields": {"iscrowd": "uint8"}, "codec": "zstd"}
    detfmt.write(samples, tmp_path / "memory", classes=CLASSES, **options)
    monkeypatch.setattr(builder, "SPOOL_MEMORY", 1000)
    monkeypatch.setattr(builder, "CHUNK_BYTES", 700)
    monkeypatch.setattr(builder, "BLOCK", 7)
    detfmt.write(samples, tmp_path / "spilled", classes=CLASSES, **options)
    names = detfmt.open(tmp_path / "memory").header.files
    for name in [*names, "header.json"]:
        assert (tmp_path / "memory" / name).read_bytes() == (tmp_path / "spilled" / name
                                                            ).read_bytes(), name


def test_a_worker_that_dies_is_a_typed_error(tmp_path, monkeypatch):
    """A worker killed mid-sample (the OOM killer) fails the write with a WriteError, leaves
    nothing behind and does not hang."""
    from detfmt.writing import image as _image

    def die(*args, **kwargs):
        os._exit(9)

    monkeypatch.setattr(_image, "load_rgb", die)  # the forked workers inherit it
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(buffer, "PNG")
    samples = [one(image=buffer.getvalue(), boxes=[(0, 0, 4, 4)]) for _ in range(5)]
    with pytest.raises(detfmt.WriteError, match="worker process died"):
        detfmt.write(samples, tmp_path / "ds", classes=CLASSES, workers=2)
    assert sorted(os.listdir(tmp_path)) == []  # nothing, not even the lock file


# ----------------------------------------------------------------------------- ragged labels


def _crowded(n: int = 30, crowd: int = 60, index: int = 4) -> list[dict]:
    """Sparse samples (0 or 1 box) and one crowded one: padding would take > 2x the boxes."""
    rng = np.random.default_rng(21)
    out = []
    for i in range(n):
        k = crowd if i == index else i % 2
        x = rng.uniform(0, 20, k).astype(np.float32)
        boxes = np.stack([x, x / 2, x + 5, x / 2 + 3], axis=1).reshape(k, 4)
        out.append({"image": rng.integers(0, 256, (24, 32, 3), dtype=np.uint8), "boxes": boxes,
                    "classes": rng.integers(0, 3, k), "iscrowd": (np.arange(k) % 2).astype(
                        np.uint8)})
    return out


@pytest.mark.parametrize("labels", ["ragged", "auto"])
def test_ragged_labels_read_back_as_the_padded_ones(tmp_path, labels):
    samples = _crowded()
    fields = {"box_fields": {"iscrowd": "uint8"}}
    detfmt.write(samples, tmp_path / "p", classes=CLASSES, labels="padded", **fields)
    detfmt.write(samples, tmp_path / "r", classes=CLASSES, labels=labels, **fields)
    padded, ragged = detfmt.open(tmp_path / "p"), detfmt.open(tmp_path / "r")
    total = sum(len(s["classes"]) for s in samples)
    assert not padded.ragged and padded.header.version == "1.0"
    assert ragged.ragged and ragged.header.version == "1.2"
    assert ragged.header.required_features == ["ragged_labels"]
    assert ragged.header.num_boxes == total and ragged.stored_boxes.shape == (total, 4)
    assert padded.boxes is padded.stored_boxes and padded.boxes.shape == (len(samples), 60, 4)
    for name in ("boxes", "classes", "box_fields"):  # (sample, slot) indexing would be wrong
        with pytest.raises(detfmt.UsageError) as caught:
            getattr(ragged, name)
        assert caught.value.rule == "RAGGED_LABELS" and f"stored_{name}" in str(caught.value)
    for i in range(len(samples)):
        a, b = padded[i], ragged[i]
        np.testing.assert_array_equal(a.boxes, b.boxes)
        np.testing.assert_array_equal(a.classes, b.classes)
        np.testing.assert_array_equal(a.fields["iscrowd"], b.fields["iscrowd"])
    order = np.random.default_rng(2).permutation(len(samples))
    for got, want in ((ragged.batch(order), padded.batch(order)),
                      (ragged.labels(order[:7]), padded.labels(order[:7]))):
        for name in ("boxes", "classes", "mask", "images", "sizes"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
        np.testing.assert_array_equal(got.fields["iscrowd"], want.fields["iscrowd"])
    assert detfmt.verify(tmp_path / "r").ok
    assert (tmp_path / "r" / "boxes.npy").stat().st_size < \
        (tmp_path / "p" / "boxes.npy").stat().st_size / 5


def test_auto_keeps_padded_labels_when_padding_is_cheap(tmp_path):
    samples = make_samples(12)  # every sample has about the same count
    detfmt.write(samples, tmp_path / "ds", classes=CLASSES)
    ds = detfmt.open(tmp_path / "ds")
    n, m = len(ds), ds.max_boxes
    total = int(ds.counts.sum())
    assert not ds.ragged and not n * m - total > 2 * total  # W-19's threshold
    header = json.loads((tmp_path / "ds" / "header.json").read_bytes())
    assert "num_boxes" not in header and header["version"] == "1.0"


def test_labels_option_is_checked(tmp_path):
    with pytest.raises(detfmt.UsageError, match="labels"):
        detfmt.write(make_samples(2), tmp_path / "ds", classes=CLASSES, labels="flat")
    assert not (tmp_path / "ds").exists()


def test_ragged_shards_make_a_1_2_manifest(tmp_path):
    from detfmt.shard.write import commit, write_shard

    fields = {"box_fields": {"iscrowd": "uint8"}}
    crowded = write_shard(_crowded(), tmp_path, "a", classes=CLASSES, **fields)
    sparse = write_shard(_crowded(crowd=1), tmp_path, "b", classes=CLASSES, labels="padded",
                         **fields)
    assert crowded.features == ["ragged_labels"] and sparse.features == []
    manifest = commit(tmp_path, [crowded, sparse])
    assert manifest.version == "1.2"
    assert manifest.required_features == ["sharded", "ragged_labels"]
    ds = detfmt.open(tmp_path)
    batch = ds.batch(np.arange(len(ds)))
    assert batch.mask.sum() == sum(len(s["classes"]) for s in _crowded() + _crowded(crowd=1))
    assert detfmt.verify(tmp_path).ok
    only_padded = tmp_path / "p"
    manifest = commit(only_padded, [write_shard(_crowded(crowd=1), only_padded, "c",
                                                classes=CLASSES, labels="padded", **fields)])
    assert manifest.version == "1.1" and manifest.required_features == ["sharded"]
