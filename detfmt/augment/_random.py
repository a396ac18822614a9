"""Parameter draws from an explicit `torch.Generator` (never the global RNG).

Parameters are drawn on the generator's device and moved to the images' device, so a CPU
generator works for CUDA batches (a CUDA generator avoids the copy and suits CUDA graphs).
"""

from __future__ import annotations

import torch


def new_generator(seed: int | None = None) -> torch.Generator:
    """A private CPU generator; seeded from the OS when ``seed`` is None (not from torch's RNG)."""
    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed))
    return generator


def uniform(
    generator: torch.Generator,
    shape: tuple[int, ...],
    low: float | torch.Tensor,
    high: float | torch.Tensor,
    device: torch.device,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """U(low, high) of ``shape`` on ``device``."""
    u = torch.rand(shape, generator=generator, device=generator.device, dtype=dtype).to(device)
    return low + (high - low) * u


def uniform_rows(
    generator: torch.Generator,
    bounds: list[tuple[float, float]],
    size: int,
    device: torch.device,
) -> list[torch.Tensor]:
    """One (size,) float32 draw U(low, high) per ``(low, high)``: the numbers of one `uniform`
    call per row, in order.

    A CPU generator fills a tensor serially, so one (rows, size) draw holds those calls' numbers
    row after row, and the rows are scaled by the same float32 operations: a handful of ops
    instead of a handful per row. Other generators draw row by row (their streams depend on the
    call shapes), and so do draws for another device (the bounds as tensors there would be
    host-to-device copies).
    """
    if generator.device.type != "cpu" or torch.device(device).type != "cpu":
        return [uniform(generator, (size,), low, high, device) for low, high in bounds]
    u = torch.rand((len(bounds), size), generator=generator, dtype=torch.float32).to(device)
    lows = torch.tensor([low for low, _ in bounds], dtype=torch.float32, device=device)
    widths = torch.tensor([high - low for low, high in bounds], dtype=torch.float32, device=device)
    return list((lows[:, None] + widths[:, None] * u).unbind(0))


def bernoulli(
    generator: torch.Generator, shape: tuple[int, ...], p: float, device: torch.device
) -> torch.Tensor:
    """Bool tensor, True with probability ``p`` (``random() < p`` as Ultralytics does)."""
    u = torch.rand(shape, generator=generator, device=generator.device)
    return (u < p).to(device)


def randint(
    generator: torch.Generator, low: int, high: int, shape: tuple[int, ...], device: torch.device
) -> torch.Tensor:
    """Integers in [low, high) as int64."""
    r = torch.randint(low, high, shape, generator=generator, device=generator.device)
    return r.to(device)


def beta_integer(
    generator: torch.Generator, alpha: int, beta: int, shape: tuple[int, ...], device: torch.device
) -> torch.Tensor:
    """Beta(alpha, beta) for integer shape parameters, as Gamma sums of exponentials.

    torch.distributions takes no generator, so Gamma(k) is drawn as a sum of k Exp(1).
    """
    u = torch.rand((*shape, alpha + beta), generator=generator, device=generator.device)
    e = -torch.log1p(-u)  # Exp(1); 1-u is in (0, 1]
    ga = e[..., :alpha].sum(-1)
    gb = e[..., alpha:].sum(-1)
    return (ga / (ga + gb)).to(device)
