"""The numba kernel of `detfmt._kernel`; importing this module needs numba.

Defined at module level so numba's on-disk cache (``cache=True``) finds it again in the next
process instead of compiling it anew.
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["gather_raw"]


@intrinsic
def _memcpy(typingctx, dst, src, n):
    def codegen(context, builder, signature, args):
        d, s, k = args
        p = ir.IntType(8).as_pointer()
        cgutils.raw_memcpy(builder, builder.inttoptr(d, p), builder.inttoptr(s, p), k, 1)
        return context.get_dummy_value()
    return types.void(types.intp, types.intp, types.intp), codegen


@intrinsic
def _memset(typingctx, dst, value, n):
    def codegen(context, builder, signature, args):
        d, v, k = args
        p = ir.IntType(8).as_pointer()
        cgutils.memset(builder, builder.inttoptr(d, p), k, builder.trunc(v, ir.IntType(8)))
        return context.get_dummy_value()
    return types.void(types.intp, types.intp, types.intp), codegen


@njit(nogil=True, cache=True)
def gather_raw(sources, heights, widths, rows, out, pad_value, prev_h, prev_w):  # pragma: no cover
    """See `detfmt._kernel.raw_gather`."""
    dst0 = out.ctypes.data
    row_bytes = out.shape[2] * 3
    slot_bytes = out.shape[1] * row_bytes
    for j in rows:
        h = heights[j]
        w = widths[j]
        rb = w * 3
        base = dst0 + j * slot_bytes
        if pad_value >= 0:
            ph = prev_h[j]
            pw = prev_w[j]
            if w < pw:
                for r in range(min(h, ph)):
                    _memset(base + r * row_bytes + rb, pad_value, (pw - w) * 3)
            if h < ph:
                _memset(base + h * row_bytes, pad_value, (ph - h) * row_bytes)
        src = sources[j]
        if src == 0:
            continue
        if rb == row_bytes:
            _memcpy(base, src, h * rb)
        else:
            for r in range(h):
                _memcpy(base + r * row_bytes, src + r * rb, rb)
    return 0


def warm_up() -> None:
    """Resolve the kernel's signature (the cache lookup happens on the first call) for the
    argument types `detfmt.gather` passes."""
    import numpy as np

    out = np.zeros((1, 1, 1, 3), np.uint8)
    ones = np.ones(1, np.int64)
    gather_raw(np.zeros(1, np.int64), ones, ones, np.arange(1, dtype=np.int64), out, 0,
               ones, ones)
