"""Recurrent PPO's whole-episode sequences (``max_seq_len: null``).

A finished rollout is cut into one sequence per episode of each sub-environment: a sequence
is a run of consecutive real steps of one sub-environment. Under next-step autoreset an
episode's last step is followed by a step that only resets the sub-environment (invalid, see
:meth:`~agile_rl.Rollout.add`), so the runs are exactly the episodes, cut where they end
and begin; an episode still running when the rollout ends gives the steps it has so far, and
its next part starts the next rollout's first sequence of that sub-environment, from the
hidden state carried over. Every sequence is re-run from the state stored at its first step
while collecting: zeros at an episode start, the carried state at the rollout's first step.

The rollout is kept unpadded, time-major ``[T, N]``; a minibatch's sequences are gathered
from it and padded at their ends to the longest among them (:meth:`Episodes.select`), and
the padding is marked invalid, so it adds nothing to the loss (the LSTM reads a sequence
forwards, so padding after its last step cannot change the outputs before it). A sequence is
at most the rollout's length per sub-environment (``learn_step / num_envs`` vector steps), so
a minibatch's padded size is bounded by its sequence count times that length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from agile_rl import RecurrentState, SequenceBatch


def episode_spans(valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The runs of True along time of ``valid`` ``[T, N]``: each run's sub-environment, first
    step and end (exclusive), sub-environment by sub-environment, in time order."""
    runs = valid.T.to(torch.int8)
    edge = runs.new_zeros((runs.shape[0], 1))
    change = torch.cat([edge, runs, edge], dim=1).diff(dim=1)  # [N, T + 1]
    env, begin = torch.nonzero(change == 1, as_tuple=True)
    _, end = torch.nonzero(change == -1, as_tuple=True)
    return env, begin, end


def packed(order: list[int], lengths: list[int], limit: int) -> list[list[int]]:
    """``order`` cut into consecutive groups whose ``lengths`` sum to at most ``limit``; a
    sequence longer than ``limit`` forms a group of its own."""
    groups: list[list[int]] = []
    current: list[int] = []
    total = 0
    for index in order:
        length = lengths[index]
        if current and total + length > limit:
            groups.append(current)
            current, total = [], 0
        current.append(index)
        total += length
    if current:
        groups.append(current)
    return groups


@dataclass(frozen=True)
class Episodes:
    """A finished rollout and its whole-episode sequences (see the module).

    :param steps: the rollout as ``[T, N, ...]`` fields (obs, actions, log_probs, values,
        advantages, returns and valid, in :class:`~agile_rl.SequenceBatch`'s order).
    :param states: the hidden state each step was acted from, step ``t`` of
        sub-environment ``n`` at ``t * N + n`` along dimension 1.
    :param env: ``[S]`` each sequence's sub-environment.
    :param begin: ``[S]`` each sequence's first step.
    :param length: ``[S]`` each sequence's steps.
    """

    steps: tuple[Any, ...]
    states: RecurrentState
    env: torch.Tensor
    begin: torch.Tensor
    length: torch.Tensor

    @classmethod
    def of(cls, one_step: SequenceBatch, envs: int) -> Episodes:
        """The episodes of a rollout cut into sequences of one step
        (``Rollout.finish_sequences(..., 1)``) in ``envs`` sub-environments."""

        def time_major(field: torch.Tensor) -> torch.Tensor:
            return field[0].reshape(-1, envs, *field.shape[2:])

        steps = tuple(_map(field, time_major) for field in one_step[:7])
        env, begin, end = episode_spans(steps[6])
        return cls(steps, one_step.initial_state, env, begin, end - begin)

    def __len__(self) -> int:
        """The number of sequences."""
        return int(self.env.shape[0])

    def minibatches(self, order: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """The sequences in ``order`` grouped into minibatches of at most ``steps`` steps
        (see :func:`packed`)."""
        groups = packed(order.tolist(), self.length.tolist(), steps)
        return [torch.tensor(group, device=order.device) for group in groups]

    def select(self, sequences: torch.Tensor) -> SequenceBatch:
        """The sequences at the indices ``sequences``, time-major ``[L, S, ...]`` for the
        longest of them ``L``, padded with zeros at their ends and invalid there."""
        env, begin, length = self.env[sequences], self.begin[sequences], self.length[sequences]
        offset = torch.arange(int(length.max()), device=env.device).unsqueeze(1)
        inside = offset < length  # [L, S]
        time = torch.minimum(begin + offset, begin + length - 1)

        def gather(field: torch.Tensor) -> torch.Tensor:
            picked = field[time, env]
            mask = inside.view(*inside.shape, *([1] * (picked.dim() - 2)))
            return torch.where(mask, picked, torch.zeros_like(picked))

        obs, actions, log_probs, values, advantages, returns, valid = (
            _map(field, gather) for field in self.steps
        )
        first = begin * self.steps[6].shape[1] + env
        return SequenceBatch(
            obs, actions, log_probs, values, advantages, returns, valid,
            starts=torch.zeros_like(inside),
            initial_state=tuple(part[:, first] for part in self.states),
        )  # fmt: skip


def _map(field: Any, function: Any) -> Any:
    if isinstance(field, dict):
        return {key: function(value) for key, value in field.items()}
    return function(field)
