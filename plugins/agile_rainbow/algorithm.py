"""Rainbow DQN.

Hessel et al., "Rainbow: Combining Improvements in Deep Reinforcement Learning", AAAI 2018,
which combines: the distributional C51 value (Bellemare, Dabney and Munos, "A Distributional
Perspective on Reinforcement Learning", ICML 2017), dueling streams (Wang et al., ICML 2016),
noisy networks (Fortunato et al., ICLR 2018), double-Q action selection (van Hasselt, Guez and
Silver, AAAI 2016), prioritised replay (Schaul et al., ICLR 2016) and n-step returns.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agile_rainbow.spec import RainbowDQNSpec
from agile_rl import (
    GreedyPolicy,
    GroupLearner,
    OffPolicyAlgorithm,
    Transitions,
    flat_rows,
    greedy_action,
    masked_mean,
    scale_sigmas,
    stacked_observations,
)


def project_distribution(
    probs: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor, support: torch.Tensor
) -> torch.Tensor:
    """C51's projection of the distribution of ``r + discount * Z`` back onto ``support``.

    Each atom ``z_j`` moves to ``Tz_j = r + discount * z_j``, clipped into
    ``[v_min, v_max]``, and its probability is split between the two atoms either side of
    ``Tz_j`` in proportion to closeness (all of it to one atom when ``Tz_j`` lands on it).

    :param probs: ``[batch, atoms]`` probabilities of ``Z`` on ``support``.
    :param rewards: ``[batch]`` rewards (n-step returns).
    :param discounts: ``[batch]`` multipliers of ``Z``; zero where the episode ended.
    :param support: ``[atoms]`` evenly spaced atom values, ``v_min`` to ``v_max``.
    :returns: ``[batch, atoms]`` probabilities on ``support``.
    """
    atoms = support.shape[0]
    v_min, v_max = float(support[0]), float(support[-1])
    moved = (rewards.unsqueeze(1) + discounts.unsqueeze(1) * support).clamp(v_min, v_max)
    position = (moved - v_min) / ((v_max - v_min) / (atoms - 1))  # in [0, atoms - 1]
    lower = position.floor().clamp(max=atoms - 1)
    upper_share = position - lower  # 0 when Tz_j lands on an atom
    lower = lower.long()
    upper = (lower + 1).clamp(max=atoms - 1)
    projected = torch.zeros_like(probs)
    projected.scatter_add_(1, lower, probs * (1.0 - upper_share))
    projected.scatter_add_(1, upper, probs * upper_share)
    return projected


def dueling_log_probs(value: torch.Tensor, advantage: torch.Tensor) -> torch.Tensor:
    """Log-probabilities ``[..., actions, atoms]`` of the return distribution of each
    action, from the value stream ``[..., atoms]`` and the advantage stream
    ``[..., actions * atoms]``: the logits are ``V + A - mean_a A``, atom by atom."""
    advantage = advantage.view(*value.shape[:-1], -1, value.shape[-1])
    logits = value.unsqueeze(-2) + advantage - advantage.mean(dim=-2, keepdim=True)
    return logits.log_softmax(dim=-1)


class ExpectedReturns(torch.nn.Module):
    """``[batch, actions]`` expected returns of a Rainbow network's distributions."""

    support: torch.Tensor

    def __init__(self, network: torch.nn.Module, support: torch.Tensor) -> None:
        super().__init__()
        self.network = network
        self.register_buffer("support", support.detach().clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.network(obs)
        return dueling_log_probs(out["value"], out["advantage"]).exp() @ self.support


class RainbowGroup(GroupLearner["RainbowDQN"]):
    """Rainbow's acting and update, for a group of members (a member alone is a group of
    one): each member's noise is drawn from its own generator, as its own layers draw it."""

    def act(self, obs: Any, *, explore: bool) -> np.ndarray:
        online = self.group.net("q")
        if explore:
            online.reset_noise(self._generators)
        stacked = stacked_observations(self.members[0].obs_tensor(obs), self.group.size)
        with torch.no_grad(), nullcontext() if explore else online.mean_weights():
            q = self.q_values(self.log_probs("q", stacked))
        return q.argmax(dim=2).cpu().numpy().reshape(-1)

    @property
    def _generators(self) -> list[torch.Generator]:
        return [member.generator for member in self.members]

    def log_probs(self, network: str, obs: Any) -> torch.Tensor:
        """``[k, B, actions, atoms]`` log-probabilities of each action's return distribution
        under ``network`` (``"q"`` or ``"target"``), for preprocessed observations."""
        out = self.group.net(network)(obs)
        return dueling_log_probs(out["value"], out["advantage"])

    def q_values(self, log_probs: torch.Tensor) -> torch.Tensor:
        """``[k, B, actions]`` expected returns of the distributions ``log_probs``."""
        return log_probs.exp() @ self.members[0].support

    def learn_batch(
        self, batch: Transitions, rows: torch.Tensor, active: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        first, size = self.members[0], batch.rewards.shape[1]
        for name in ("q", "target"):  # in this order, as each member's learn draws them
            self.group.net(name).reset_noise(self._active_generators(active))
        obs = stacked_observations(first.obs_tensor(flat_rows(batch.obs)), self.group.size)
        next_obs = stacked_observations(
            first.obs_tensor(flat_rows(batch.next_obs)), self.group.size
        )
        log_probs = self.log_probs("q", obs)
        actions = batch.actions.long().view(self.group.size, size, 1, 1)
        taken = log_probs.gather(2, actions.expand(-1, -1, 1, log_probs.shape[-1])).squeeze(2)
        gamma = self.group.hp("gamma").unsqueeze(1)
        discount = gamma if batch.discounts is None else batch.discounts
        with torch.no_grad():  # a pass of its own: backward then runs over obs's rows only
            target = self._target(batch.rewards, discount * (1.0 - batch.terminated), next_obs)
        cross_entropy = -(target * taken).sum(dim=-1)
        if batch.step_rewards is not None:  # combined_reward: the first step's return too
            step_next = stacked_observations(
                first.obs_tensor(flat_rows(batch.step_next_obs)), self.group.size
            )
            assert batch.step_terminated is not None, "a buffer keeps whole first steps"
            with torch.no_grad():
                one_step = self._target(
                    batch.step_rewards, gamma * (1.0 - batch.step_terminated), step_next
                )
            cross_entropy = cross_entropy - (one_step * taken).sum(dim=-1)
        losses = masked_mean(batch.weights * cross_entropy, rows)
        self.group.gradient_step("q", losses, active, max_grad_norm=10.0)
        self.group.soft_update([("target", "q")], self.group.hp("tau"), active)
        priorities = cross_entropy.detach() + self.group.hp("prior_eps").unsqueeze(1)
        return losses.detach(), priorities

    def _active_generators(self, active: torch.Tensor) -> list[torch.Generator | None]:
        return [
            m.generator if on else None for m, on in zip(self.members, active.tolist(), strict=True)
        ]

    def _target(
        self, rewards: torch.Tensor, discounts: torch.Tensor, next_obs: Any
    ) -> torch.Tensor:
        """Each member's projected double-Q target distribution ``[k, B, atoms]`` for returns
        ``rewards`` ``[k, B]`` bootstrapping from ``next_obs`` with ``discounts`` (zero where
        the episode ended)."""
        next_actions = self.q_values(self.log_probs("q", next_obs)).argmax(dim=2)
        target_log_probs = self.log_probs("target", next_obs)
        index = next_actions.view(*next_actions.shape, 1, 1).expand(
            -1, -1, 1, target_log_probs.shape[-1]
        )
        next_probs = target_log_probs.gather(2, index).squeeze(2).exp()
        atoms = next_probs.shape[-1]
        projected = project_distribution(
            next_probs.reshape(-1, atoms), rewards.reshape(-1), discounts.reshape(-1),
            self.members[0].support,
        )  # fmt: skip
        return projected.view(*next_probs.shape)


class RainbowDQN(OffPolicyAlgorithm):
    """Rainbow: a C51 dueling network with noisy heads, a double-Q target and a soft-updated
    target network, learning from n-step returns out of prioritised replay.

    The network has two heads, ``value`` (``num_atoms`` logits) and ``advantage``
    (``actions * num_atoms``), both of noisy layers: exploration comes from their noise, drawn
    afresh before every acting step and every gradient step, so there is no epsilon; greedy
    (evaluation) actions use the mean weights. The loss is the cross-entropy between the
    projected target distribution and the predicted one, weighted by the importance weights
    of prioritised replay, which receives that cross-entropy plus ``prior_eps`` as priority.

    The n-step length and whether replay is prioritised come from the ``replay_buffer``
    section; with n-step transitions the target bootstraps with ``batch.discounts``.
    """

    spec: RainbowDQNSpec
    policy_network = "q"
    group_learner = RainbowGroup

    def build(self) -> None:
        if not isinstance(self.action_space, spaces.Discrete):
            raise NotImplementedError(
                f"RainbowDQN needs a Discrete action space, not {self.action_space}"
            )
        self.num_actions = int(self.action_space.n)
        atoms = self.spec.num_atoms
        heads = {"value": atoms, "advantage": self.num_actions * atoms}
        online = self.add_network("q", heads, noisy_std=self.spec.noise_std)
        target = self.add_network("target", heads, noisy_std=self.spec.noise_std)
        target.load_state_dict(online.state_dict())
        target.requires_grad_(False)
        self.add_optimizer("q", ("q",), "lr")
        self.support = torch.linspace(self.spec.v_min, self.spec.v_max, atoms, device=self.device)

    def export_policy(self) -> GreedyPolicy:
        """The argmax of the expected returns under the mean weights."""
        body = ExpectedReturns(self.networks["q"], self.support)
        return GreedyPolicy(self.observation_space, body, greedy_action(self.action_space))

    def importance_exponent(self, progress: float) -> float:
        """Prioritised replay's importance exponent, annealed from ``beta`` to 1 over training."""
        beta = self.spec.beta
        return beta + (1.0 - beta) * progress

    def set_hyperparameter(self, name: str, value: float | int) -> None:
        """As the base class; a new ``noise_std`` also rescales every noisy layer's sigma by
        new / old, and is the scale of noisy layers an architecture change adds."""
        if name == "noise_std":
            for network in self.networks.values():
                scale_sigmas(network, value / self.spec.noise_std)
                network.noisy_std = float(value)
        super().set_hyperparameter(name, value)
