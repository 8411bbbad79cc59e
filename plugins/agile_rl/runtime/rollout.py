"""Rollout storage for on-policy algorithms, and generalised advantage estimation.

A finished rollout is either flattened into single steps (:meth:`Rollout.finish`) or, for
recurrent policies, cut into fixed-length sequences per sub-environment that keep their
order in time (:meth:`Rollout.finish_sequences`).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, TypeGuard

import numpy as np
import torch

RecurrentState = tuple[torch.Tensor, ...]
"""A recurrent policy's hidden state: tensors with the sub-environments along dimension 1, as
torch's recurrent layers hold them (e.g. an LSTM's ``(h, c)``, ``[layers, envs, hidden]``)."""


class PolicyRecord(NamedTuple):
    """What a policy step hands the rollout about one vector step."""

    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    state: RecurrentState | None = None
    """A recurrent policy's hidden state before it acted (episode starts already reset)."""


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


class SequenceBatch(NamedTuple):
    """A finished rollout cut into sequences of ``L`` steps of one sub-environment each,
    time-major: ``[L, S, ...]`` for ``S`` sequences. Sequence ``k * N + n`` holds steps
    ``k * s ... k * s + L - 1`` of sub-environment ``n`` (of ``N``), for the stride ``s`` (``L``
    unless the sequences overlap); the last ones are padded.

    :param valid: ``[L, S]``, False at steps that only reset a sub-environment and at padding;
        they are left out of learning.
    :param starts: ``[L, S]``, True where an episode starts inside a sequence: a recurrent
        policy resets its state to zeros before that step.
    :param initial_state: the policy's hidden state before each sequence's first step, as it
        was while collecting (sequences along dimension 1); empty for a policy with none.
    """

    obs: torch.Tensor | dict[str, torch.Tensor]
    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    valid: torch.Tensor
    starts: torch.Tensor
    initial_state: RecurrentState

    def __len__(self) -> int:
        """The number of sequences."""
        return int(self.valid.shape[1])

    def select(self, sequences: torch.Tensor) -> SequenceBatch:
        """The sequences at the indices ``sequences``."""
        obs, actions, log_probs, values, advantages, returns, valid, starts = (
            _select(field, sequences) for field in self[:-1]
        )
        return SequenceBatch(
            obs, actions, log_probs, values, advantages, returns, valid, starts,
            initial_state=tuple(state[:, sequences] for state in self.initial_state),
        )  # fmt: skip

    def valid_steps(self) -> RolloutBatch:
        """The valid steps, flattened in time-major order (as a policy's ``[L, S]`` outputs
        masked by :attr:`valid` come out)."""
        valid = self.valid
        return RolloutBatch(
            obs=_map_obs(self.obs, lambda x: x[valid]),
            actions=self.actions[valid],
            log_probs=self.log_probs[valid],
            values=self.values[valid],
            advantages=self.advantages[valid],
            returns=self.returns[valid],
        )


def _select(field: Any, sequences: torch.Tensor) -> Any:
    return _map_obs(field, lambda x: x[:, sequences])


def _map_obs(obs: Any, function: Any) -> Any:
    if isinstance(obs, dict):
        return {key: function(value) for key, value in obs.items()}
    return function(obs)


def window_count(total: int, length: int, stride: int) -> int:
    """How many windows of ``length`` steps, starting every ``stride`` steps, cover ``total``
    steps (the last one padded where it runs past them; at least one)."""
    return max(1, -(-max(0, total - length) // stride) + 1)


def _windows(steps: torch.Tensor, length: int, stride: int) -> torch.Tensor:
    """``[T, N, ...]`` cut into ``[length, K * N, ...]`` windows starting every ``stride``
    steps: window ``k`` of sub-environment ``n`` is sequence ``k * N + n``, and the last
    windows are padded with zeros. With ``stride == length`` the windows are chunks."""
    total, envs = steps.shape[:2]
    count = window_count(total, length, stride)
    padded = steps.new_zeros(((count - 1) * stride + length, *steps.shape[1:]))
    padded[:total] = steps
    starts = torch.arange(count, device=steps.device) * stride
    index = starts.unsqueeze(0) + torch.arange(length, device=steps.device).unsqueeze(1)
    return padded[index.reshape(-1)].reshape(length, count * envs, *steps.shape[2:])


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
        self._states: list[RecurrentState | None] = []

    def __len__(self) -> int:
        return len(self._rewards)

    def add(
        self,
        obs: torch.Tensor | dict[str, torch.Tensor],
        step: PolicyRecord | tuple[torch.Tensor, ...],
        rewards: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        valid: np.ndarray,
    ) -> None:
        """Record one vector step.

        :param step: ``(actions, log_probs, values)`` as the policy produced them, and for a
            recurrent policy the state it acted from (see :class:`PolicyRecord`).
        :param valid: False for sub-environments whose step only reset them (next-step
            autoreset); those steps are left out of learning.
        """
        record = PolicyRecord(*step)
        self._obs.append(obs)
        self._actions.append(record.actions)
        self._log_probs.append(record.log_probs)
        self._values.append(record.values)
        self._states.append(record.state)
        self._rewards.append(rewards)
        self._terminated.append(terminated)
        self._dones.append(terminated | truncated)
        self._valid.append(valid)

    def finish(self, last_values: torch.Tensor, gamma: float, gae_lambda: float) -> RolloutBatch:
        """Compute advantages and returns and flatten the valid steps."""
        values, advantages = self._advantages(last_values, gamma, gae_lambda)
        valid = torch.as_tensor(np.stack(self._valid), device=last_values.device).reshape(-1)
        return RolloutBatch(
            obs=_flatten_obs(self._obs, valid),
            actions=torch.stack(self._actions).flatten(0, 1)[valid],
            log_probs=torch.stack(self._log_probs).reshape(-1)[valid],
            values=values.reshape(-1)[valid],
            advantages=advantages.reshape(-1)[valid],
            returns=(advantages + values).reshape(-1)[valid],
        )

    def finish_sequences(
        self,
        last_values: torch.Tensor,
        gamma: float,
        gae_lambda: float,
        length: int,
        stride: int | None = None,
    ) -> SequenceBatch:
        """Compute advantages and returns as :meth:`finish` does, then cut each
        sub-environment's steps into sequences of ``length`` starting every ``stride`` steps
        (default ``length``: chunks; less: overlapping windows, as the reference's
        ``bptt_sequence_type`` ``maximum`` and ``fifty_percent_overlap`` cut them; see
        :class:`SequenceBatch`).

        A step starts an episode when the step before it only reset its sub-environment. The
        first step of a sequence needs no flag: the state stored for it was reset already.
        """
        stride = length if stride is None else stride
        device = last_values.device
        values, advantages = self._advantages(last_values, gamma, gae_lambda)
        valid = torch.as_tensor(np.stack(self._valid), device=device)
        starts = torch.zeros_like(valid)
        starts[1:] = ~valid[:-1]
        cut = functools.partial(_windows, length=length, stride=stride)
        windowed_starts = cut(starts)
        windowed_starts[0] = False
        count = window_count(len(self._states), length, stride)
        return SequenceBatch(
            obs=_map_obs(_stack_obs(self._obs), cut),
            actions=cut(torch.stack(self._actions)),
            log_probs=cut(torch.stack(self._log_probs)),
            values=cut(values),
            advantages=cut(advantages),
            returns=cut(advantages + values),
            valid=cut(valid),
            starts=windowed_starts,
            initial_state=_joined(self._states[: count * stride : stride]),
        )

    def _advantages(
        self, last_values: torch.Tensor, gamma: float, gae_lambda: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``[T, N]`` values and their GAE advantages."""
        device = last_values.device

        def stacked(items: list[np.ndarray]) -> torch.Tensor:
            return torch.as_tensor(np.stack(items), dtype=torch.float32, device=device)

        values = torch.stack(self._values)
        advantages = compute_gae(
            stacked(self._rewards), values, last_values, stacked(self._terminated),
            stacked(self._dones), gamma, gae_lambda,
        )  # fmt: skip
        return values, advantages


def _joined(states: list[RecurrentState | None]) -> RecurrentState:
    """The states of consecutive chunks side by side: chunk ``k``'s sub-environment ``n`` at
    ``k * N + n`` along dimension 1; empty for a policy without state."""
    if not states or states[0] is None:
        return ()
    return tuple(torch.cat(parts, dim=1) for parts in zip(*states, strict=True))


def _stack_obs(
    obs: list[torch.Tensor | dict[str, torch.Tensor]],
) -> torch.Tensor | dict[str, torch.Tensor]:
    """A rollout's observations stacked along a new first dimension (dicts key by key)."""
    if _all_dicts(obs):
        return {key: torch.stack([o[key] for o in obs]) for key in obs[0]}
    if _all_tensors(obs):
        return torch.stack(obs)
    raise TypeError("a rollout's observations must all be tensors or all dicts of tensors")


def _all_dicts(
    obs: list[torch.Tensor | dict[str, torch.Tensor]],
) -> TypeGuard[list[dict[str, torch.Tensor]]]:
    return all(isinstance(o, dict) for o in obs)


def _all_tensors(
    obs: list[torch.Tensor | dict[str, torch.Tensor]],
) -> TypeGuard[list[torch.Tensor]]:
    return all(isinstance(o, torch.Tensor) for o in obs)


def _flatten_obs(
    obs: list[torch.Tensor | dict[str, torch.Tensor]], valid: torch.Tensor
) -> torch.Tensor | dict[str, torch.Tensor]:
    """A rollout's observations ``[T * N, ...]`` (dicts key by key), the ``valid`` steps kept."""
    return _map_obs(_stack_obs(obs), lambda x: x.flatten(0, 1)[valid])
