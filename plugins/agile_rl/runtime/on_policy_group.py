"""Group learners of on-policy algorithms, and the stacked rollouts they learn from.

An :class:`OnPolicyGroupLearner` acts for a :class:`~agile_rl.MemberGroup` with one batched
policy step, and updates the members whose rollouts are complete with one batched
computation per minibatch. Members differ in how much they learn from a rollout (their
``batch_size``, ``update_epochs``, the steps their rollouts hold): every member's finished
rollout is padded to the longest (:func:`stack_batches`), each epoch's minibatches are
padded to the widest and masked (:func:`epoch_minibatches`), and a member with fewer
minibatches or epochs is inactive in the later ones, as :class:`~agile_rl.MemberGroup`'s
active masks allow.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch

from agile_rl.runtime.group import GroupLearner
from agile_rl.runtime.rollout import PolicyRecord, Rollout, RolloutBatch
from agile_rl.runtime.stacked import stacked_observations

Observation = torch.Tensor | dict[str, torch.Tensor]


class OnPolicyGroupLearner(GroupLearner):
    """What an on-policy algorithm provides to act and learn for a group of members at once;
    each method does, for every member, what the member's own ``policy_step``, ``act`` and
    ``learn`` do (on the same random streams: the members' own generators)."""

    family: ClassVar[str] = "on_policy"

    @abc.abstractmethod
    def policy_step(self, obs: Observation) -> tuple[np.ndarray, PolicyRecord]:
        """For preprocessed observations of the members' environments, ``[k * E, ...]`` in
        member order: the environment actions each member's ``policy_step`` returns,
        concatenated, and the stacked record whose fields are ``[k, E, ...]`` (see
        :func:`member_records`)."""

    @abc.abstractmethod
    def learn_rollouts(
        self, rollouts: Sequence[Rollout | None], last_obs: Observation
    ) -> list[float | None]:
        """Update each member whose entry of ``rollouts`` is a rollout on it, as the member's
        ``learn(rollout, last_obs)`` would, ``last_obs`` being the preprocessed observations
        that follow, ``[k * E, ...]`` in member order; the others are left as they are.
        Returns the loss each learning member reports, None for the others."""


def member_records(record: PolicyRecord) -> list[PolicyRecord]:
    """A stacked record (fields ``[k, E, ...]``, no recurrent state) as each member's own."""
    parts = zip(record.actions, record.log_probs, record.values, strict=True)
    return [PolicyRecord(actions, log_probs, values) for actions, log_probs, values in parts]


def member_observations(obs: Observation, members: int) -> list[Observation]:
    """Preprocessed observations ``[members * E, ...]`` as each member's ``[E, ...]``."""
    stacked = stacked_observations(obs, members)
    if isinstance(stacked, dict):
        return [{key: value[row] for key, value in stacked.items()} for row in range(members)]
    return list(stacked)


def stack_batches(batches: Sequence[RolloutBatch | None]) -> tuple[RolloutBatch, torch.Tensor]:
    """Members' finished rollouts as one batch ``[k, N, ...]``, each padded with zeros to the
    longest (a member without one: all padding), and each member's number of steps ``[k]``."""
    template = next(batch for batch in batches if batch is not None)
    longest = max(len(batch) for batch in batches if batch is not None)
    fields: list[Any] = []
    for index, field in enumerate(template):
        parts = [None if batch is None else batch[index] for batch in batches]
        fields.append(_padded(parts, field, longest))
    counts = [0 if batch is None else len(batch) for batch in batches]
    return RolloutBatch(*fields), torch.tensor(counts, device=template.log_probs.device)


def _padded(parts: list[Any], template: Any, longest: int) -> Any:
    """``parts`` (tensors ``[n, ...]``, dicts of them, or None) as ``[k, longest, ...]``."""
    if isinstance(template, dict):
        return {
            key: _padded([None if p is None else p[key] for p in parts], value, longest)
            for key, value in template.items()
        }
    stacked = template.new_zeros((len(parts), longest, *template.shape[1:]))
    for row, part in enumerate(parts):
        if part is not None:
            stacked[row, : part.shape[0]] = part
    return stacked


class Minibatch(NamedTuple):
    """One minibatch of every member: ``indices`` ``[k, S]`` rows of each member's stacked
    batch, ``rows`` ``[k, S]`` 1.0 where the row is real (0.0: padding), ``active`` ``[k]`` the
    members that have this minibatch."""

    indices: torch.Tensor
    rows: torch.Tensor
    active: torch.Tensor


def epoch_minibatches(
    orders: Sequence[torch.Tensor | None], sizes: Sequence[int]
) -> list[Minibatch]:
    """One epoch's minibatches: member ``i``'s ``j``-th holds the rows
    ``orders[i][j * sizes[i] : (j + 1) * sizes[i]]`` of its batch (its permutation cut as
    ``for start in range(0, n, size)`` cuts it, the last one possibly shorter); a member whose
    order is None, or that has fewer minibatches, is inactive in the ones it lacks."""
    counts = [0 if o is None else -(-len(o) // s) for o, s in zip(orders, sizes, strict=True)]
    width = max(
        (min(len(o), s) for o, s in zip(orders, sizes, strict=True) if o is not None), default=0
    )
    total = max(counts, default=0)
    template = next((o for o in orders if o is not None), torch.zeros(0, dtype=torch.long))
    index = template.new_zeros((total, len(orders), width))
    rows = torch.zeros(total, len(orders), width, device=template.device)
    for member, (order, size, count) in enumerate(zip(orders, sizes, counts, strict=True)):
        if order is None or not count:
            continue
        padded = order.new_zeros(count * size)
        padded[: len(order)] = order
        real = torch.arange(count * size, device=order.device) < len(order)
        columns = min(size, width)
        index[:count, member, :columns] = padded.view(count, size)[:, :columns]
        rows[:count, member, :columns] = real.view(count, size)[:, :columns].float()
    active = torch.tensor(counts, device=template.device)
    return [Minibatch(index[j], rows[j], active > j) for j in range(total)]


def gather_rows(batch: RolloutBatch, index: torch.Tensor) -> RolloutBatch:
    """The rows ``index`` ``[k, S]`` of each member's part of a stacked batch ``[k, N, ...]``."""
    members = torch.arange(index.shape[0], device=index.device).unsqueeze(1)

    def take(field: Any) -> Any:
        if isinstance(field, dict):
            return {key: value[members, index] for key, value in field.items()}
        return field[members, index]

    return RolloutBatch(*(take(field) for field in batch))
