"""Fill one batch buffer from a dataset: contiguous per-sample copies, never advanced indexing.

This module is numpy-only (torch-free) so the threaded loader and the DataLoader workers share it.
Raw samples are copied straight from the memmapped blob, or read with ``os.preadv`` into the
buffer (``io="pread"``: no page faults, the right choice when the blob is not in the page cache).
Other codecs decode in the calling thread (zstd and libjpeg-turbo release the GIL).
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from detfmt.errors import UsageError

try:  # libjpeg-turbo with the GIL released (the reader's codec module uses it too)
    import simplejpeg
except ImportError:  # pragma: no cover - depends on the platform's wheels
    simplejpeg = None

__all__ = ["DecodeScratch", "Gatherer", "dataset_path"]

CODEC_RAW = 0
CODEC_JPEG = 2
IO_MODES = ("mmap", "pread")


def dataset_path(ds: Any) -> Path:
    """The dataset directory of an open Dataset (the contract pickles datasets by this path)."""
    for name in ("path", "root", "directory"):
        value = getattr(ds, name, None)
        if value is not None:
            return Path(value)
    raise UsageError("the dataset object has no .path; pass a path or a detfmt.open() result")


class DecodeScratch:
    """Per-thread scratch buffers and the direct libjpeg-turbo decode, shared by both gatherers."""

    _local: threading.local

    def _scratch(self, size: int) -> np.ndarray:
        """This thread's reusable byte buffer (a fresh one per sample would page-fault)."""
        scratch = getattr(self._local, "scratch", None)
        if scratch is None or scratch.size < size:
            scratch = self._local.scratch = np.empty(size, np.uint8)
        return scratch[:size]

    def _jpeg_into(self, payload: np.ndarray, dst: np.ndarray) -> bool:
        """libjpeg-turbo straight into the batch (or scratch); False lets the reader decode (and
        name the sample in its typed error)."""
        if simplejpeg is None:
            return False
        try:
            height, width = simplejpeg.decode_jpeg_header(payload)[:2]
            if (height, width) != dst.shape[:2]:
                return False
            target = dst if dst.flags.c_contiguous else self._scratch(dst.size).reshape(dst.shape)
            simplejpeg.decode_jpeg(payload, colorspace="RGB", buffer=target, strict=True)
        except (ValueError, RuntimeError):
            return False
        if target is not dst:
            np.copyto(dst, target)
        return True


class Gatherer(DecodeScratch):
    """Copies or decodes samples of one dataset into (h, w, 3) regions of batch buffers.

    Holds the per-sample tables as plain numpy arrays, a memmap of images.bin and, for
    ``io="pread"``, one read-only file descriptor (preadv is positional, so threads share it).
    """

    def __init__(self, ds: Any, io: str = "mmap") -> None:
        self.fd = -1
        if io not in IO_MODES:
            raise UsageError(f"io must be one of {IO_MODES}, got {io!r}")
        self.ds = ds
        self.io = io
        index = ds.index
        self.offsets = np.asarray(index["offset"], dtype=np.int64)
        self.nbytes = np.asarray(index["nbytes"], dtype=np.int64)
        self.codecs = np.asarray(index["codec"], dtype=np.uint8)
        self.sizes = np.ascontiguousarray(ds.sizes, dtype=np.int32)
        self.all_raw = bool(len(self.codecs) == 0 or (self.codecs == CODEC_RAW).all())
        self.fixed = ds.fixed_images
        self.blob_path = dataset_path(ds) / "images.bin"
        # The reader's own mapping: the very bytes its index checks covered (a second mapping by
        # path could see a replaced file), as a plain ndarray (np.memmap slicing costs a call).
        mapped = getattr(ds, "blob", None)
        self.blob = np.asarray(mapped) if mapped is not None and len(mapped) else None
        if self.blob is None and len(self.offsets) and os.path.getsize(self.blob_path) > 0:
            self.blob = np.asarray(np.memmap(self.blob_path, dtype=np.uint8, mode="r"))
        self._local = threading.local()
        if os.path.isfile(self.blob_path):
            self.fd = os.open(self.blob_path, os.O_RDONLY)  # preadv, and read-ahead advice
        elif io == "pread" or (self.blob is None and len(self.offsets)):
            raise UsageError(  # e.g. one packed shard file: its blob is a member, not a file
                f"io={io!r} needs {self.blob_path} as a file; open the dataset root (or use "
                "io='mmap' on a dataset whose reader maps its images)"
            )
        self.max_hw = (1, 1)
        if len(self.sizes):
            self.max_hw = (int(self.sizes[:, 0].max()), int(self.sizes[:, 1].max()))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.blob = None

    def __del__(self) -> None:
        if getattr(self, "fd", -1) >= 0:
            self.close()

    def batch_shape(self, indices: np.ndarray) -> tuple[int, int]:
        """(Hmax, Wmax) of the samples: the padded batch shape."""
        if len(indices) == 0:
            return (1, 1)
        sizes = self.sizes[indices]
        return int(sizes[:, 0].max()), int(sizes[:, 1].max())

    def fill(
        self,
        indices: np.ndarray,
        out: np.ndarray,
        pad_value: int = 0,
        previous: list[tuple[int, int]] | None = None,
    ) -> list[tuple[int, int]]:
        """Write samples ``indices`` into ``out`` (B, H, W, 3); everything else becomes pad_value.

        Each image goes to the top-left corner of its slot; H and W must cover every image.
        ``previous`` (optional) says which top-left (h, w) region of each slot may hold pixels
        other than pad_value (what the last fill of this buffer wrote, nobody having written
        since); only those parts are cleared. Zeroing the whole padding costs about a quarter of
        the gather for mixed landscape/portrait batches. Returns the (h, w) written per slot.
        """
        if self.fixed is not None and out.shape[1:3] == self.fixed.shape[1:3]:
            fixed = self.fixed
            if self.io == "pread":
                for j, i in enumerate(indices.tolist()):
                    self._pread(i, out[j])
            else:
                for j, i in enumerate(indices.tolist()):
                    np.copyto(out[j], fixed[i])
            return [out.shape[1:3]] * len(indices)
        height, width = out.shape[1], out.shape[2]
        heights = self.sizes[indices, 0].tolist()
        widths = self.sizes[indices, 1].tolist()
        rows = zip(
            indices.tolist(), heights, widths, self.offsets[indices].tolist(),
            self.codecs[indices].tolist(), strict=True,
        )
        fast = self.io == "mmap"
        blob = self.blob
        known = len(previous) if previous is not None else 0
        for j, (i, h, w, offset, codec) in enumerate(rows):
            slot = out[j]
            old_h, old_w = previous[j] if j < known else (height, width)  # type: ignore[index]
            if h < old_h:  # rows below the image
                slot[h:old_h, :old_w].fill(pad_value)
            if w < old_w:  # the strip right of the image
                slot[: min(h, old_h), w:old_w].fill(pad_value)
            if fast and codec == CODEC_RAW:  # the hot path: one strided memcpy, no checks
                np.copyto(slot[:h, :w], blob[offset : offset + h * w * 3].reshape(h, w, 3))
            else:
                self.read_into(i, slot[:h, :w])
        return list(zip(heights, widths, strict=True))

    def read_into(self, i: int, dst: np.ndarray) -> None:
        """One sample into ``dst`` (h, w, 3), possibly a strided view."""
        codec = int(self.codecs[i])
        if codec != CODEC_RAW:
            payload = self._payload(i)
            if codec == CODEC_JPEG and self._jpeg_into(payload, dst):
                return
            # the reader's decoder: exact checks, typed DecodeError naming the sample
            self.ds.decode_payload_into(i, payload, dst)
        elif self.io == "pread" and dst.flags.c_contiguous:
            self._pread(i, dst)
        elif self.io == "pread":  # strided target: read into this thread's scratch, then copy
            tmp = self._scratch(dst.size).reshape(dst.shape)
            self._pread(i, tmp)
            np.copyto(dst, tmp)
        else:
            start = int(self.offsets[i])
            np.copyto(dst, self.blob[start : start + int(self.nbytes[i])].reshape(dst.shape))

    def _payload(self, i: int) -> np.ndarray:
        """The stored bytes of sample i: a view of the map, or (io="pread") read without faults."""
        start, size = int(self.offsets[i]), int(self.nbytes[i])
        if self.io != "pread":
            return self.blob[start : start + size]
        buf = getattr(self._local, "payload", None)
        if buf is None or buf.size < size:
            buf = self._local.payload = np.empty(max(size, 1 << 20), np.uint8)
        self._pread(i, buf[:size])
        return buf[:size]

    def _pread(self, i: int, dst: np.ndarray) -> None:
        view = memoryview(dst).cast("B")
        offset, total, done = int(self.offsets[i]), min(int(self.nbytes[i]), dst.nbytes), 0
        while done < total:
            got = os.preadv(self.fd, [view[done:]], offset + done)
            if got <= 0:
                from detfmt.errors import DatasetChangedError

                raise DatasetChangedError(
                    f"images.bin ended at byte {offset + done}, sample needs {offset + total}",
                    path=self.blob_path, index=i,
                )
            done += got

    def advise(self, indices: np.ndarray) -> None:
        """Ask the kernel to read ahead the byte span of ``indices`` (cold-cache quasi order)."""
        if self.fd < 0 or len(indices) == 0:
            return
        lo = int(self.offsets[indices].min())
        hi = int((self.offsets[indices] + self.nbytes[indices]).max())
        with contextlib.suppress(AttributeError, OSError):  # an optimisation, not everywhere
            os.posix_fadvise(self.fd, lo, hi - lo, os.POSIX_FADV_WILLNEED)

    def labels(
        self, indices: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """boxes (B, M', 4) float32, classes (B, M') int32, mask (B, M') bool, box fields.

        M' is the batch's largest box count. Labels are checked by the reader's own rules
        (class range, boxes inside the image) when it offers them, as ``ds.batch`` does.
        """
        counts = np.asarray(self.ds.counts[indices], dtype=np.int64)
        m = int(counts.max()) if len(counts) else 0
        boxes = np.ascontiguousarray(self.ds.boxes[indices, :m], dtype=np.float32)
        classes = np.ascontiguousarray(self.ds.classes[indices, :m], dtype=np.int32)
        fields = {
            name: np.ascontiguousarray(values[indices, :m])
            for name, values in getattr(self.ds, "box_fields", {}).items()
        }
        check = getattr(self.ds, "check_labels", None)
        if check is not None:
            check(indices, boxes, classes, counts, fields)
        mask = np.arange(m)[None, :] < counts[:, None]
        return boxes, classes, mask, fields
