"""Noisy linear layers for exploration by parameter noise.

Fortunato et al., "Noisy Networks for Exploration", ICLR 2018, with factorised Gaussian noise:
a layer of ``p`` inputs and ``q`` outputs draws ``p + q`` standard normals per noise sample
instead of ``p * q``.

The layer follows PyTorch's training/evaluation convention, like dropout: in training mode it
computes ``(mu + sigma * eps) x``, in evaluation mode (``module.eval()``, or
:func:`mean_weights` for just the noisy layers of a network) the mean ``mu x``, which is what a
greedy action uses. The noise ``eps`` changes only when :meth:`NoisyLinear.reset_noise` (or
:func:`reset_noise` for a whole network) draws a new sample; until the first draw it is zero,
so a fresh layer computes its mean in either mode.

The noise vectors are buffers, kept out of ``state_dict`` (a checkpoint restores the learned
``mu`` and ``sigma``; noise is redrawn before it is used). Across an architecture change,
:func:`agile_rl.nn.transfer.transfer_weights` copies the overlapping slice of every
parameter and of these buffers like any other tensor, which leaves valid noise behind.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


def signed_sqrt(noise: torch.Tensor) -> torch.Tensor:
    """Fortunato et al.'s ``f(x) = sign(x) sqrt(|x|)``."""
    return noise.sign() * noise.abs().sqrt()


class NoisyLinear(nn.Module):
    """``y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b`` with factorised noise
    ``eps_w = f(eps_out) f(eps_in)^T``, ``eps_b = f(eps_out)``.

    Parameters: ``weight_mu``, ``weight_sigma`` (``[out, in]``), ``bias_mu``, ``bias_sigma``
    (``[out]``); buffers ``eps_in`` (``[in]``) and ``eps_out`` (``[out]``). Both sigmas start at
    ``std / sqrt(in_features)``, as in the paper.

    :param in_features: input width.
    :param out_features: output width.
    :param std: the paper's ``sigma_0``, scale of the initial noise.
    :param gain: ``weight_mu`` starts orthogonal with this gain and ``bias_mu`` at zero, as
        agile's plain layers do; ``None``: the paper's ``U(-1/sqrt(in), 1/sqrt(in))`` for both.
    :param generator: source of the initial weights.
    """

    eps_in: torch.Tensor  # buffers
    eps_out: torch.Tensor

    def __init__(
        self,
        in_features: int,
        out_features: int,
        std: float,
        *,
        gain: float | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        self.bias_mu = nn.Parameter(torch.empty(out_features))
        self.bias_sigma = nn.Parameter(torch.empty(out_features))
        self.register_buffer("eps_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("eps_out", torch.zeros(out_features), persistent=False)
        self.reset_parameters(std, gain, generator)

    def reset_parameters(
        self, std: float, gain: float | None = None, generator: torch.Generator | None = None
    ) -> None:
        """Initialise the means (see ``gain``) and set both sigmas to ``std / sqrt(in)``."""
        bound = 1 / math.sqrt(self.in_features)
        with torch.no_grad():
            if gain is None:
                self.weight_mu.uniform_(-bound, bound, generator=generator)
                self.bias_mu.uniform_(-bound, bound, generator=generator)
            else:
                nn.init.orthogonal_(self.weight_mu, gain, generator=generator)
                self.bias_mu.zero_()
            self.weight_sigma.fill_(std * bound)
            self.bias_sigma.fill_(std * bound)

    @property
    def noise_size(self) -> int:
        """Standard normals one noise sample takes: ``in_features + out_features``."""
        return self.in_features + self.out_features

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw a new noise sample from ``generator`` (on its device, then moved here)."""
        self.set_noise(draw_normals(self.noise_size, generator))

    def set_noise(self, noise: torch.Tensor) -> None:
        """Use ``noise`` (``noise_size`` standard normals) as the noise sample."""
        noise = signed_sqrt(noise)
        with torch.no_grad():
            self.eps_in.copy_(noise[: self.in_features])
            self.eps_out.copy_(noise[self.in_features :])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return nn.functional.linear(x, self.weight_mu, self.bias_mu)
        noise = torch.outer(self.eps_out, self.eps_in)
        weight = torch.addcmul(self.weight_mu, self.weight_sigma, noise)
        bias = torch.addcmul(self.bias_mu, self.bias_sigma, self.eps_out)
        return nn.functional.linear(x, weight, bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def noisy_layers(module: nn.Module) -> list[NoisyLinear]:
    """Every :class:`NoisyLinear` inside ``module``, in module order."""
    return [layer for layer in module.modules() if isinstance(layer, NoisyLinear)]


def draw_normals(size: int, generator: torch.Generator | None) -> torch.Tensor:
    device = generator.device if generator is not None else None
    return torch.randn(size, generator=generator, device=device)


def reset_noise(module: nn.Module, generator: torch.Generator | None = None) -> None:
    """Draw new noise for every noisy layer of ``module`` from ``generator``, in one draw
    split among the layers in module order."""
    layers = noisy_layers(module)
    if not layers:
        return
    noise = draw_normals(sum(layer.noise_size for layer in layers), generator)
    device = layers[0].eps_in.device
    for layer, part in zip(
        layers, noise.to(device).split([layer.noise_size for layer in layers]), strict=True
    ):
        layer.set_noise(part)


@contextmanager
def mean_weights(module: nn.Module) -> Iterator[None]:
    """Inside, the noisy layers of ``module`` compute their mean (evaluation mode); after, each
    returns to the mode it had. Cheaper than ``module.eval()`` on a whole network."""
    layers = [(layer, layer.training) for layer in noisy_layers(module)]
    for layer, _ in layers:
        layer.training = False
    try:
        yield
    finally:
        for layer, training in layers:
            layer.training = training


def scale_sigmas(module: nn.Module, factor: float) -> None:
    """Multiply every noisy layer's ``weight_sigma`` and ``bias_sigma`` by ``factor``."""
    with torch.no_grad():
        for layer in noisy_layers(module):
            layer.weight_sigma.mul_(factor)
            layer.bias_sigma.mul_(factor)
