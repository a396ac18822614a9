"""Images for the viewer: JPEG and PNG payloads as stored, other codecs encoded on demand.

A JPEG or PNG sample is served byte for byte from the dataset's mapping (the browser decodes
and scales it). A raw or zstd sample is decoded and encoded once per requested size (a PNG at
full size, so its pixels are the stored ones; a JPEG thumbnail otherwise) and kept in a
least-recently-used cache per size, bounded in bytes.
"""

from __future__ import annotations

import collections
import io
import threading

import numpy as np
from PIL import Image

from detfmt.reading.protocol import DatasetLike

__all__ = ["FULL", "THUMB_SIZES", "ImageCache", "image_bytes"]

FULL = 0
#: the longest side of the thumbnails the viewer asks for (FULL: the stored size)
THUMB_SIZES = (FULL, 128, 192, 256, 384)
CACHE_BYTES = 64 << 20  # per size
_TYPES = {"jpeg": "image/jpeg", "png": "image/png"}


def image_bytes(ds: DatasetLike, index: int, size: int) -> tuple[bytes, str]:
    """(encoded bytes, MIME type) of sample ``index``: its payload if stored as JPEG or PNG,
    else its pixels encoded (PNG at ``size`` FULL, a JPEG with longest side ``size`` else)."""
    codec = ds.codec(index)
    if codec in _TYPES:
        return bytes(ds.payload(index)), _TYPES[codec]
    h, w, _ = ds.image_shape(index)
    pixels = np.empty((h, w, 3), np.uint8)
    ds.decode_into(index, pixels)
    image = Image.fromarray(pixels)
    out = io.BytesIO()
    if size == FULL or max(h, w) <= size:
        image.save(out, format="PNG", compress_level=1)
        return out.getvalue(), "image/png"
    scale = size / max(h, w)
    image = image.resize((max(1, round(w * scale)), max(1, round(h * scale))),
                         Image.Resampling.BILINEAR)
    image.save(out, format="JPEG", quality=85)
    return out.getvalue(), "image/jpeg"


class ImageCache:
    """`image_bytes` behind one LRU cache per size (JPEG/PNG payloads are not cached: they are
    read from the mapping, which the page cache already keeps)."""

    def __init__(self, limit_bytes: int = CACHE_BYTES) -> None:
        self.limit = limit_bytes
        self._lock = threading.Lock()
        self._caches: dict[tuple[str, int], collections.OrderedDict] = {}
        self._bytes: dict[tuple[str, int], int] = {}

    def get(self, key: str, ds: DatasetLike, index: int, size: int) -> tuple[bytes, str]:
        """The image of sample ``index`` of ``ds`` (``key`` names the dataset, e.g. its split)."""
        if ds.codec(index) in _TYPES:
            return image_bytes(ds, index, size)
        slot = (key, size)
        with self._lock:
            cache = self._caches.setdefault(slot, collections.OrderedDict())
            if index in cache:
                cache.move_to_end(index)
                return cache[index]
        value = image_bytes(ds, index, size)
        with self._lock:
            if index not in cache:
                cache[index] = value
                self._bytes[slot] = self._bytes.get(slot, 0) + len(value[0])
                while self._bytes[slot] > self.limit and len(cache) > 1:
                    _, (old, _type) = cache.popitem(last=False)
                    self._bytes[slot] -= len(old)
        return value
