"""The block path for small raw arrays (`detfmt.writing.blocks`): the same dataset, byte for byte,
and
the same errors naming the same samples, as preparing every sample alone."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from PIL import Image

import detfmt
from detfmt.writing import blocks, builder
from tests.samples import CLASSES

BLOCK = blocks.BLOCK_SAMPLES


@pytest.fixture
def blocks_appended(monkeypatch):
    """How many samples went through `DatasetBuilder.append_block` (the block path was taken)."""
    taken = []
    real = builder.DatasetBuilder.append_block

    def counting(self, block):
        taken.append(len(block))
        real(self, block)

    monkeypatch.setattr(builder.DatasetBuilder, "append_block", counting)
    return taken


def write_both(tmp_path, monkeypatch, make, **options):
    """Write ``make()`` with blocks and then with every sample prepared alone; returns what
    each raised or reported, after checking that both wrote the same files."""
    results = []
    for name in ("blocks", "alone"):
        if name == "alone":
            monkeypatch.setattr(blocks, "applies", lambda rules: False)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                results.append(detfmt.write(make(), tmp_path / name, classes=CLASSES,
                                            **options))
        except detfmt.InvalidSampleError as error:
            results.append(error)
    monkeypatch.undo()
    if not isinstance(results[0], Exception):
        assert files(tmp_path / "blocks") == files(tmp_path / "alone")
    else:
        assert not (tmp_path / "blocks").exists() and not (tmp_path / "alone").exists()
        assert not list(tmp_path.glob(".detfmt-tmp-*"))
    return results


def files(path):
    return {name: (path / name).read_bytes() for name in sorted(os.listdir(path))}


def tiny(n, seed=0):
    """8x8 samples with 0-3 valid boxes (numpy labels, as the benchmark's)."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8)
    samples = []
    for i in range(n):
        k = int(rng.integers(0, 4))
        x1 = rng.uniform(0, 4, k)
        samples.append({"image": images[i], "boxes": np.stack([x1, x1, x1 + 2, x1 + 3], 1),
                        "classes": rng.integers(0, 3, k), "file_name": f"{i}.jpg"})
    return samples


def broken(sample, rule):
    """``sample`` (8x8) with its second label breaking ``rule`` (a ``/y`` suffix: in y)."""
    bad = dict(sample, boxes=np.array([[0.0, 0.0, 8.0, 8.0], [1.0, 1.0, 2.0, 2.0]]),
               classes=np.array([2, 0]))
    if rule == "BOX_INVALID":
        bad["boxes"][1, 2] = float("nan")
    elif rule == "BOX_OUT_OF_IMAGE":
        bad["boxes"][1, 2] = 9.5
    elif rule == "BOX_OUT_OF_IMAGE/y":
        bad["boxes"][1, 3] = 8.01
    else:
        bad["classes"][1] = 3
    return bad


def varied(n, seed=0):
    """Every input form a block takes or hands to `prepare`, mixed: labels as arrays of
    several dtypes or lists, empty labels, no or unicode file names, source ids, boxes to clamp
    or clip, many boxes, non-contiguous pixels, and samples that leave the block (PIL,
    grayscale, orig_size, a path-like name, a numpy source id, a large image)."""
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(n):
        h, w = (int(v) for v in rng.integers(1, 30, 2))
        k = int(rng.integers(0, 5)) if i % 23 else 40
        x1, y1 = rng.uniform(0, w / 2, k), rng.uniform(0, h / 2, k)
        boxes = np.stack([x1, y1, x1 + rng.uniform(0, w / 2, k), y1 + rng.uniform(0, h / 2, k)],
                         1)
        image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        sample = {"image": image, "boxes": boxes, "classes": rng.integers(0, 3, k)}
        kind = i % 17
        if kind == 1:
            sample["boxes"], sample["classes"] = boxes.astype(np.float32), \
                sample["classes"].astype(np.uint8)
        elif kind == 2:
            sample["boxes"], sample["classes"] = boxes.tolist(), sample["classes"].tolist()
        elif kind == 3:
            sample["boxes"], sample["classes"] = [], []
        elif kind == 4:
            sample["file_name"] = f"bild_{i}_\u00e4\u00f6.png"
        elif kind == 5:
            sample["source_id"] = 10 * i
        elif kind == 6 and k:
            boxes[0, 2] = w + 1e-5  # float noise: clamped
        elif kind == 7 and k:
            boxes[0, 0] = -3.0  # outside: clipped (clip=True)
        elif kind == 8:
            sample["image"] = np.ascontiguousarray(np.swapaxes(image, 0, 1)).swapaxes(0, 1)
        elif kind == 9:
            sample["image"] = Image.fromarray(image)
        elif kind == 10:
            sample["image"] = image[..., 0]
        elif kind == 11:
            sample["orig_size"] = (2 * h, 2 * w)
        elif kind == 12:
            sample["file_name"] = __import__("pathlib").Path(f"dir/{i}.jpg")
        elif kind == 13:
            sample["source_id"] = np.int64(i)
        elif kind == 14:
            sample["image"] = rng.integers(0, 256, (128, 130, 3), dtype=np.uint8)
        elif kind == 15:
            sample["boxes"] = boxes.astype(np.int64)
        samples.append(sample)
    return samples


@pytest.mark.parametrize("block", [BLOCK, 16, 1])
def test_blocks_write_what_samples_alone_write(tmp_path, monkeypatch, blocks_appended, block):
    monkeypatch.setattr(blocks, "BLOCK_SAMPLES", block)
    if block == 1:
        monkeypatch.setattr(blocks, "MIN_BLOCK", 1)
    samples = varied(700)
    with_blocks, alone = write_both(tmp_path, monkeypatch, lambda: samples, clip=True)
    assert sum(blocks_appended) > 300, "the block path was not taken"
    for field in ("num_samples", "num_boxes", "max_boxes", "clipped_boxes", "codecs"):
        assert getattr(with_blocks, field) == getattr(alone, field), field
    assert with_blocks.clipped_boxes > 0
    ds = detfmt.open(tmp_path / "blocks")
    np.testing.assert_array_equal(ds[0].image, samples[0]["image"])
    np.testing.assert_array_equal(ds[8].image, samples[8]["image"])


@pytest.mark.parametrize(
    ("position", "rule"),
    [(0, "BOX_INVALID"), (7, "CLASS_RANGE"), (BLOCK - 1, "BOX_OUT_OF_IMAGE"),
     (BLOCK, "BOX_INVALID"), (BLOCK + 1, "CLASS_RANGE"), (BLOCK + 2, "BOX_OUT_OF_IMAGE/y"),
     (2 * BLOCK + 9, "BOX_OUT_OF_IMAGE")])
def test_an_error_names_its_sample_in_any_block(tmp_path, monkeypatch, position, rule):
    """A bad label found by a block's vectorised check is reported for its own sample (not
    the block's first, nor a neighbour), with the message of the per-sample check."""
    samples = tiny(2 * BLOCK + 10)
    samples[position] = broken(samples[position], rule)
    if position + 3 < len(samples):  # a later bad sample in the same block is not the error
        samples[position + 3] = broken(samples[position + 3], "BOX_INVALID")
    with_blocks, alone = write_both(tmp_path, monkeypatch, lambda: iter(samples))
    assert isinstance(with_blocks, detfmt.InvalidSampleError)
    assert (with_blocks.index, with_blocks.rule) == (position, rule.split("/")[0])
    assert "box 1 " in str(with_blocks)
    assert str(with_blocks) == str(alone) and with_blocks.rule == alone.rule


def test_skipped_samples_are_the_same_in_blocks(tmp_path, monkeypatch, blocks_appended):
    monkeypatch.setattr(blocks, "BLOCK_SAMPLES", 64)
    samples = tiny(300, seed=2)
    bad = [0, 1, 2, 30, 31, 63, 64, 65, 200, 299]
    rules = ["BOX_INVALID", "CLASS_RANGE", "BOX_OUT_OF_IMAGE", "BOX_OUT_OF_IMAGE/y"] * 3
    for position, rule in zip(bad, rules, strict=False):
        samples[position] = broken(samples[position], rule)
    with_blocks, alone = write_both(tmp_path, monkeypatch, lambda: samples, on_error="skip")
    assert blocks_appended
    assert with_blocks.skipped == alone.skipped == len(bad)
    assert with_blocks.skipped_rules == alone.skipped_rules
    assert with_blocks.skipped_examples == alone.skipped_examples
    assert with_blocks.num_samples == 300 - len(bad)


def test_reused_buffers_are_copied_as_read(tmp_path, blocks_appended):
    """A caller may fill one image, one boxes and one classes array for every sample."""
    image = np.zeros((6, 7, 3), np.uint8)
    boxes = np.zeros((2, 4))
    classes = np.zeros(2, np.int64)

    def refilled():
        for i in range(50):
            image[...] = i
            boxes[:] = [[0, 0, 1 + i % 5, 2], [1, 1, 3, 4]]
            classes[:] = [i % 3, (i + 1) % 3]
            yield {"image": image, "boxes": boxes, "classes": classes}

    detfmt.write(refilled(), tmp_path / "ds", classes=CLASSES)
    assert sum(blocks_appended) == 50
    ds = detfmt.open(tmp_path / "ds")
    for i in range(50):
        sample = ds[i]
        assert (sample.image == i).all()
        np.testing.assert_array_equal(sample.boxes, [[0, 0, 1 + i % 5, 2], [1, 1, 3, 4]])
        np.testing.assert_array_equal(sample.classes, [i % 3, (i + 1) % 3])


def test_a_bad_sample_read_before_a_failing_input_is_the_error(tmp_path):
    """The samples read into a block before the input raised are checked first, as they
    would have been one by one: an invalid one among them is the error."""
    samples = tiny(40)
    samples[20] = broken(samples[20], "CLASS_RANGE")

    def failing(good):
        yield from (samples[:20] + samples[21:30]) if good else samples[:30]
        raise RuntimeError("source failed")

    with pytest.raises(detfmt.InvalidSampleError) as caught:
        detfmt.write(failing(False), tmp_path / "a", classes=CLASSES)
    assert caught.value.index == 20
    with pytest.raises(RuntimeError, match="source failed"):
        detfmt.write(failing(True), tmp_path / "b", classes=CLASSES)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_normalised_looking_boxes_warn_from_blocks(tmp_path, blocks_appended):
    def samples(box):
        return [{"image": np.zeros((64, 80, 3), np.uint8), "boxes": [box], "classes": [0]}
                for _ in range(40)]

    with pytest.warns(detfmt.errors.NormalizedBoxesWarning, match="first 16 samples"):
        detfmt.write(samples((0.1, 0.2, 0.5, 0.9)), tmp_path / "a", classes=CLASSES)
    assert blocks_appended
    with warnings.catch_warnings():
        warnings.simplefilter("error", detfmt.errors.NormalizedBoxesWarning)
        detfmt.write(samples((10, 2, 50, 60)), tmp_path / "b", classes=CLASSES)


def test_ctrl_c_in_the_input_is_not_replaced(tmp_path):
    """Ctrl-C (or SIGTERM) raised by the input mid-block stops the write at once: not turned
    into the error of a sample read before it, nothing left behind."""
    samples = tiny(40)
    samples[5] = broken(samples[5], "CLASS_RANGE")

    def interrupted():
        yield from samples[:30]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        detfmt.write(interrupted(), tmp_path / "ds", classes=CLASSES)
    assert not (tmp_path / "ds").exists() and not list(tmp_path.glob(".detfmt-tmp-*"))
