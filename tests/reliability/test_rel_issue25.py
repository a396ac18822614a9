"""Issue 25 (hardening, second round), properties 4 to 8.

6. A stored progressive JPEG is not a CPU bomb on read (SPEC R-50: at most 256 scans).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import relharness as rh
from PIL import Image

# ------------------------------------------------------------- 6: stored progressive JPEGs


def _progressive_jpeg(extra_scans: int, side: int = 64) -> bytes:
    """A progressive JPEG with its smallest scan repeated ``extra_scans`` times."""
    pixels = np.random.default_rng(1).integers(0, 256, (side, side, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", progressive=True, quality=90,
                                 subsampling=0)
    data = buffer.getvalue()
    scans, position = [], 2
    while data[position + 1] != 0xD9:
        marker = data[position + 1]
        end = position + 2 + int.from_bytes(data[position + 2 : position + 4], "big")
        if marker == 0xDA:
            while data[end] != 0xFF or data[end + 1] == 0 or 0xD0 <= data[end + 1] <= 0xD7:
                end += 1
            scans.append((position, end))
        position = end
    start, end = min(scans, key=lambda s: s[1] - s[0])
    return data[:position] + data[start:end] * extra_scans + data[position:]


@pytest.fixture
def many_scans(dataset: Any) -> Path:
    """A jpeg dataset whose sample 0 is a 64x64 progressive JPEG of about 3,000 scans."""
    ds = dataset("jpeg")
    rh.replace_payload(ds, 0, _progressive_jpeg(3000), height=64, width=64,
                       decoded_nbytes=64 * 64 * 3)
    return ds


@pytest.fixture
def no_decoder(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record every JPEG decode; R-50 refuses before decoding anything."""
    from detfmt import _codecs

    calls: list[int] = []
    original = _codecs._decode_jpeg_into

    def record(payload: Any, out: np.ndarray, *, path: str, index: int) -> None:
        if index == 0:
            calls.append(index)
        original(payload, out, path=path, index=index)

    monkeypatch.setattr(_codecs, "_decode_jpeg_into", record)
    return calls


@pytest.mark.parametrize("access", ["item", "batch", "verify"])
def test_stored_jpeg_with_thousands_of_scans_is_refused_before_decoding(
        many_scans: Path, no_decoder: list[int], access: str) -> None:
    import detfmt

    ds = detfmt.open(many_scans)
    with pytest.raises(detfmt.DetfmtError) as info:
        if access == "item":
            ds[0]
        elif access == "batch":
            ds.batch([0, 1])
        else:
            detfmt.verify(many_scans)
    assert info.value.rule == "IMAGE_DECODE"
    assert info.value.index == 0
    assert no_decoder == []
    assert ds[1].image.shape[2] == 3  # the other samples still read
