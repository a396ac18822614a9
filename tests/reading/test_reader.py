"""Reader behaviour: zero-copy views, batches and reusable buffers, pickling, change detection."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

import detfmt
from detfmt.format import npy, spec
from tests.samples import CLASSES, make_samples


@pytest.fixture
def dataset(tmp_path):
    samples = make_samples(16, seed=4, fields=True)
    detfmt.write(samples, tmp_path / "ds", classes=CLASSES, box_fields={"iscrowd": "uint8"})
    return detfmt.open(tmp_path / "ds"), samples


def test_raw_images_are_read_only_views(dataset):
    ds, samples = dataset
    image = ds[0].image
    assert not image.flags.writeable
    with pytest.raises(ValueError):
        image[0, 0, 0] = 1
    np.testing.assert_array_equal(image, samples[0]["image"])


def test_index_protocol(dataset):
    ds, samples = dataset
    assert ds[-1].index == len(samples) - 1
    with pytest.raises(IndexError):
        ds[len(samples)]
    with pytest.raises(detfmt.UsageError):
        ds["x"]
    assert sum(1 for _ in ds) == len(samples)
    with pytest.raises(IndexError):
        ds.batch([0, 99])


def test_batch_into_a_reused_flat_buffer(dataset):
    ds, samples = dataset
    buffer = np.full(64 * 64 * 3 * 4, 77, np.uint8)
    batch = ds.batch([3, 1, 2, 3], out=buffer, pad_value=0)
    assert batch.images.base is buffer or np.shares_memory(batch.images, buffer)
    for j, i in enumerate([3, 1, 2, 3]):
        h, w = samples[i]["image"].shape[:2]
        assert tuple(batch.sizes[j]) == (h, w)
        np.testing.assert_array_equal(batch.images[j, :h, :w], samples[i]["image"])
        assert (batch.images[j, h:] == 0).all() and (batch.images[j, :, w:] == 0).all()
        k = len(samples[i]["boxes"])
        np.testing.assert_array_equal(batch.mask[j], np.arange(batch.mask.shape[1]) < k)
        np.testing.assert_array_equal(batch.classes[j, :k], samples[i]["classes"])
        assert (batch.classes[j, k:] == -1).all()
        np.testing.assert_array_equal(batch.fields["iscrowd"][j, :k], samples[i]["iscrowd"])
    assert batch.mask.shape[1] == max(len(samples[i]["boxes"]) for i in [3, 1, 2])
    with pytest.raises(detfmt.UsageError):
        ds.batch([0, 1], out=np.zeros(10, np.uint8))


def test_pickle_reopens_by_path(dataset):
    ds, _ = dataset
    clone = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(clone[5].image, ds[5].image)
    assert len(pickle.dumps(ds)) < 4096  # only the path and file identities travel


def test_replacement_is_detected(dataset, tmp_path):
    ds, _ = dataset
    before = ds[2].image.copy()
    ds.check()
    detfmt.write(make_samples(3, seed=9), tmp_path / "ds", classes=CLASSES, overwrite=True)
    with pytest.raises(detfmt.DatasetChangedError):
        ds.check()
    np.testing.assert_array_equal(ds[2].image, before)  # the old mapping still reads old bytes
    with pytest.raises(detfmt.DatasetChangedError):
        pickle.loads(pickle.dumps(ds))


def test_open_errors_are_typed(tmp_path):
    with pytest.raises(detfmt.DatasetNotFoundError):
        detfmt.open(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(detfmt.NotDetfmtError):
        detfmt.open(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(detfmt.DatasetNotFoundError):
        detfmt.open(tmp_path / "empty")


def _rewrite_header(path, change):
    header = json.loads((path / spec.HEADER_FILE).read_text())
    change(header)
    (path / spec.HEADER_FILE).write_text(json.dumps(header))


@pytest.mark.parametrize(
    ("change", "error", "rule"),
    [
        (lambda h: h.update(version="2.0"), detfmt.UnsupportedVersionError, "VERSION_UNSUPPORTED"),
        (lambda h: h.update(required_features=["sharded"]), detfmt.UnsupportedVersionError,
         "FEATURE_UNSUPPORTED"),
        (lambda h: h.update(format="other"), detfmt.NotDetfmtError, "NOT_DETFMT"),
        (lambda h: h.update(num_samples="16"), detfmt.HeaderError, "HEADER_SCHEMA"),
        # image.codecs cleared: its sum is checked before the arrays' shapes (SPEC §12 step 1)
        (lambda h: (h.update(num_samples=17), h["image"].update(codecs={})), detfmt.LayoutError,
         "COUNT_MISMATCH"),
        (lambda h: h.pop("classes"), detfmt.HeaderError, "HEADER_SCHEMA"),
        (lambda h: h["files"]["images.bin"].update(size=1), detfmt.LayoutError, "BLOB_SIZE"),
    ],
)
def test_header_violations(dataset, tmp_path, change, error, rule):
    _rewrite_header(tmp_path / "ds", change)
    with pytest.raises(error) as caught:
        detfmt.open(tmp_path / "ds")
    assert caught.value.rule == rule
    assert caught.value.path.endswith(".json") or caught.value.path.endswith(".bin") or \
        caught.value.path.endswith(".npy")


def test_minor_version_with_unknown_keys_is_read(dataset, tmp_path):
    _rewrite_header(tmp_path / "ds", lambda h: h.update(version="1.7", future_key={"a": 1}))
    assert len(detfmt.open(tmp_path / "ds")) == 16


def test_symlinked_member_is_refused(dataset, tmp_path):
    path = tmp_path / "ds"
    os.rename(path / "counts.npy", tmp_path / "elsewhere.npy")
    os.symlink(tmp_path / "elsewhere.npy", path / "counts.npy")
    with pytest.raises(detfmt.UnsafePathError):
        detfmt.open(path)


def test_label_corruption_is_caught_when_read(dataset, tmp_path):
    ds, samples = dataset
    i = next(i for i, s in enumerate(samples) if len(s["boxes"]))
    path = tmp_path / "ds" / spec.BOXES_FILE
    raw = bytearray(path.read_bytes())
    header = npy.parse_header(bytes(raw[:4096]), len(raw), str(path))
    m = ds.header.max_boxes
    offset = header.data_offset + (i * m * 4) * 4
    raw[offset : offset + 4] = np.float32(np.nan).tobytes()
    path.write_bytes(bytes(raw))
    reopened = detfmt.open(tmp_path / "ds")
    with pytest.raises(detfmt.LabelError) as caught:
        reopened[i]
    assert caught.value.rule == "BOX_INVALID" and caught.value.index == i
    report = detfmt.verify(tmp_path / "ds", raise_on_error=False)
    assert {v.rule for v in report.violations} >= {"BOX_INVALID", "FILE_CHECKSUM"}


def test_npy_files_load_with_numpy(dataset, tmp_path):
    ds, _ = dataset
    boxes = np.load(tmp_path / "ds" / spec.BOXES_FILE, mmap_mode="r", allow_pickle=False)
    np.testing.assert_array_equal(boxes, ds.boxes)
    index = np.load(tmp_path / "ds" / spec.INDEX_FILE, allow_pickle=False)
    assert index.dtype == spec.INDEX_DTYPE and index.dtype.itemsize == 48


def test_npy_header_is_numpy_compatible_and_aligned():
    for dtype, shape in [(np.dtype("<f4"), (3, 5, 4)), (spec.INDEX_DTYPE, (7,)),
                         (np.dtype("|u1"), (0, 0))]:
        encoded = npy.encode_header(dtype, shape)
        assert len(encoded) % 64 == 0
        parsed = npy.parse_header(encoded, len(encoded), "x.npy")
        assert parsed.shape == shape and parsed.data_offset == len(encoded)
        import io

        data = np.zeros(shape, dtype)
        loaded = np.load(io.BytesIO(encoded + data.tobytes()), allow_pickle=False)
        assert loaded.shape == shape and loaded.dtype == dtype


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_threaded_batch_equals_single_threaded(tmp_path, codec):
    samples = make_samples(24, seed=6, size=(20, 90))
    detfmt.write(samples, tmp_path / codec, classes=CLASSES, codec=codec)
    ds = detfmt.open(tmp_path / codec)
    order = np.random.default_rng(0).permutation(24)
    one = ds.batch(order, num_threads=1)
    many = ds.batch(order, num_threads=3, out=np.full(one.images.size + 7, 9, np.uint8))
    np.testing.assert_array_equal(one.images, many.images)
    np.testing.assert_array_equal(one.boxes, many.boxes)
    with pytest.raises(detfmt.UsageError):
        ds.batch(order, num_threads=0)


@pytest.mark.parametrize("labels", ["padded", "ragged"])
def test_batch_mask_marks_exactly_each_samples_boxes(tmp_path, labels):
    """Below and above 256 slots (the mask is built two ways), in both label layouts."""
    counts = [0, 3, 300, 256, 257, 1]
    samples = []
    for k in counts:
        x = np.arange(k, dtype=np.float32) % 20
        samples.append({"image": np.zeros((24, 32, 3), np.uint8), "classes": np.zeros(k, int),
                        "boxes": np.stack([x, x / 2, x + 5, x / 2 + 3], axis=1).reshape(k, 4)})
    detfmt.write(samples, tmp_path / "ds", classes=CLASSES, labels=labels)
    ds = detfmt.open(tmp_path / "ds")
    for indices in ([0, 1, 5], [1, 0], [2, 0, 1], [3, 4], [4, 3, 0], list(range(6))):
        batch = ds.batch(indices)
        m = max(counts[i] for i in indices)
        want = np.arange(m) < np.array([counts[i] for i in indices])[:, None]
        assert batch.mask.shape == (len(indices), m) and batch.mask.flags.c_contiguous
        np.testing.assert_array_equal(batch.mask, want)
        np.testing.assert_array_equal(batch.classes == -1, ~want)
