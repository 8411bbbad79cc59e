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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch

from agile_rl.runtime.group import GroupLearner, MemberT, masked_mean
from agile_rl.runtime.rollout import PolicyRecord, RecurrentState, Rollout, RolloutBatch
from agile_rl.runtime.stacked import stacked_observations

Observation = torch.Tensor | dict[str, torch.Tensor]


class OnPolicyGroupLearner(GroupLearner[MemberT]):
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


class TeamOnPolicyGroupLearner(GroupLearner[MemberT]):
    """What an on-policy team algorithm provides to act and learn for a group of teams at
    once (the multi-agent on-policy runner's layout: observations, records and rollouts by
    group of agents); each method does, for every member, what the member's own
    ``policy_step`` and ``learn`` do, on the members' own generators. :meth:`act` takes the
    environments' raw observations, ``[k * E, ...]`` per agent in member order."""

    family: ClassVar[str] = "team_on_policy"

    @abc.abstractmethod
    def policy_step(
        self, obs: Sequence[Mapping[str, Observation]]
    ) -> tuple[dict[str, np.ndarray], list[dict[str, PolicyRecord]]]:
        """For each member's observations as its ``obs_tensor`` gives them: every agent's
        environment actions, ``[k * E, ...]`` in member order, and each member's records by
        group."""

    @abc.abstractmethod
    def learn_rollouts(
        self, rollouts: Sequence[Any | None], last_obs: Sequence[Mapping[str, Observation] | None]
    ) -> list[float | None]:
        """Update each member whose entry of ``rollouts`` is a team rollout, as its
        ``learn(rollout, last_obs)`` would; the others (None) are left as they are. Returns
        the loss each learning member reports, None for the others."""


#: One epoch's minibatches of a group, ``cut(epoch, epochs)``: each a payload for the update
#: and the ``[k]`` bool mask of the members that have it (``epochs[i]``: member ``i``'s
#: epochs, 0 for one that does not learn now; the generator draws each member's order).
Minibatches = Callable[[int, list[int]], Iterable[tuple[Any, torch.Tensor]]]

#: One gradient step of a group on a minibatch: (payload, active) -> each member's loss and
#: approximate KL divergence, ``[k]`` each.
MinibatchUpdate = Callable[[Any, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def run_epochs(
    learner: GroupLearner, epochs: list[int], cut: Minibatches, update: MinibatchUpdate
) -> tuple[torch.Tensor, torch.Tensor]:
    """The epochs of a clipped-objective update for a group: member ``i`` makes
    ``epochs[i]`` passes (0: it does not learn now) over the minibatches ``cut`` gives
    (:func:`row_minibatches` for steps, or a recurrent policy's sequences), and stops after an
    epoch whose last minibatch's approximate KL passed its ``target_kl``. ``update`` takes
    one gradient step. Returns each member's summed loss and number of updates, ``[k]`` each
    (float64)."""
    members, device = learner.members, learner.group.device
    totals = torch.zeros(len(members), dtype=torch.float64, device=device)
    updates = torch.zeros(len(members), dtype=torch.float64, device=device)
    approx_kl = torch.zeros(len(members), device=device)
    for epoch in range(max(epochs, default=0)):
        for minibatch, active in cut(epoch, epochs):
            losses, kl = update(minibatch, active)
            totals += torch.where(active, losses.double(), 0.0)
            updates += active.double()
            approx_kl = torch.where(active, kl, approx_kl)
        _stop_early(members, epochs, epoch, approx_kl)
    return totals, updates


def row_minibatches(
    learner: GroupLearner, batch: RolloutBatch, counts: torch.Tensor
) -> Minibatches:
    """The minibatches of steps of a stacked batch ``[k, N, ...]`` (member ``i``'s first
    ``counts[i]`` rows real): each epoch, every member still in it draws an order from its
    own generator and cuts it into minibatches of its own ``batch_size``, padded and masked
    (:func:`epoch_minibatches`). Each payload is ``(steps, rows)``: the minibatch ``[k, S,
    ...]`` and its ``[k, S]`` mask of real rows."""
    members, device = learner.members, learner.group.device
    sizes = [int(member.spec.batch_size) for member in members]

    def cut(epoch: int, epochs: list[int]) -> Iterator[tuple[Any, torch.Tensor]]:
        orders = [
            torch.randperm(int(n), generator=m.generator).to(device) if epoch < e else None
            for m, n, e in zip(members, counts.tolist(), epochs, strict=True)
        ]
        for minibatch in epoch_minibatches(orders, sizes):
            steps = gather_rows(batch, minibatch.indices)
            yield (steps, minibatch.rows), minibatch.active

    return cut


def _stop_early(members: Sequence[Any], epochs: list[int], epoch: int, kl: torch.Tensor) -> None:
    """End the epochs of members whose approximate KL passed their ``target_kl``."""
    if all(member.spec.target_kl is None for member in members):
        return
    values = kl.tolist()
    for row, member in enumerate(members):
        target = member.spec.target_kl
        if epoch < epochs[row] and target is not None and values[row] > target:
            epochs[row] = epoch + 1


def normalised_advantages(advantages: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Each member's advantages ``[k, S]`` normalised over its real rows (``rows`` 1; unbiased
    std, as ``Tensor.std``), where it has more than one."""
    count = rows.sum(1, keepdim=True)
    mean = (advantages * rows).sum(1, keepdim=True) / count.clamp(min=1.0)
    centred = advantages - mean
    variance = (centred.pow(2) * rows).sum(1, keepdim=True) / (count - 1.0).clamp(min=1.0)
    return torch.where(count > 1, centred / (variance.sqrt() + 1e-8), advantages)


def clipped_surrogate(
    log_ratio: torch.Tensor, advantages: torch.Tensor, clip: torch.Tensor, rows: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each member's clipped policy loss ``-E[min(r A, clip(r, 1 - c, 1 + c) A)]`` ``[k]`` over
    its real rows, for log-ratios ``[k, S]`` of the current to the collecting policy, and its
    approximate KL divergence ``[k]`` (Schulman's k3 estimator, without gradient)."""
    ratio = log_ratio.exp()
    clipped = ratio.clamp(1.0 - clip.unsqueeze(1), 1.0 + clip.unsqueeze(1))
    loss = -masked_mean(torch.min(ratio * advantages, clipped * advantages), rows)
    with torch.no_grad():
        approx_kl = masked_mean((ratio - 1.0) - log_ratio, rows)
    return loss, approx_kl


def member_records(record: PolicyRecord) -> list[PolicyRecord]:
    """A stacked record (fields ``[k, E, ...]``, a recurrent state's parts ``[k, ...]``) as
    each member's own."""
    parts = zip(record.actions, record.log_probs, record.values, strict=True)
    return [
        PolicyRecord(actions, log_probs, values, _own_state(record.state, row))
        for row, (actions, log_probs, values) in enumerate(parts)
    ]


def _own_state(state: RecurrentState | None, row: int) -> RecurrentState | None:
    return None if state is None else tuple(part[row] for part in state)


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
