"""Fixtures for the augmentation tests: pinning the CPU backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import detfmt.augment as A

try:
    import cv2  # noqa: F401

    BACKENDS = ["torch", "opencv"]
except ImportError:  # pragma: no cover - the OpenCV backend is optional
    BACKENDS = ["torch"]


@pytest.fixture
def torch_backend() -> Iterator[None]:
    """Run the test on the batched torch kernels even when OpenCV is installed."""
    previous = A.get_cpu_backend()
    A.set_cpu_backend("torch")
    try:
        yield
    finally:
        A.set_cpu_backend(previous)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test once per CPU backend installed (torch, and OpenCV when cv2 imports)."""
    previous = A.get_cpu_backend()
    A.set_cpu_backend(request.param)
    try:
        yield request.param
    finally:
        A.set_cpu_backend(previous)
