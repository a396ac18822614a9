"""Delivery(gpu_decode=True): torchvision.io.decode_jpeg on a batch, padded like the CPU path.

Needs a torchvision that imports beside this torch (not the case for the pinned CPU torch of the
test environment, where this module skips). Without CUDA the same code path runs with
decode_jpeg on the CPU (the availability check patched), which checks the batching, padding and
label handling; with CUDA it runs for real.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from detfmt.torch import Delivery, Loader, _gpu
from tests.datasets import make_dataset, varied_shapes

try:
    import torchvision.io  # noqa: F401
except Exception as error:  # ImportError, or the RuntimeError of a mismatched build
    pytest.skip(f"torchvision does not import here: {error}", allow_module_level=True)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_gpu_decode_matches_the_cpu_decode(tmp_path, monkeypatch, device):
    if device == "cpu":
        monkeypatch.setattr(_gpu, "gpu_decode_unavailable_reason", lambda device: None)
    ds = make_dataset(tmp_path / "ds", varied_shapes(12), codec="jpeg")
    plain = list(Loader(ds, 4, seed=3, delivery=Delivery(num_threads=1, pad_value=7)))
    fast = list(Loader(
        ds,
        4,
        seed=3,
        delivery=Delivery(num_threads=1, device=device, pad_value=7, gpu_decode=True),
    ))
    assert len(plain) == len(fast) == 3
    for a, b in zip(plain, fast, strict=True):
        assert b.images.device.type == device
        assert torch.equal(a.indices, b.indices.cpu())
        assert a.images.shape == b.images.shape
        got, want = b.images.cpu().numpy().astype(int), a.images.numpy().astype(int)
        for j, (h, w) in enumerate(a.sizes.tolist()):
            inside = np.abs(got[j, :, :h, :w] - want[j, :, :h, :w])
            assert inside.mean() < 1.0 and inside.max() <= 24  # IDCTs differ slightly
            assert (got[j, :, h:, :] == 7).all() and (got[j, :, :, w:] == 7).all()
        for name in ("boxes", "classes", "mask", "sizes"):
            assert torch.equal(getattr(a, name), getattr(b, name).cpu()), name
