"""Optional ``torch.compile`` of the per-pixel kernels (the warp and the HSV maps).

Eager torch runs each elementwise step as its own pass over the batch; inductor fuses them
into one loop, which matters most on CPU (the HSV kernel is ~8x faster compiled there). Off
by default: the first call compiles for a minute, and CPU needs a C++ compiler.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])

_state = {"enabled": False}
_compiled: dict[Callable[..., Any], Callable[..., Any]] = {}


def use_compiled_kernels(enabled: bool = True) -> None:
    """Run the warp and HSV kernels through ``torch.compile(dynamic=False)`` from now on."""
    _state["enabled"] = bool(enabled)


def kernel(fn: F) -> F:
    """Mark a pure tensor function as a kernel that `use_compiled_kernels` may compile."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not _state["enabled"] or torch.compiler.is_compiling():
            return fn(*args, **kwargs)
        compiled = _compiled.get(fn)
        if compiled is None:
            compiled = torch.compile(fn, dynamic=False)
            _compiled[fn] = compiled
        return compiled(*args, **kwargs)

    return run  # type: ignore[return-value]
