"""Stored JPEG payloads are baseline (SOF0), even when the source JPEG is progressive: GPU
hardware decoders (nvjpeg's hardware path) accept baseline only."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

import detfmt


def frame_markers(payload: bytes) -> set[int]:
    """The SOFn markers (0xC0..0xCF except DHT/JPG/DAC) of a JPEG stream, header segments only."""
    found, pos = set(), 2
    while pos + 4 <= len(payload) and payload[pos] == 0xFF:
        marker = payload[pos + 1]
        if marker == 0xDA:  # start of scan: the frame header came before
            break
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            found.add(marker)
        pos += 2 + int.from_bytes(payload[pos + 2 : pos + 4], "big")
    return found


def test_progressive_source_is_stored_as_baseline(tmp_path):
    y, x = np.mgrid[0:48, 0:64]
    pixels = np.stack([x * 4, y * 5, (x + y) * 2], axis=-1).astype(np.uint8)  # smooth
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=95, progressive=True)
    source = buffer.getvalue()
    assert frame_markers(source) == {0xC2}  # the source really is progressive
    detfmt.write([{"image": source, "boxes": np.zeros((0, 4), np.float32),
                   "classes": np.zeros(0, np.int32)}],
                 tmp_path / "ds", classes=["a"], codec="jpeg", progress=False)
    ds = detfmt.open(tmp_path / "ds")
    start, size = int(ds.index["offset"][0]), int(ds.index["nbytes"][0])
    stored = (tmp_path / "ds" / "images.bin").read_bytes()[start : start + size]
    assert frame_markers(stored) == {0xC0}  # baseline DCT
    assert np.abs(ds[0].image.astype(int) - pixels.astype(int)).mean() < 3  # same picture
