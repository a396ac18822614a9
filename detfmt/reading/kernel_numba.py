"""The numba kernel of `detfmt.reading.kernel`; importing this module needs numba.

Defined at module level so numba's on-disk cache (``cache=True``) finds it again in the next
process instead of compiling it anew.

Large batches are written with non-temporal (streaming) stores: a batch of hundreds of
megabytes leaves the cache long before anyone reads it, and a cached store first reads each
destination line from memory (read-for-ownership), a third of the traffic of a copy. glibc's
``memcpy`` only streams above a process-wide size threshold that per-image copies never reach.
"""

from __future__ import annotations

import platform

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["copy_bytes", "gather_raw"]

_VECTOR = 64  # bytes per streaming store (one cache line)


def _pointer(builder, address):
    return builder.inttoptr(address, ir.IntType(8).as_pointer())


def _on_three_words(emit):
    """A numba intrinsic of three machine words (addresses, sizes, a byte) returning nothing,
    whose body ``emit(builder, a, b, c)`` writes."""
    def typer(typingctx, a, b, c):
        def codegen(context, builder, signature, args):
            emit(builder, *args)
            return context.get_dummy_value()
        return types.void(types.intp, types.intp, types.intp), codegen

    typer.__name__ = typer.__qualname__ = emit.__name__
    typer.__doc__ = emit.__doc__
    return intrinsic(typer)


@_on_three_words
def _memcpy(builder, d, s, k):
    cgutils.raw_memcpy(builder, _pointer(builder, d), _pointer(builder, s), k, 1)


@_on_three_words
def _memset(builder, d, v, k):
    cgutils.memset(builder, _pointer(builder, d), k, builder.trunc(v, ir.IntType(8)))


def _stream(builder, d, k, write_block, write_bytes):
    """Write k bytes at address d: ``write_bytes`` up to the first cache-line boundary, one
    ``write_block`` (offset) per whole line, ``write_bytes`` for the tail."""
    intp = d.type
    mask = ir.Constant(intp, _VECTOR - 1)
    head = builder.and_(builder.neg(d), mask)
    head = builder.select(builder.icmp_unsigned("<", k, head), k, head)
    write_bytes(ir.Constant(intp, 0), head)
    rest = builder.sub(k, head)
    lines = builder.lshr(rest, ir.Constant(intp, 6))
    with cgutils.for_range(builder, lines) as loop:
        write_block(builder.add(head, builder.shl(loop.index, ir.Constant(intp, 6))))
    done = builder.add(head, builder.shl(lines, ir.Constant(intp, 6)))
    write_bytes(done, builder.and_(rest, mask))


def _nontemporal(builder, value, address):
    vector_type = ir.VectorType(ir.IntType(8), _VECTOR)
    store = builder.store(value, builder.inttoptr(address, vector_type.as_pointer()),
                          align=_VECTOR)
    store.set_metadata("nontemporal",
                       builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))


@_on_three_words
def _stream_copy(builder, d, s, k):
    """memcpy with streaming stores for the whole cache lines of the destination."""
    vector_type = ir.VectorType(ir.IntType(8), _VECTOR)

    def block(offset):
        source = builder.inttoptr(builder.add(s, offset), vector_type.as_pointer())
        _nontemporal(builder, builder.load(source, align=1), builder.add(d, offset))

    def tail(offset, size):
        cgutils.raw_memcpy(builder, _pointer(builder, builder.add(d, offset)),
                           _pointer(builder, builder.add(s, offset)), size, 1)

    _stream(builder, d, k, block, tail)


@_on_three_words
def _stream_set(builder, d, v, k):
    """memset with streaming stores for the whole cache lines of the destination."""
    byte = builder.trunc(v, ir.IntType(8))
    splat = ir.Constant(ir.VectorType(ir.IntType(8), _VECTOR), None)
    for i in range(_VECTOR):
        splat = builder.insert_element(splat, byte, ir.Constant(ir.IntType(32), i))

    def block(offset):
        _nontemporal(builder, splat, builder.add(d, offset))

    def tail(offset, size):
        cgutils.memset(builder, _pointer(builder, builder.add(d, offset)), size, byte)

    _stream(builder, d, k, block, tail)


@intrinsic
def _store_fence(typingctx):
    """Order the streaming stores before whatever this thread does next (they are weakly
    ordered; the batch is handed to another thread after the kernel returns)."""
    def codegen(context, builder, signature, args):
        if platform.machine().lower() in ("x86_64", "amd64", "i686", "x86"):
            sfence = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse.sfence")
            builder.call(sfence, [])
        else:
            builder.fence("seq_cst")
        return context.get_dummy_value()
    return types.void(), codegen


@njit(nogil=True, cache=True)
def _write(dst, src, value, n, stream):  # pragma: no cover
    """n bytes at ``dst``: copied from ``src``, or set to ``value`` where ``src`` is 0."""
    if src and stream:
        _stream_copy(dst, src, n)
    elif src:
        _memcpy(dst, src, n)
    elif stream:
        _stream_set(dst, value, n)
    else:
        _memset(dst, value, n)


@njit(nogil=True, cache=True)
def gather_raw(sources, heights, widths, rows, out, pad_value, prev_h, prev_w,
               stream):  # pragma: no cover
    """See `detfmt.reading.kernel.raw_gather`."""
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
                    _write(base + r * row_bytes + rb, 0, pad_value, (pw - w) * 3, stream)
            if h < ph:
                _write(base + h * row_bytes, 0, pad_value, (ph - h) * row_bytes, stream)
        src = sources[j]
        if src == 0:
            continue
        if rb == row_bytes:
            _write(base, src, 0, h * rb, stream)
        else:
            for r in range(h):
                _write(base + r * row_bytes, src + r * rb, 0, rb, stream)
    if stream:
        _store_fence()
    return 0


@njit(nogil=True, cache=True)
def copy_bytes(dst, src, stream):  # pragma: no cover
    """One copy of ``src`` into ``dst`` (1-D uint8, same size) with the gather's stores: the
    benchmarks' copy limit for the kernel's store kind."""
    _write(dst.ctypes.data, src.ctypes.data, 0, min(dst.size, src.size), stream)
    if stream:
        _store_fence()
    return 0


def warm_up() -> None:
    """Resolve the kernel's signature (the cache lookup happens on the first call) for the
    argument types `detfmt.reading.gather` passes."""
    import numpy as np

    out = np.zeros((1, 1, 1, 3), np.uint8)
    ones = np.ones(1, np.int64)
    for stream in (False, True):
        gather_raw(np.zeros(1, np.int64), ones, ones, np.arange(1, dtype=np.int64), out, 0,
                   ones, ones, stream)
