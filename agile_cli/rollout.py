"""Rollout storage for on-policy algorithms, and generalised advantage estimation."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch


class RolloutBatch(NamedTuple):
    """A finished rollout, flattened over time and environments; only valid steps kept."""

    obs: torch.Tensor | dict[str, torch.Tensor]
    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor

    def __len__(self) -> int:
        return int(self.log_probs.shape[0])


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    last_values: torch.Tensor,
    terminated: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> torch.Tensor:
    """Generalised advantage estimates (Schulman et al., 2016), shape ``[T, N]``.

    ``dones`` marks steps after which the episode ended for any reason; ``terminated`` those
    where it really ended, so a truncated episode still bootstraps from the next observation
    (gymnasium's next-step autoreset hands that final observation back at the done step).

    :param rewards: ``[T, N]`` rewards.
    :param values: ``[T, N]`` value estimates of the observations acted on.
    :param last_values: ``[N]`` value of the observation after the last step.
    """
    steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    next_advantage = torch.zeros_like(last_values)
    next_values = last_values
    for t in reversed(range(steps)):
        delta = rewards[t] + gamma * (1.0 - terminated[t]) * next_values - values[t]
        next_advantage = delta + gamma * gae_lambda * (1.0 - dones[t]) * next_advantage
        advantages[t] = next_advantage
        next_values = values[t]
    return advantages


class Rollout:
    """Collects one rollout step by step, then turns it into a :class:`RolloutBatch`."""

    def __init__(self) -> None:
        self._obs: list[Any] = []
        self._actions: list[torch.Tensor] = []
        self._log_probs: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []
        self._rewards: list[np.ndarray] = []
        self._terminated: list[np.ndarray] = []
        self._dones: list[np.ndarray] = []
        self._valid: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self._rewards)

    def add(
        self,
        obs: torch.Tensor | dict[str, torch.Tensor],
        step: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        rewards: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        valid: np.ndarray,
    ) -> None:
        """Record one vector step.

        :param step: ``(actions, log_probs, values)`` as the policy produced them.
        :param valid: False for sub-environments whose step only reset them (next-step
            autoreset); those steps are left out of learning.
        """
        actions, log_probs, values = step
        self._obs.append(obs)
        self._actions.append(actions)
        self._log_probs.append(log_probs)
        self._values.append(values)
        self._rewards.append(rewards)
        self._terminated.append(terminated)
        self._dones.append(terminated | truncated)
        self._valid.append(valid)

    def finish(self, last_values: torch.Tensor, gamma: float, gae_lambda: float) -> RolloutBatch:
        """Compute advantages and returns and flatten the valid steps."""
        device = last_values.device

        def stacked(items: list[np.ndarray]) -> torch.Tensor:
            return torch.as_tensor(np.stack(items), dtype=torch.float32, device=device)

        values = torch.stack(self._values)
        advantages = compute_gae(
            stacked(self._rewards), values, last_values, stacked(self._terminated),
            stacked(self._dones), gamma, gae_lambda,
        )  # fmt: skip
        valid = torch.as_tensor(np.stack(self._valid), device=device).reshape(-1)
        return RolloutBatch(
            obs=_flatten_obs(self._obs, valid),
            actions=torch.stack(self._actions).flatten(0, 1)[valid],
            log_probs=torch.stack(self._log_probs).reshape(-1)[valid],
            values=values.reshape(-1)[valid],
            advantages=advantages.reshape(-1)[valid],
            returns=(advantages + values).reshape(-1)[valid],
        )


def _flatten_obs(
    obs: list[torch.Tensor | dict[str, torch.Tensor]], valid: torch.Tensor
) -> torch.Tensor | dict[str, torch.Tensor]:
    if isinstance(obs[0], dict):
        return {
            key: torch.stack([o[key] for o in obs]).flatten(0, 1)[valid]  # type: ignore[index]
            for key in obs[0]
        }
    return torch.stack(obs).flatten(0, 1)[valid]  # type: ignore[arg-type]
