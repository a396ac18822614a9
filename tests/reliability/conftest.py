"""Fixtures of the reliability suite: tiny datasets (built once, copied per test), sandboxes."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import relharness


@pytest.fixture(scope="session")
def base_datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny valid dataset per codec, written once per session through ``detfmt.write``."""
    root = tmp_path_factory.mktemp("base")
    return {c: relharness.build_dataset(root / c, n=5, seed=1, codec=c) for c in relharness.CODECS}


@pytest.fixture(scope="session")
def ragged_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny valid dataset in the ragged label layout (format 1.2, SPEC §10.2)."""
    root = tmp_path_factory.mktemp("ragged")
    return relharness.build_dataset(root / "ragged", n=6, seed=3, codec="zstd", labels="ragged")


@pytest.fixture
def dataset(base_datasets: dict[str, Path], tmp_path: Path) -> Callable[..., Path]:
    """Factory: a private, mutable copy of a base dataset (``dataset("zstd")``)."""
    counter = iter(range(1000))

    def make(codec: str = "raw") -> Path:
        dst = tmp_path / f"{codec}-{next(counter)}"
        shutil.copytree(base_datasets[codec], dst)
        return dst

    return make


@pytest.fixture(scope="module")
def worker() -> Iterator[relharness.SafeWorker]:
    """A persistent sandboxed child (1 GiB address space, 10 s per call) for a test module."""
    w = relharness.SafeWorker()
    yield w
    w.close()


@pytest.fixture(scope="module")
def worker30() -> Iterator[relharness.SafeWorker]:
    """The same child with 30 s per call, for the kill loops (a check reads a whole dataset)."""
    w = relharness.SafeWorker(timeout=30)
    yield w
    w.close()
