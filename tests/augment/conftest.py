"""Fixtures for the augmentation tests: pinning the CPU backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import detfmt.augment as A


@pytest.fixture
def torch_backend() -> Iterator[None]:
    """Run the test on the batched torch kernels even when OpenCV is installed."""
    previous = A.get_cpu_backend()
    A.set_cpu_backend("torch")
    try:
        yield
    finally:
        A.set_cpu_backend(previous)
