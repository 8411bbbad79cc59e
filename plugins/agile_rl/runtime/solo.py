"""A member alone as a group of one: an algorithm's update is written once, over tensors whose
first dimension is the member axis, and a member trained by itself runs that same update.

:class:`SoloGroup` offers what :class:`~agile_rl.MemberGroup` offers a
:class:`~agile_rl.GroupLearner` (networks, hyperparameters, gradient steps, soft updates),
but over the member's own networks and torch optimizers, without copying anything: its
networks (:class:`SoloNetwork`) take and return tensors with a leading member dimension of 1.
Any network works here, including those that do not stack (convolutional or recurrent
encoders, encoders borrowed from another network), and the member's optimizer states are its
own throughout. :func:`one_member` gives a sampled batch that leading dimension.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from agile_rl.nn.modules import EvolvableNetwork
from agile_rl.nn.noisy import mean_weights, reset_noise
from agile_rl.runtime.buffers import Transitions
from agile_rl.runtime.group import Group
from agile_rl.runtime.stacked import flat_rows, stacked_observations

if TYPE_CHECKING:
    from agile_rl.runtime.agent import Algorithm


class SoloNetwork:
    """One member's own network, called as a stacked network of one member is called:
    observations ``[1, B, ...]`` in, every head ``[1, B, width]`` out.

    :param network: the member's network.
    """

    def __init__(self, network: nn.Module) -> None:
        self.network = network

    @property
    def views(self) -> dict[str, torch.Tensor]:
        """Each parameter as ``[1, *shape]`` (gradients reach the parameter itself)."""
        return {name: p.unsqueeze(0) for name, p in self.network.named_parameters()}

    def __call__(self, obs: Any, extra: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        own = flat_rows(obs)
        out = self.network(own) if extra is None else self.network(own, extra[0])
        return {name: value.unsqueeze(0) for name, value in out.items()}

    def unroll(
        self,
        obs: Any,
        state: tuple[torch.Tensor, ...],
        starts: torch.Tensor | None = None,
    ) -> tuple[dict[str, torch.Tensor], tuple[torch.Tensor, ...]]:
        """A recurrent network along sequences ``[1, T, B, ...]`` from a state whose parts
        are ``[1, num_layers, B, H]``: each head ``[1, T, B, width]`` and the final state."""
        network = self.network
        assert isinstance(network, EvolvableNetwork), "only an EvolvableNetwork unrolls"
        own_state = tuple(part[0] for part in state)
        own_starts = None if starts is None else starts[0]
        out, after = network.unroll(obs[0], own_state, own_starts)
        heads = {name: value.unsqueeze(0) for name, value in out.items()}
        return heads, tuple(part.unsqueeze(0) for part in after)

    def reset_noise(self, generators: Sequence[torch.Generator | None]) -> None:
        """A new noise sample for the network's noisy layers (none when the generator is None)."""
        if generators[0] is not None:
            reset_noise(self.network, generators[0])

    @contextmanager
    def mean_weights(self) -> Iterator[None]:
        """Inside, noisy layers compute with their mean weights."""
        with mean_weights(self.network):
            yield


class SoloGroup(Group):
    """A member as a group of one (see the module): what a group learner calls on a
    :class:`~agile_rl.MemberGroup`, done on the member's own networks and optimizers.

    :param member: the member.
    """

    size = 1

    def __init__(self, member: Algorithm) -> None:
        self.members = [member]
        self.device = member.device

    def net(self, name: str) -> SoloNetwork:
        """The member's network ``name``, taking and returning a member dimension of 1."""
        return SoloNetwork(self.members[0].networks[name])

    def hp(self, name: str) -> torch.Tensor:
        """The member's hyperparameter ``name`` as a ``[1]`` float tensor."""
        value = float(getattr(self.members[0].spec, name))
        return torch.tensor([value], device=self.device)

    def minimise(
        self,
        losses: torch.Tensor,
        optimizers: tuple[str, ...],
        active: torch.Tensor,
        max_grad_norm: float | torch.Tensor | None = None,
    ) -> None:
        """One step of each named optimizer of the member on ``losses`` ``[1]``, if active."""
        if not bool(active[0]):
            return
        if isinstance(max_grad_norm, torch.Tensor):
            max_grad_norm = float(max_grad_norm.reshape(-1)[0])
        self.members[0].minimise(losses.sum(), optimizers, max_grad_norm)

    def soft_update(
        self, pairs: Sequence[tuple[str, str]], tau: torch.Tensor, active: torch.Tensor
    ) -> None:
        """``target <- target + tau * (online - target)`` for each pair, if active."""
        if bool(active[0]):
            self.members[0].soft_update(pairs, float(tau[0]))

    def write_back(self) -> None:
        """Nothing to copy: the member's own networks were trained."""


def one_member(batch: Transitions) -> Transitions:
    """A batch ``[B, ...]`` with a member dimension in front, ``[1, B, ...]``."""
    return Transitions._make(
        None if field is None else stacked_observations(field, 1) for field in batch
    )
