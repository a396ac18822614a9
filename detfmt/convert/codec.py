"""``codec="auto"``: raw when the raw dataset fits in half the RAM, else JPEG.

Raw reads ~9x faster than JPEG while the page cache holds the data; JPEG is 9-15x smaller and as
fast once it no longer does (measurements in docs/converters.md). The raw size is exact: the
converter's scan has read every kept image's header.
"""

from __future__ import annotations

import os

__all__ = ["RAW_RAM_FRACTION", "choose_codec", "total_ram"]

RAW_RAM_FRACTION = 0.5


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
