"""Optional GPU JPEG decode (torchvision.io.decode_jpeg, nvjpeg) for Delivery(gpu_decode=True).

torchvision is not a dependency: without a CUDA build of it the loader refuses with a message
that says what is missing, instead of silently decoding on the CPU. The payloads come from the
gather engine (the batch was located and checked there); non-JPEG samples of a mixed batch are
decoded on the CPU by the engine and copied over.
"""

from __future__ import annotations

import numpy as np
import torch

from detfmt.errors import UsageError
from detfmt.format import spec
from detfmt.reading.gather import Gather, Job

__all__ = ["GpuJpegDecoder", "gpu_decode_unavailable_reason"]


def gpu_decode_unavailable_reason(device: torch.device | None) -> str | None:
    """None when GPU JPEG decode can run on ``device``, else why not (a sentence)."""
    if device is None or device.type != "cuda":
        return ("Delivery(gpu_decode=True) needs device='cuda' (the decoded images stay on that "
                "device)")
    if not torch.cuda.is_available():
        return "Delivery(gpu_decode=True) needs CUDA, but torch.cuda.is_available() is False"
    try:
        import torchvision.io  # noqa: F401
    except Exception as error:  # ImportError, or the RuntimeError of a mismatched build
        return (
            "Delivery(gpu_decode=True) needs torchvision built for this torch with CUDA "
            f"(import torchvision failed: {type(error).__name__}: {error}); "
            "install the torchvision that matches your torch, or use gpu_decode=False"
        )
    return None


class GpuJpegDecoder:
    """Decodes a batch's JPEG payloads on the GPU and pads them into one (B, H, W, 3) tensor."""

    def __init__(self, device: torch.device | None) -> None:
        reason = gpu_decode_unavailable_reason(device)
        if reason is not None:
            raise UsageError(reason)
        import torchvision.io

        self.device = device
        self._decode = torchvision.io.decode_jpeg

    def wants(self, job: Job) -> bool:
        return bool((job.codecs == spec.CODEC_JPEG).any())

    def decode_batch(self, engine: Gather, job: Job, shape: tuple[int, int, int, int],
                     pad_value: int) -> torch.Tensor:
        out = torch.full(shape, pad_value, dtype=torch.uint8, device=self.device)
        jpeg = np.flatnonzero(job.codecs == spec.CODEC_JPEG).tolist()
        payloads = [torch.from_numpy(np.array(engine.check_payload(job, j))) for j in jpeg]
        decoded = self._decode(payloads, device=self.device) if payloads else []
        for j, image in zip(jpeg, decoded, strict=True):
            h, w = int(job.heights[j]), int(job.widths[j])
            if tuple(image.shape[1:]) != (h, w):
                from detfmt.errors import DecodeError

                raise DecodeError(f"JPEG is {image.shape[1]}x{image.shape[2]}, index says "
                                  f"{h}x{w}", rule="IMAGE_DECODE", index=int(job.indices[j]))
            out[j, :h, :w] = image.permute(1, 2, 0)
        other = np.flatnonzero(job.codecs != spec.CODEC_JPEG)
        if len(other):
            h, w = shape[1], shape[2]
            host = np.empty((len(job), h, w, 3), np.uint8)
            engine.fill(job, host, pad_value)  # the CPU path: checks and typed errors
            for j in other.tolist():
                out[j] = torch.from_numpy(host[j]).to(self.device)
        return out
