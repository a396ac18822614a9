"""``codec="auto"``: raw when the raw dataset fits in half the RAM, else JPEG; and what each
codec would cost on disk, said before anything is written.

Raw reads ~9x faster than JPEG while the page cache holds the data; JPEG is 9-15x smaller and as
fast once it no longer does (measurements in docs/converters.md). The raw size is exact: the
converter's scan has read every kept image's header. The other codecs' sizes are estimated by
encoding a few kept images (spread over the source) at their stored size and scaling their
compression ratio to the raw size: on a real VOC dataset raw was 7.5x the JPEG source, a cost
the user should see before paying it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ESTIMATED_CODECS", "RAW_RAM_FRACTION", "choose_codec", "estimate_sizes",
           "format_bytes", "size_advice", "total_ram"]

RAW_RAM_FRACTION = 0.5
ESTIMATED_CODECS = ("raw", "zstd", "jpeg", "png")
#: raw above this multiple of the source images' bytes is called out, with the JPEG figure
COSTLY_RATIO = 3.0


def total_ram() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def choose_codec(codec: str, raw_bytes: int, count: int) -> tuple[str, str]:
    """Resolve ``codec`` given the raw size of the ``count`` images to store: (codec, reason)."""
    if codec != "auto":
        return codec, "requested"
    ram = total_ram()
    choice = "raw" if raw_bytes <= RAW_RAM_FRACTION * ram else "jpeg"
    reason = (f"auto: raw size ~{raw_bytes / 2**30:.2f} GiB for {count} images, RAM "
              f"{ram / 2**30:.1f} GiB -> {choice} "
              f"({'fits' if choice == 'raw' else 'exceeds'} {RAW_RAM_FRACTION:.0%} of RAM)")
    return choice, reason


def estimate_sizes(samples: Sequence[tuple[Path, int, int]], raw_bytes: int,
                   jpeg_quality: int = 90) -> dict[str, int]:
    """{codec: estimated payload bytes of the whole dataset} from ``samples`` of (image file,
    stored height, stored width); {} when no sample decodes."""
    from detfmt.errors import DetfmtError
    from detfmt.format import codecs as _codecs
    from detfmt.writing import image as _image

    raw = 0
    encoded = dict.fromkeys(ESTIMATED_CODECS, 0)
    for path, height, width in samples:
        try:
            pixels = _image.load_rgb(path)
        except (DetfmtError, OSError):
            continue
        pixels = _image.resize_rgb(pixels, height, width)
        raw += pixels.nbytes
        for codec in ESTIMATED_CODECS:
            encoded[codec] += len(_codecs.encode(pixels, codec, jpeg_quality=jpeg_quality))
    if not raw:
        return {}
    return {codec: int(raw_bytes * size / raw) for codec, size in encoded.items()}


def format_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"  # pragma: no cover


def size_advice(codec: str, estimates: dict[str, int], source_bytes: int) -> str:
    """One line: the estimated size of each codec, the source's size, and when the chosen one
    costs several times the source, what ``codec='jpeg'`` would store instead."""
    if not estimates:
        return ""
    sizes = ", ".join(f"{name} ~{format_bytes(size)}" for name, size in estimates.items())
    line = f"estimated size: {sizes}; source images {format_bytes(source_bytes)}"
    chosen = estimates.get(codec)
    if chosen and source_bytes and codec != "jpeg" and chosen > COSTLY_RATIO * source_bytes:
        line += (f"; {codec} is {chosen / source_bytes:.1f}x the source, the jpeg codec would "
                 f"store ~{format_bytes(estimates['jpeg'])} (docs/converters.md, Codec)")
    return line
