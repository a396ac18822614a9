"""The raw gather as one native call per thread: numba, when it is installed (``detfmt[fast]``).

`detfmt.reading.gather` copies raw images into the slots of a padded batch. In numpy that is one
``np.copyto`` per sample, and each copy gives the GIL back and takes it again; under load a
thread waits for the GIL after every sample. This kernel does a thread's whole share of a batch
(row copies and the clearing of what the previous batch left outside the new images) in one
``nogil`` call over a table of source addresses, large batches with non-temporal stores
(`streams`). It writes through raw pointers, so its caller
checks everything first: the buffer's layout, every image inside the canvas, every source range
inside a mapping whose records were checked (R-44).

Loading numba and its cached kernel takes about a second, so nothing loads it implicitly on the
first batch: the torch `Loader` and `RingDataLoader` load it when built (a training run's
start), anyone else with ``detfmt.use_native_gather()`` (`load`). Until then, and with
``DETFMT_GATHER=numpy``, the numpy path runs (same bytes).
"""

from __future__ import annotations

import glob
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["load", "raw_gather", "streams"]

_KERNEL: Any = None
_LOADED = False
_LOCK = threading.Lock()


def raw_gather() -> Callable[..., int] | None:
    """The kernel if `load` has loaded it, else None (never loads it).

    ``kernel(sources, heights, widths, rows, out, pad_value, prev_h, prev_w, stream)``: for
    each j in ``rows``, copy ``heights[j]`` rows of ``widths[j] * 3`` bytes from address
    ``sources[j]`` (0: leave the image to the caller) to slot j of ``out`` (B, H, W, 3) uint8
    C-contiguous; with ``pad_value >= 0``, set to it what the previous image of the slot
    (``prev_h[j]`` x ``prev_w[j]``) covered outside the new one. ``stream``: write with
    non-temporal stores (see `streams`).
    """
    return _KERNEL


def _last_level_cache() -> int:
    """Bytes of the largest CPU cache Linux reports (0 where it reports none)."""
    sizes = [0]
    for entry in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            text = Path(entry).read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        digits = text.rstrip("KM")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes)


def _stream_threshold() -> int:
    return max(_last_level_cache(), 16 << 20) // 2


STREAM_BYTES = _stream_threshold()


def streams(nbytes: int) -> bool:
    """Whether a batch writing ``nbytes`` should bypass the cache (non-temporal stores).

    A batch larger than half the last-level cache is evicted before anyone reads it; cached
    stores would first read every destination line from memory. A smaller one may still be in
    the cache when the training step or the augmentation reads it, so it is written normally.
    """
    return nbytes >= STREAM_BYTES


def load() -> bool:
    """Load the native raw gather once (numba import, cached compile, one warm-up call: about a
    second); whether it is in use. ``detfmt.use_native_gather()``: call it once before
    ``ds.batch`` loops (the torch loaders call it themselves). False without numba
    (``pip install 'detfmt[fast]'``) or with ``DETFMT_GATHER=numpy``."""
    global _KERNEL, _LOADED
    with _LOCK:
        if not _LOADED:
            _LOADED = True
            _KERNEL = None
            if os.environ.get("DETFMT_GATHER", "").lower() != "numpy":
                try:
                    from detfmt.reading.kernel_numba import gather_raw, warm_up
                except ImportError:
                    pass
                else:
                    warm_up()
                    _KERNEL = gather_raw
        return _KERNEL is not None
