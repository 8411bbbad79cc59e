"""An on-policy population: every member steps its own rows of the population environment in
lockstep, and members whose networks stack act and learn as one computation.

Each member collects its own rollouts on its own schedule, as it would in its own vector
environment: rollouts of :func:`~agile_rl.training.runners.rollout_lengths` vector steps for
its ``learn_step``, episode bookkeeping per row, hidden state reset where episodes start. At
every vector step each group acts with one batched policy step
(:class:`~agile_rl.OnPolicyGroupLearner`); the members of a group whose rollouts end at that
step learn together in one batched update, and the others keep collecting. A member of a
class without an on-policy group learner acts and learns through its own ``policy_step`` and
``learn``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agile_rl.runtime.agent import OnPolicyAlgorithm
from agile_rl.runtime.on_policy_group import (
    Observation,
    OnPolicyGroupLearner,
    member_observations,
    member_records,
)
from agile_rl.runtime.rollout import PolicyRecord, Rollout
from agile_rl.training.groups import Slot, take_rows
from agile_rl.training.runners import (
    GenerationStats,
    PopulationRunner,
    Progress,
    learned_loss,
    learning_signals,
    rollout_lengths,
)


@dataclass
class _Collecting:
    """One member's rollouts of this generation: the lengths of those still to come (the
    first being collected) and the rollout collected so far."""

    lengths: list[int]
    rollout: Rollout = field(default_factory=Rollout)

    def complete(self) -> bool:
        return bool(self.lengths) and len(self.rollout) == self.lengths[0]

    def take(self) -> Rollout:
        """The complete rollout; collecting starts the next one."""
        rollout, self.rollout = self.rollout, Rollout()
        self.lengths.pop(0)
        return rollout


@dataclass
class _Step:
    """What the population did at one vector step, per member: the observations it acted on
    as its rollout keeps them (see :func:`pixel_bytes`) and its policy record; and every row's
    environment action."""

    obs: list[Observation]
    records: list[PolicyRecord]
    actions: np.ndarray


def pixel_bytes(member: OnPolicyAlgorithm, rows: Any) -> torch.Tensor | None:
    """Image observations ``rows`` (of members of ``member``'s class and space) as rollouts
    keep them, uint8 as the environment gave them, where the class stores them so
    (:attr:`~agile_rl.runtime.agent.OnPolicyAlgorithm.stores_pixel_bytes`); None where
    rollouts keep what ``obs_tensor`` makes."""
    space = member.observation_space
    if not (
        member.stores_pixel_bytes and isinstance(space, spaces.Box) and space.dtype == np.uint8
    ):
        return None
    return torch.tensor(np.asarray(rows), device=member.device)  # a copy: vectors reuse theirs


class OnPolicyRunner(PopulationRunner):
    """Trains an on-policy population in its population environment (see the module)."""

    family = "on_policy"

    # -- training ------------------------------------------------------------------------------

    def train_slots(
        self,
        members: list[OnPolicyAlgorithm],
        slots: list[Slot],
        steps: int,
        progress: Progress,
    ) -> list[GenerationStats]:
        total = max(1, math.ceil(steps / self.num_envs))  # vector steps this generation
        collecting = [
            _Collecting(rollout_lengths(total, int(m.spec.learn_step), self.num_envs))
            for m in members
        ]
        obs, stats, tracker = self._start(members)
        for _ in range(total):
            step = self._policy_steps(members, slots, obs)
            obs, rewards, terminated, truncated, infos = self.env.step(step.actions)
            valid, done, returns = tracker.step_rows(rewards, terminated, truncated)
            self._episodes(members, stats, valid, done, returns, progress)
            rewards, terminated = learning_signals(rewards, terminated, infos)
            for position, member in enumerate(members):
                rows = slice(position * self.num_envs, (position + 1) * self.num_envs)
                collecting[position].rollout.add(
                    step.obs[position], step.records[position], rewards[rows],
                    terminated[rows], truncated[rows], valid[rows],
                )  # fmt: skip
                stats[position].steps += self.num_envs
                member.record.steps += self.num_envs
            progress(self.env.num_envs)
            for slot in slots:
                self._learn(members, slot, collecting, stats, obs)
        return stats

    def _policy_steps(self, members: list[OnPolicyAlgorithm], slots: list[Slot], obs: Any) -> _Step:
        """Every slot's policy step on its rows: one batched step per group."""
        observations: list[Any] = [None] * len(members)
        records: list[Any] = [None] * len(members)
        parts = []
        for slot in slots:
            first = members[slot.positions[0]]
            rows = take_rows(obs, slot.rows)
            stored = pixel_bytes(first, rows)  # then preprocessed from the copy on the device
            obs_tensor = first.obs_tensor(rows if stored is None else stored)
            kept = member_observations(
                obs_tensor if stored is None else stored, len(slot.positions)
            )
            if isinstance(slot.actor, OnPolicyGroupLearner):
                actions, record = slot.actor.policy_step(obs_tensor)
                own = zip(kept, member_records(record), strict=True)
            else:
                actions, single = first.policy_step(obs_tensor)
                own = zip(kept, [PolicyRecord(*single)], strict=True)
            for position, (member_obs, member_record) in zip(slot.positions, own, strict=True):
                observations[position], records[position] = member_obs, member_record
            parts.append(np.asarray(actions))
        return _Step(observations, records, self._assemble(slots, parts))

    def _learn(
        self,
        members: list[OnPolicyAlgorithm],
        slot: Slot,
        collecting: list[_Collecting],
        stats: list[GenerationStats],
        obs: Any,
    ) -> None:
        """The slot's members whose rollouts are complete learn from them, a group's in one
        batched update; ``obs`` is what follows their last step."""
        complete = [collecting[p].complete() for p in slot.positions]
        if not any(complete):
            return
        first = members[slot.positions[0]]
        last_obs = first.obs_tensor(take_rows(obs, slot.rows))
        if isinstance(slot.actor, OnPolicyGroupLearner):
            rollouts = [
                collecting[p].take() if on else None
                for p, on in zip(slot.positions, complete, strict=True)
            ]
            losses = slot.actor.learn_rollouts(rollouts, last_obs)
            for position, loss in zip(slot.positions, losses, strict=True):
                if loss is not None:
                    stats[position].losses.append(loss)
        else:
            result = first.learn(collecting[slot.positions[0]].take(), last_obs)
            stats[slot.positions[0]].losses.append(learned_loss(result))
