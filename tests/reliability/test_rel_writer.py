"""Writer-side halves of the adversarial cases: invalid input is refused before anything is
published (20-22), names are data and never paths (24), a target that appears during the write
or a failure after the switch is reported with the right type and an honest message (25, 27),
and overwrite never replaces something that is not a dataset."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import relharness as rh


def samples_with(i: int, **changes: Any) -> list[dict[str, Any]]:
    samples = rh.make_samples(4, seed=5)
    samples[i].update(changes)
    return samples


def write(samples: list[dict[str, Any]], target: Path, **kw: Any) -> Any:
    import detfmt

    kw.setdefault("box_fields", {"iscrowd": "|u1"})
    return detfmt.write(samples, target, classes=rh.CLASSES, progress=False, **kw)


BAD_INPUT = [
    ("nan-box", {"boxes": np.array([[np.nan, 0, 1, 1]], np.float32)}, "BOX_INVALID"),
    ("inf-box", {"boxes": np.array([[0, 0, np.inf, 1]], np.float32)}, "BOX_INVALID"),
    ("reversed-box", {"boxes": np.array([[3, 0, 1, 1]], np.float32)}, "BOX_INVALID"),
    ("outside-box", {"boxes": np.array([[0, 0, 500, 1]], np.float32)}, "BOX_OUT_OF_IMAGE"),
    ("class-too-big", {"classes": np.array([3, 0], np.int32)}, "CLASS_RANGE"),
    ("class-negative", {"classes": np.array([-1, 0], np.int32)}, "CLASS_RANGE"),
    ("class-float", {"classes": np.array([0.5, 1.0])}, "CLASS_RANGE"),
]


@pytest.mark.parametrize(("name", "change", "rule"), BAD_INPUT, ids=[b[0] for b in BAD_INPUT])
def test_writer_refuses_invalid_labels(name: str, change: dict[str, Any], rule: str,
                                       tmp_path: Path) -> None:
    import detfmt

    base = rh.make_samples(4, seed=5)[2]
    k = len(change.get("boxes", base["boxes"]))
    sample_change = {"boxes": base["boxes"][:k] if "boxes" not in change else change["boxes"],
                     "classes": change.get("classes", base["classes"][:k]),
                     "iscrowd": base["iscrowd"][:k]}
    if len(sample_change["classes"]) != k:  # keep shapes consistent: only the value is wrong
        sample_change["boxes"] = np.tile(np.array([[0, 0, 1, 1]], np.float32), (2, 1))
        sample_change["iscrowd"] = np.zeros(2, np.uint8)
    target = tmp_path / "ds"
    with pytest.raises(detfmt.InvalidSampleError) as info:
        write(samples_with(2, **sample_change), target)
    assert (info.value.rule, info.value.index) == (rule, 2), info.value
    assert not os.path.lexists(target)
    assert rh.temp_leftovers(tmp_path) == []


def test_clip_true_clips_instead(tmp_path: Path) -> None:
    import detfmt

    s = samples_with(1, boxes=np.array([[-3, 0, 500, 2]], np.float32),
                     classes=np.array([1], np.int32), iscrowd=np.array([0], np.uint8))
    report = write(s, tmp_path / "ds", clip=True)
    assert report.clipped_boxes == 1
    with detfmt.open(tmp_path / "ds") as ds:
        _, w, _ = ds.image_shape(1)
        assert ds[1].boxes.tolist() == [[0.0, 0.0, float(w), 2.0]]
    assert detfmt.verify(tmp_path / "ds").ok


@pytest.mark.parametrize("name", ["../../etc/passwd", "/abs/path.jpg", "nul\0byte.jpg",
                                  "..", "dir/sub/ünï.png"])
def test_file_names_are_data_not_paths(name: str, tmp_path: Path) -> None:
    """Case 24 (writer side): a file_name is stored and returned verbatim, never opened."""
    import detfmt

    parent = tmp_path / "p"
    parent.mkdir()
    write(samples_with(0, file_name=name), parent / "ds")
    assert sorted(os.listdir(parent)) == ["ds"]
    with detfmt.open(parent / "ds") as ds:
        assert ds[0].fields["file_name"] == name


def test_target_appearing_during_the_write_is_target_exists(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """Case 25: someone (not a detfmt writer: no lock) creates the target while we write; the
    no-replace rename refuses it and the writer says TargetExistsError, not a generic error."""
    import detfmt
    from detfmt import fileio

    target = tmp_path / "ds"
    real = fileio.rename_noreplace

    def intruder_first(source: str, dest: str) -> None:
        os.mkdir(dest)
        (Path(dest) / "theirs.txt").write_text("not yours")
        real(source, dest)

    monkeypatch.setattr(fileio, "rename_noreplace", intruder_first)
    with pytest.raises(detfmt.TargetExistsError) as info:
        write(rh.make_samples(2, 1), target)
    assert info.value.rule == "TARGET_EXISTS"
    assert os.listdir(target) == ["theirs.txt"], "their files must not mix with ours"
    assert rh.temp_leftovers(tmp_path) == []


def test_failure_after_the_switch_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    """Case 27: if fsync of the parent fails after the atomic exchange, the error must not claim
    the target is untouched: the new dataset is in place (and the old one is gone)."""
    import detfmt
    from detfmt import fileio

    target = tmp_path / "ds"
    rh.build_dataset(target, n=2, seed=1)
    real = fileio.fsync_dir
    calls: list[str] = []

    def failing_parent_sync(path: str) -> None:
        calls.append(path)
        if path == str(tmp_path):
            raise OSError(errno.EIO, os.strerror(errno.EIO), path)
        real(path)

    monkeypatch.setattr(fileio, "fsync_dir", failing_parent_sync)
    with pytest.raises(detfmt.WriteError) as info:
        write(rh.make_samples(3, 2), target, overwrite=True)
    assert info.value.errno == errno.EIO
    assert "in place" in str(info.value), str(info.value)
    monkeypatch.undo()
    with detfmt.open(target) as ds:
        assert len(ds) == 3
    assert rh.temp_leftovers(tmp_path) == []


def test_overwrite_never_replaces_a_non_dataset(tmp_path: Path) -> None:
    import detfmt

    target = tmp_path / "photos"
    target.mkdir()
    (target / "holiday.jpg").write_bytes(b"precious")
    with pytest.raises(detfmt.TargetExistsError):
        write(rh.make_samples(2, 1), target, overwrite=True)
    assert (target / "holiday.jpg").read_bytes() == b"precious"
    assert rh.temp_leftovers(tmp_path) == []


def test_two_rename_fallback_restores_the_old_dataset(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Without RENAME_EXCHANGE the writer replaces in two renames (target -> old, temp ->
    target). If the second fails, the old dataset must be put back, not left in a directory
    that looks like a temporary (and that `detfmt cleanup` would delete)."""
    import detfmt
    from detfmt import fileio

    target = tmp_path / "ds"
    rh.build_dataset(target, n=2, seed=1)
    before = rh.tree_digest(target)

    def no_exchange(source: str, dest: str) -> None:
        raise OSError(errno.ENOSYS, "no RENAME_EXCHANGE (test)")

    real_rename = fileio.rename
    count = []

    def second_rename_fails(source: str, dest: str) -> None:
        count.append(1)
        if len(count) == 2:
            raise OSError(errno.EIO, os.strerror(errno.EIO), source)
        real_rename(source, dest)

    monkeypatch.setattr(fileio, "rename_exchange", no_exchange)
    monkeypatch.setattr(fileio, "rename", second_rename_fails)
    with pytest.warns(UserWarning, match="no atomic directory exchange"), \
            pytest.raises(detfmt.WriteError):
        write(rh.make_samples(3, 2), target, overwrite=True)
    monkeypatch.undo()
    assert rh.tree_digest(target) == before
    detfmt.cleanup(tmp_path)
    assert rh.tree_digest(target) == before
    assert rh.temp_leftovers(tmp_path) == []
