"""No read path returns an unchecked label, whatever the kind of dataset.

Every read path (``ds[i]``, ``ds.batch``, ``ds.labels``, the torch Loader with each io mode, the
DataLoader path and the worker ring) x {1.0 directory, local sharded root, remote sharded root,
each local kind with ragged labels} x {a class id out of range, a NaN box, a count above M}:
each raises the typed error SPEC.md names, never returns data. A sharded root's corrupted shard
gets a matching manifest checksum, as an attacker who can write the root would make it, so the
label checks themselves are tested (not the download's checksum).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import detfmt
from detfmt.storage import file_digest

torch = pytest.importorskip("torch")
from detfmt.torch import Delivery, DetectionDataset, Loader, RingDataLoader  # noqa: E402
from tests.datasets import make_dataset, make_sharded_root, part_of  # noqa: E402

N = 24
VICTIM = 13  # a sample with boxes, in a middle shard of the sharded layout
SHAPES = [(16 + i % 5, 20 + i % 7) for i in range(N)]

# corruption -> (the rule SPEC.md names, the error class)
CORRUPTIONS = {
    "class_range": ("CLASS_RANGE", detfmt.LabelError),
    "nan_box": ("BOX_INVALID", detfmt.LabelError),
    "count_above_m": ("COUNT_RANGE", detfmt.FormatError),
}


def _patch(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def corrupt(ds, corruption: str) -> None:
    """Break one label of sample VICTIM in place, in its directory or shard file."""
    part, j = part_of(ds, VICTIM)
    assert int(part.counts[j]) >= 1
    # the victim's first box: slot 0 of its row, or in the ragged layout (SPEC §10.2) row
    # K_0 + ... + K_(j-1) of the flat arrays
    row = int(np.asarray(part.counts[:j], np.int64).sum()) if part.ragged else j
    if corruption == "class_range":
        array, value = part.stored_classes, np.int32(part.header.num_classes + 4).tobytes()
        member, offset = part.members["classes.npy"], array[row : row + 1].ctypes.data
    elif corruption == "nan_box":
        array, value = part.stored_boxes, np.float32("nan").tobytes()
        member, offset = part.members["boxes.npy"], array[row : row + 1].ctypes.data
    else:
        array, value = part.counts, np.int32(part.max_boxes + 1).tobytes()
        member, offset = part.members["counts.npy"], array[j : j + 1].ctypes.data
    within = offset - np.frombuffer(member.view, np.uint8).ctypes.data  # byte offset in member
    _patch(member.file, member.base + within, value)


def reseal(root: Path) -> None:
    """Give every shard of a sharded root the checksum of its current bytes in the manifest."""
    manifest = json.loads((root / "manifest.json").read_bytes())
    for shard in manifest["shards"]:
        shard["xxh3_64"] = file_digest(root / shard["path"]).xxh3_64
    (root / "manifest.json").write_text(json.dumps(manifest))


@contextlib.contextmanager
def dataset(kind: str, corruption: str, tmp: Path) -> Iterator[Callable[[], object]]:
    """Yields an opener of the corrupted dataset of ``kind``."""
    labels = "ragged" if kind.endswith("ragged") else "padded"
    if kind.startswith("dir"):
        ds = make_dataset(tmp / "ds", SHAPES, labels=labels)
        assert ds.ragged == (labels == "ragged")
        corrupt(ds, corruption)
        yield lambda: detfmt.open(tmp / "ds")
        return
    ds = make_sharded_root(tmp / "root", SHAPES, shard_sizes=(5, 7, 12), labels=labels)
    corrupt(ds, corruption)
    ds.close()
    reseal(tmp / "root")
    if kind.startswith("sharded"):
        yield lambda: detfmt.open(tmp / "root")
        return
    from tests.scaleout.scaleout_servers import http_range_server

    with http_range_server(str(tmp / "root")) as url:
        counter = iter(range(100))
        # a fresh cache each time: every open downloads (and verifies) the shards again
        yield lambda: detfmt.open(url, cache_dir=tmp / f"cache{next(counter)}")


def _loader(ds, **kwargs) -> None:
    for _ in Loader(ds, 5, shuffle=False, delivery=Delivery(num_threads=2, **kwargs)):
        pass


READ_PATHS: dict[str, Callable[[object], object]] = {
    "ds[i]": lambda ds: ds[VICTIM],
    "ds.batch": lambda ds: ds.batch([2, VICTIM, 0]),
    "ds.labels": lambda ds: ds.labels([VICTIM]),
    "ds.iter_batches": lambda ds: list(ds.iter_batches(ds.plan(seed=1, epoch=0, batch_size=4))),
    "Loader io=mmap": lambda ds: _loader(ds),
    "Loader io=pread": lambda ds: _loader(ds, io="pread"),
    "Loader canvas": lambda ds: _loader(ds, canvas=(32, 32)),
    "DetectionDataset": lambda ds: DetectionDataset(ds)[VICTIM],
    "RingDataLoader": lambda ds: list(RingDataLoader(ds, 4, num_workers=1, shuffle=False,
                                                     multiprocessing_context="fork")),
}


@pytest.mark.parametrize("corruption", CORRUPTIONS)
@pytest.mark.parametrize("kind", ["dir", "sharded", "remote", "dir-ragged", "sharded-ragged"])
def test_every_read_path_refuses_a_broken_label(tmp_path, kind, corruption):
    rule, error_class = CORRUPTIONS[corruption]
    with dataset(kind, corruption, tmp_path) as opener:
        for name, read in READ_PATHS.items():
            if name == "RingDataLoader" and kind == "remote":
                continue  # the same workers as the local root, reading the same cache files
            opened = []
            with pytest.raises(error_class) as info:  # at open (a count) or at the read
                opened.append(opener())
                read(opened[0])
            for ds in opened:
                ds.close()
            assert info.value.rule == rule, (name, info.value)
            assert info.value.index is not None, name  # the sample is named
        if corruption != "count_above_m":  # counts are structural: their whole chunk fails
            ds = opener()  # a label breaks its own sample only: the others still read
            assert len(ds[0].boxes) == 0 and ds.batch([1, 2]).indices.tolist() == [1, 2]
            ds.close()
