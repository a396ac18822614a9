"""CUDA: the same modules on the GPU match the CPU (skipped without a GPU; none was lent)."""

from __future__ import annotations

import pytest
import torch

import detfmt.augment as A

from ._helpers import make_batch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_cuda_pipeline_matches_cpu_with_replayed_params():
    batch = make_batch(8, 96, 96, 6, seed=81)
    pipe = A.Compose(
        [
            A.Mosaic(),
            A.RandomAffine(degrees=10, size=96),
            A.RandomFlip(),
            A.RandomHSV(),
            A.ToFloat(dtype=torch.float16),
        ],
        generator=torch.Generator().manual_seed(82),
    )
    cpu = pipe(batch)
    params = [
        {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in p.items()}
        for p in pipe.last_params
    ]
    gpu = pipe(batch.to("cuda"), params=params)
    assert gpu.images.device.type == "cuda" and gpu.images.dtype == torch.float16
    diff = (gpu.images.float().cpu() - cpu.images.float()).abs()
    assert (diff <= 2.5 / 255).float().mean() > 0.99
    assert torch.allclose(gpu.boxes.cpu(), cpu.boxes, atol=1e-3)
    assert torch.equal(gpu.mask.cpu(), cpu.mask)
