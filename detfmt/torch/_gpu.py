"""Optional GPU JPEG decode (torchvision.io.decode_jpeg, nvjpeg) for Loader(gpu_decode=True).

torchvision is not a dependency: without a CUDA build of it the loader refuses with a message
that says what is missing, instead of silently decoding on the CPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from detfmt.errors import UsageError

__all__ = ["GpuJpegDecoder", "gpu_decode_unavailable_reason"]

CODEC_JPEG = 2


def gpu_decode_unavailable_reason(device: torch.device | None) -> str | None:
    """None when GPU JPEG decode can run on ``device``, else why not (a sentence)."""
    if device is None or device.type != "cuda":
        return "gpu_decode=True needs device='cuda' (the decoded images stay on that device)"
    if not torch.cuda.is_available():
        return "gpu_decode=True needs CUDA, but torch.cuda.is_available() is False"
    try:
        import torchvision.io  # noqa: F401
    except Exception as error:  # ImportError, or the RuntimeError of a mismatched build
        return (
            "gpu_decode=True needs torchvision built for this torch with CUDA "
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

    def wants(self, gather: Any, indices: np.ndarray) -> bool:
        return bool((gather.codecs[indices] == CODEC_JPEG).any())

    def decode_batch(
        self, gather: Any, indices: np.ndarray, shape: tuple[int, int, int, int], pad_value: int
    ) -> torch.Tensor:
        out = torch.full(shape, pad_value, dtype=torch.uint8, device=self.device)
        jpeg = [j for j, i in enumerate(indices.tolist()) if gather.codecs[i] == CODEC_JPEG]
        payloads = []
        for j in jpeg:
            i = int(indices[j])
            start, size = int(gather.offsets[i]), int(gather.nbytes[i])
            payloads.append(torch.from_numpy(np.array(gather.blob[start : start + size])))
        decoded = self._decode(payloads, device=self.device) if payloads else []
        for j, image in zip(jpeg, decoded, strict=True):
            h, w = image.shape[1], image.shape[2]
            out[j, :h, :w] = image.permute(1, 2, 0)
        for j, i in enumerate(indices.tolist()):
            if gather.codecs[i] != CODEC_JPEG:
                h, w = (int(v) for v in gather.sizes[i])
                host = np.empty((h, w, 3), np.uint8)
                gather.read_into(i, host)
                out[j, :h, :w] = torch.from_numpy(host).to(self.device)
        return out
