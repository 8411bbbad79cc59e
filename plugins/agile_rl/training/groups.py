"""How a population's members share computations: the groups that stack, what acts for each
group (a :class:`~agile_rl.GroupLearner`, or a member alone), and the stacked off-policy
gradient step.

A population's runner (:mod:`agile_rl.training.runners`) splits its members into slots:
members whose networks stack form one group and act and learn as one computation; a member
that stacks with no other (an unsupported network, a class without a group learner, or any
member under ``--per-member``) is a group of one. A runner that built slots writes the
stacked weights back into the members once it is done (:func:`write_back`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agile_cli import GenerationStats, Member, TrainingError
from agile_rl.runtime.agent import Algorithm, OffPolicyAlgorithm
from agile_rl.runtime.buffers import PrioritizedReplayBuffer, ReplayBuffer
from agile_rl.runtime.group import (
    GroupLearner,
    MemberGroup,
    group_learner_of,
    group_members,
    stackable,
)


def budget_progress(member: Member) -> float:
    """The fraction of its step budget (``training.max_steps``) the member has trained, at
    most 1."""
    return min(1.0, member.record.steps / member.context.training.max_steps)


class Alone:
    """What acts and learns for a member whose class has no group learner of the runner's
    family: its own ``act`` and ``learn``.

    :param member: the member.
    """

    def __init__(self, member: Algorithm) -> None:
        self.members = [member]

    def act(self, obs: Any, *, explore: bool) -> Any:
        return self.members[0].act(obs, explore=explore)


#: What acts (and, off-policy, learns) for a group of members.
Actor = GroupLearner | Alone


@dataclass
class Slot:
    """What acts for some members, their places in the population, and their env rows."""

    actor: Actor
    positions: list[int]
    rows: np.ndarray


class LossLog:
    """A group's losses over a generation, written into one tensor allocated at its start on
    the group's device and read back once at its end: reading each step's would wait for the
    step (one synchronisation per update on a GPU), and keeping each step's own small tensor
    alive until then fragments the CPU heap (see docs/performance.md).

    :param positions: the group's members' places in the population.
    :param capacity: the most gradient steps the group can take in the generation.
    """

    def __init__(self, positions: list[int], capacity: int, device: torch.device) -> None:
        self.positions = positions
        self.losses = torch.zeros(capacity, len(positions), device=device)
        self.active: list[list[bool]] = []

    @classmethod
    def for_slot(
        cls, slot: Slot, schedules: list[tuple[int, int]], vector_steps: int
    ) -> LossLog | None:
        """The log of a group learner's slot (None for a member :class:`Alone`)."""
        if not isinstance(slot.actor, GroupLearner):
            return None
        repeats = max(schedules[p][1] for p in slot.positions)
        return cls(slot.positions, vector_steps * repeats, slot.actor.group.device)

    def add(self, losses: torch.Tensor, active: list[bool]) -> None:
        """One gradient step's losses ``[k]`` (those of inactive members are not kept)."""
        self.losses[len(self.active)].copy_(losses.detach())
        self.active.append(active)

    def read_into(self, stats: list[GenerationStats]) -> None:
        """Append each member's losses, in step order, to its stats."""
        values = self.losses[: len(self.active)].tolist()
        for row, active in zip(values, self.active, strict=True):
            for position, loss, on in zip(self.positions, row, active, strict=True):
                if on:
                    stats[position].losses.append(loss)


def learning_groups(
    members: Sequence[Algorithm], family: str, *, stack: bool = True, compiled: bool = False
) -> list[tuple[list[int], Actor]]:
    """``members`` split into the groups that act and learn as one computation: each group's
    positions in ``members`` and what acts for it: its group learner (of ``family``), or for a
    member whose class has none of that family, the member :class:`Alone`. Members whose
    networks do not stack (see :func:`~agile_rl.runtime.group.group_members`), and every
    member when ``stack`` is false (``--per-member``), are groups of one, which compute what
    the member would alone. A runner that built groups calls :func:`write_back` with them
    once it is done. ``compiled``: the groups' forward passes run compiled where their
    networks allow it (:mod:`agile_rl.runtime.compiled`)."""
    groups: list[tuple[list[int], Actor]] = []
    split = group_members(members) if stack else [[i] for i in range(len(members))]
    for positions in split:
        chosen = [members[i] for i in positions]
        learner = group_learner_of(type(chosen[0]))
        stacks = len(chosen) > 1 or stackable(chosen[0])
        if stacks and learner is not None and learner.family == family:
            groups.append((positions, learner(MemberGroup(chosen, compiled=compiled))))
        else:
            groups += [([i], Alone(members[i])) for i in positions]
    for _, actor in groups:
        if isinstance(actor, Alone):  # a stacked group sums its members' gradients itself
            actor.members[0].watch_neurons()
    return groups


def write_back(groups: Sequence[tuple[list[int], Actor]]) -> None:
    """Copy the stacked weights and optimizer states of :func:`learning_groups`' groups back
    into their members (a member alone has nothing to copy)."""
    for _, actor in groups:
        if isinstance(actor, GroupLearner):
            actor.group.write_back()
        else:
            actor.members[0].stop_watching_neurons()


def gradient_step(actor: Actor, buffer: ReplayBuffer, active: Sequence[bool]) -> torch.Tensor:
    """One off-policy gradient step of each ``active`` member ``actor`` acts for
    (:func:`stacked_step`; a member alone: its own ``learn`` on a batch it draws), the losses
    ``[k]`` left on the device."""
    if isinstance(actor, GroupLearner):
        return stacked_step(actor, buffer, active)
    member = actor.members[0]
    if not active[0]:
        return torch.zeros(1)
    assert isinstance(member, OffPolicyAlgorithm), "off-policy runners train off-policy members"
    return torch.tensor([learn_alone(member, buffer)])


def learn_alone(member: OffPolicyAlgorithm, buffer: ReplayBuffer) -> float:
    """One gradient step of ``member``'s own ``learn`` on a batch of its ``batch_size`` it
    draws from ``buffer`` (prioritised: with its importance exponent, and the priorities it
    returns written back); its loss."""
    size = int(member.spec.batch_size)
    if isinstance(buffer, PrioritizedReplayBuffer):
        beta = member.importance_exponent(budget_progress(member))
        batch = buffer.sample(size, member.generator, beta)
    else:
        batch = buffer.sample(size, member.generator)
    result = member.learn(batch)
    if result.priorities is not None and isinstance(buffer, PrioritizedReplayBuffer):
        buffer.update_priorities(batch.indices, result.priorities)
    return float(result.loss)


def learn_stacked(
    learner: GroupLearner[OffPolicyAlgorithm], buffer: ReplayBuffer, active: Sequence[bool]
) -> list[float]:
    """One gradient step for each ``active`` member of ``learner``'s group, each on a batch of
    its own ``batch_size`` drawn from ``buffer`` with its own generator (and, prioritised, its
    own importance exponent), as it draws one alone; returns each member's loss (an inactive
    member's is not meaningful)."""
    return [float(loss) for loss in stacked_step(learner, buffer, active).tolist()]


def stacked_step(
    learner: GroupLearner[OffPolicyAlgorithm], buffer: ReplayBuffer, active: Sequence[bool]
) -> torch.Tensor:
    """:func:`learn_stacked`, its losses ``[k]`` left on the device (not read back)."""
    members = learner.members
    sizes = [int(m.spec.batch_size) if on else 0 for m, on in zip(members, active, strict=True)]
    prioritised = isinstance(buffer, PrioritizedReplayBuffer)
    betas = None
    if prioritised:
        betas = [m.importance_exponent(budget_progress(m)) for m in members]
    generators = [m.generator for m in members]
    batch, rows = buffer.sample_stacked(sizes, generators, betas)
    mask = torch.tensor(active, device=rows.device)
    losses, priorities = _learned(learner, learner.learn_batch(batch, rows, mask))
    if isinstance(buffer, PrioritizedReplayBuffer) and priorities is not None:
        for row, size in enumerate(sizes):
            if size:
                indices, values = batch.indices[row, :size], priorities[row, :size]
                buffer.update_priorities(indices, values)
    return losses.detach()


def _learned(learner: GroupLearner, result: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``learn_batch``'s ``(losses, priorities)``, or an error naming the learner."""
    if not (isinstance(result, tuple) and len(result) == 2 and torch.is_tensor(result[0])):
        raise TrainingError(
            f"{type(learner).__name__}.learn_batch returned {type(result).__name__}, not "
            "(losses, priorities)",
            "return a [k] tensor of losses and, for prioritised replay, [k, B] priorities "
            "(else None): return losses, None",
        )
    return result[0], result[1]


def take_rows(obs: Any, rows: np.ndarray) -> Any:
    """The observations of ``rows`` (each array of a dict of them)."""
    if isinstance(obs, dict):
        return {key: value[rows] for key, value in obs.items()}
    return obs[rows]
