"""Which backend resamples and recolours CPU images: batched torch or per-sample OpenCV.

On CPU, ``grid_sample`` and the elementwise HSV kernel are far slower than OpenCV's fixed-point
SIMD ``warpAffine`` / ``cvtColor`` (docs/augment.md, Performance), so uint8 CPU batches go
through OpenCV when it is importable. Only the pixels change backend: parameters, matrices,
boxes and masks are computed by the same torch code either way.
"""

from __future__ import annotations

import contextlib
import importlib.util
import threading
from collections.abc import Iterator
from typing import Any, Literal

import torch

from detfmt.errors import UsageError
from detfmt.torch.threads import thread_budget

Backend = Literal["auto", "torch", "opencv"]
BACKENDS: tuple[str, ...] = ("auto", "torch", "opencv")

_state: dict[str, str] = {"backend": "auto"}
_cv2_found: list[bool] = []


def cv2_available() -> bool:
    """Whether ``cv2`` can be imported (checked once, without importing it)."""
    if not _cv2_found:
        _cv2_found.append(importlib.util.find_spec("cv2") is not None)
    return _cv2_found[0]


def set_cpu_backend(backend: Backend = "auto") -> None:
    """Choose how uint8 CPU images are warped and HSV-shifted.

    ``"auto"`` (default): OpenCV when ``cv2`` is importable, else torch. ``"torch"``: always the
    batched torch kernels (as on CUDA). ``"opencv"``: OpenCV, an error if it is missing. CUDA and
    float images always use torch.
    """
    if backend not in BACKENDS:
        raise UsageError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "opencv" and not cv2_available():
        raise UsageError("the opencv backend needs opencv-python-headless (detfmt[torch])")
    _state["backend"] = backend


def get_cpu_backend() -> str:
    """The value last given to `set_cpu_backend`."""
    return _state["backend"]


def use_opencv(images: torch.Tensor) -> bool:
    """Whether these images go through the OpenCV backend (uint8 CPU (B, C<=4, H, W))."""
    if torch.compiler.is_compiling() or _state["backend"] == "torch":
        return False
    return (
        images.device.type == "cpu"
        and images.dtype == torch.uint8
        and images.dim() == 4
        and images.shape[1] in (1, 3, 4)
        and not images.requires_grad
        and cv2_available()
    )


_local = threading.local()


def pool_threads() -> int:
    """Threads for the per-sample OpenCV pool: the budget of a loader thread
    (`detfmt.torch.threads`), else this thread's torch count as it was outside `small_ops`."""
    budget = thread_budget()
    if budget is not None:
        return budget
    saved = getattr(_local, "threads", None)
    return saved if saved is not None else torch.get_num_threads()


_cv2_lock = threading.Lock()
_cv2_users = [0, 0]  # [threads inside `opencv_single_threaded`, OpenCV's count before the first]


@contextlib.contextmanager
def opencv_single_threaded(cv2: Any) -> Iterator[None]:
    """OpenCV's own (process-wide) thread count at 1 while per-sample kernels run in our pool.

    Reference counted: several threads (the loader's, a trainer's) may run the backend at once;
    the first one in saves OpenCV's count and the last one out restores it, so overlapping calls
    never leave OpenCV at 1 thread for everyone else, nor at many for a running pool.
    """
    with _cv2_lock:
        if _cv2_users[0] == 0:
            _cv2_users[1] = cv2.getNumThreads()
            cv2.setNumThreads(1)
        _cv2_users[0] += 1
    try:
        yield
    finally:
        with _cv2_lock:
            _cv2_users[0] -= 1
            if _cv2_users[0] == 0:
                cv2.setNumThreads(_cv2_users[1])


@contextlib.contextmanager
def small_ops(images: torch.Tensor) -> Iterator[None]:
    """Run the bookkeeping of an OpenCV-backend call (parameters, matrices, boxes) on 1 thread.

    Those are eager torch ops on a few hundred numbers; with 2 intra-op threads on a busy
    machine one small ``bmm``, ``linalg.inv`` or advanced index took 1-10 ms instead of
    10-100 us, waiting for a descheduled worker. ``torch.set_num_threads`` only sets the
    calling thread's OpenMP count (other running threads keep theirs), and is restored on exit;
    the OpenCV pool still gets the caller's count (`pool_threads`). No-op unless ``images``
    take the OpenCV backend, so batched torch kernels keep their threads.
    """
    if getattr(_local, "threads", None) is not None or not use_opencv(images):
        yield
        return
    previous = torch.get_num_threads()
    _local.threads = previous
    if previous != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if previous != 1:
            torch.set_num_threads(previous)
        _local.threads = None
