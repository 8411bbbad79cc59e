"""Random draws from an explicit ``torch.Generator``, for tensors on any device.

``torch.distributions`` samples with torch's global generator, so a run that acts through
``distribution.sample()`` depends on whatever else drew from it. These functions take the
member's generator instead. A generator lives on one device and can only fill tensors there:
each draw is made on the generator's device and then moved to the device of the tensors it
combines with (a CPU generator serves a CUDA policy; the copy of a batch of noise is cheap).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.distributions import Bernoulli, Categorical, Distribution, Independent, Normal


def uniform(
    shape: Sequence[int], generator: torch.Generator, device: torch.device | str | None = None
) -> torch.Tensor:
    """Uniform draws in ``[0, 1)`` of ``shape`` from ``generator``, on ``device``."""
    draws = torch.rand(tuple(shape), generator=generator, device=generator.device)
    return draws.to(device) if device is not None else draws


def standard_normal(
    shape: Sequence[int], generator: torch.Generator, device: torch.device | str | None = None
) -> torch.Tensor:
    """Standard normal draws of ``shape`` from ``generator``, on ``device``."""
    draws = torch.randn(tuple(shape), generator=generator, device=generator.device)
    return draws.to(device) if device is not None else draws


def gumbel_noise(
    shape: Sequence[int], generator: torch.Generator, device: torch.device | str | None = None
) -> torch.Tensor:
    """Standard Gumbel draws of ``shape`` from ``generator``, on ``device`` (uniform draws
    kept off 0 and 1, so that the noise is finite)."""
    noise = -torch.log(-torch.log(uniform(shape, generator).clamp_(1e-9, 1.0 - 1e-9)))
    return noise.to(device) if device is not None else noise


def gumbel_argmax(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One sample of ``softmax(logits)`` along the last dimension (the Gumbel-max trick:
    ``argmax(logits + Gumbel noise)``); ``-inf`` logits are never chosen."""
    return (logits + gumbel_noise(logits.shape, generator, logits.device)).argmax(dim=-1)


@torch.no_grad()
def sample(distribution: Distribution, generator: torch.Generator) -> torch.Tensor:
    """One sample of ``distribution`` drawn from ``generator`` instead of torch's global one;
    like ``distribution.sample()``, it carries no gradient.

    Handles :class:`~torch.distributions.Categorical`, :class:`~torch.distributions.Normal`,
    :class:`~torch.distributions.Bernoulli` and :class:`~torch.distributions.Independent`
    wrappers of them: what a policy over Discrete, Box or MultiBinary actions samples from.

    :raises TypeError: for any other kind of distribution.
    """
    if isinstance(distribution, Independent):
        return sample(distribution.base_dist, generator)
    if isinstance(distribution, Categorical):
        return gumbel_argmax(distribution.logits, generator)
    if isinstance(distribution, Normal):
        noise = standard_normal(distribution.batch_shape, generator, distribution.loc.device)
        return distribution.loc + distribution.scale * noise
    if isinstance(distribution, Bernoulli):
        draws = uniform(distribution.batch_shape, generator, distribution.probs.device)
        return (draws < distribution.probs).to(distribution.probs.dtype)
    raise TypeError(
        f"cannot sample a {type(distribution).__name__} from a generator: draw its noise with "
        "torch.rand / torch.randn(..., generator=generator) and transform it"
    )
