"""One generation of on-policy training for a population of teams (the multi-agent on-policy
family).

The runner steps a :class:`~agile_rl.runtime.team_env.TeamEnv` as
:class:`~agile_rl.OnPolicyRunner` steps a single-agent one, each team on its own rows, and hands
a team a :class:`TeamRollout` after each of its rollouts.

**Rollout layout.** A :class:`TeamRollout` holds one :class:`~agile_rl.runtime.rollout.Rollout` per
entry of the member's ``groups`` (agents whose rows one network batch serves). With ``N``
environment copies, row ``a * N + n`` of a group's rollout is the group's ``a``-th agent in copy
``n`` (agent-major: the per-agent ``[N, ...]`` arrays concatenated). Each row carries that
agent's own reward, termination and truncation, so generalised advantages are computed per
agent (:func:`~agile_rl.compute_gae` with one column per row), bootstrapping through
truncations as single-agent PPO does. A row is valid, and kept for learning, when its copy's
step was a real one (not an autoreset step) and the agent had not finished its episode
before it (an agent that left early reports terminated with zero reward until its team ends).

**What the member provides.** ``obs_tensor(obs)`` returns the observations by group, each
``[A * N, ...]`` in that row order; ``policy_step(obs_tensor)`` returns the actions by agent
and a :class:`~agile_rl.PolicyRecord` by group; ``learn(rollout, last_obs)`` gets the
finished :class:`TeamRollout` and ``obs_tensor`` of the observations after its last step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np
import torch

from agile_rl.runtime.multi_agent import MultiAgentOnPolicyAlgorithm
from agile_rl.runtime.on_policy_group import TeamOnPolicyGroupLearner
from agile_rl.runtime.rollout import PolicyRecord, Rollout, RolloutBatch
from agile_rl.training.groups import Slot, take_rows
from agile_rl.training.runners import (
    GenerationStats,
    PopulationRunner,
    Progress,
    learned_loss,
    rollout_lengths,
)

if TYPE_CHECKING:
    from agile_rl.nn.modules import Observation


class GroupRows(NamedTuple):
    """One vector step of every group's agents, by group, rows as in a :class:`TeamRollout`."""

    rewards: dict[str, np.ndarray]
    terminated: dict[str, np.ndarray]
    truncated: dict[str, np.ndarray]
    valid: dict[str, np.ndarray]


class TeamRollout:
    """One rollout of a team: a :class:`~agile_rl.runtime.rollout.Rollout` per group of agents.

    :param groups: the agents of each group, in row order.
    """

    def __init__(self, groups: Mapping[str, list[str]]) -> None:
        self.groups = {group: list(agents) for group, agents in groups.items()}
        self.rollouts = {group: Rollout() for group in self.groups}

    def __len__(self) -> int:
        """Vector steps recorded."""
        return len(next(iter(self.rollouts.values())))

    def add(
        self,
        obs: Mapping[str, torch.Tensor | dict[str, torch.Tensor]],
        records: Mapping[str, PolicyRecord],
        rows: GroupRows,
    ) -> None:
        """Record one vector step: each group's observations and policy record, and its
        agents' rewards, flags and validity."""
        for group, rollout in self.rollouts.items():
            rollout.add(
                obs[group], records[group], rows.rewards[group], rows.terminated[group],
                rows.truncated[group], rows.valid[group],
            )  # fmt: skip

    def finish(
        self, group: str, last_values: torch.Tensor, gamma: float, gae_lambda: float
    ) -> RolloutBatch:
        """One group's valid rows with advantages and returns, flattened over time and rows.

        :param last_values: ``[A * N]`` values of the group's observations after the last step.
        """
        return self.rollouts[group].finish(last_values, gamma, gae_lambda)


class _AgentTracker:
    """Turns the per-agent arrays of a team step into group rows, and remembers which agents
    have finished their episode (their later steps are not learnt from)."""

    def __init__(self, groups: Mapping[str, list[str]], num_envs: int) -> None:
        self.groups = {group: list(agents) for group, agents in groups.items()}
        self.done = {
            group: np.zeros(len(agents) * num_envs, dtype=bool)
            for group, agents in self.groups.items()
        }

    def step(self, infos: Mapping[str, Any], team_valid: np.ndarray) -> GroupRows:
        rows = GroupRows({}, {}, {}, {})
        for group, agents in self.groups.items():
            rows.rewards[group] = _rows(infos["agent_rewards"], agents)
            terminated = rows.terminated[group] = _rows(infos["agent_terminated"], agents)
            truncated = rows.truncated[group] = _rows(infos["agent_truncated"], agents)
            rows.valid[group] = np.tile(team_valid, len(agents)) & ~self.done[group]
            self.done[group] = terminated | truncated
        return rows


def _rows(per_agent: Mapping[str, np.ndarray], agents: list[str]) -> np.ndarray:
    if len(agents) == 1:
        return np.asarray(per_agent[agents[0]])
    return np.concatenate([per_agent[agent] for agent in agents])


class MultiAgentOnPolicyRunner(PopulationRunner):
    """Trains an on-policy population of teams in its population environment: every team
    steps its own rows in lockstep and collects its own team rollouts on its own schedule;
    the teams of a group act with one batched policy step and those whose rollouts end at a
    step learn together (:class:`~agile_rl.TeamOnPolicyGroupLearner`). Episode returns are
    the team's (the agents' rewards summed, or averaged without ``training.sum_scores``), as
    evaluation scores them. A team of a class without such a group learner acts and learns
    through its own ``policy_step`` and ``learn``.
    """

    family = "team_on_policy"

    def train_slots(
        self,
        members: list[MultiAgentOnPolicyAlgorithm],
        slots: list[Slot],
        steps: int,
        progress: Progress,
    ) -> list[GenerationStats]:
        total = max(1, math.ceil(steps / self.num_envs))  # vector steps this generation
        lengths = [rollout_lengths(total, int(m.spec.learn_step), self.num_envs) for m in members]
        rollouts = [TeamRollout(member.groups) for member in members]
        agents = [_AgentTracker(member.groups, self.num_envs) for member in members]
        rows = [self._rows([position]) for position in range(len(members))]
        obs, stats, tracker = self._start(members)
        for _ in range(total):
            own = [
                _team_obs(m, take_rows(obs, own_rows))
                for m, own_rows in zip(members, rows, strict=True)
            ]
            actions, records = self._policy_steps(members, slots, own)
            obs, rewards, terminated, truncated, infos = self.env.step(actions)
            valid, done, returns = tracker.step_rows(rewards, terminated, truncated)
            self._episodes(members, stats, valid, done, returns, progress)
            for position, member in enumerate(members):
                own_rows = rows[position]
                step = agents[position].step(_member_infos(infos, own_rows), valid[own_rows])
                rollouts[position].add(own[position], records[position], step)
                stats[position].steps += self.num_envs
                member.record.steps += self.num_envs
            progress(self.env.num_envs)
            for slot in slots:
                self._learn(members, slot, rollouts, lengths, stats, obs, rows)
        return stats

    def _policy_steps(
        self, members: list[MultiAgentOnPolicyAlgorithm], slots: list[Slot], own: list[Any]
    ) -> tuple[dict[str, np.ndarray], list[Any]]:
        """Every slot's policy step on its members' observations: one batched step per
        group; the actions of every population row, and each member's records by group."""
        records: list[Any] = [None] * len(members)
        parts: list[Any] = []
        for slot in slots:
            chosen: list[Any]
            actions: Any
            if isinstance(slot.actor, TeamOnPolicyGroupLearner):
                actions, chosen = slot.actor.policy_step([own[p] for p in slot.positions])
            else:
                position = slot.positions[0]
                actions, single = members[position].policy_step(own[position])
                chosen = [single]
            for position, record in zip(slot.positions, chosen, strict=True):
                records[position] = record
            parts.append(actions)
        return self._assemble(slots, parts), records

    def _learn(
        self,
        members: list[MultiAgentOnPolicyAlgorithm],
        slot: Slot,
        rollouts: list[TeamRollout],
        lengths: list[list[int]],
        stats: list[GenerationStats],
        obs: Any,
        rows: list[np.ndarray],
    ) -> None:
        """The slot's members whose rollouts are complete learn from them, a group's in one
        batched update; ``obs`` is what follows their last step (``rows``: each member's)."""
        complete = [bool(lengths[p]) and len(rollouts[p]) == lengths[p][0] for p in slot.positions]
        if not any(complete):
            return
        taken: list[TeamRollout | None] = []
        last: list[Any] = []
        for position, on in zip(slot.positions, complete, strict=True):
            member = members[position]
            taken.append(rollouts[position] if on else None)
            last.append(_team_obs(member, take_rows(obs, rows[position])) if on else None)
            if on:
                rollouts[position] = TeamRollout(member.groups)
                lengths[position].pop(0)
        if isinstance(slot.actor, TeamOnPolicyGroupLearner):
            losses = slot.actor.learn_rollouts(taken, last)
        else:
            result = members[slot.positions[0]].learn(taken[0], last[0])
            losses = [learned_loss(result)]
        for position, loss in zip(slot.positions, losses, strict=True):
            if loss is not None:
                stats[position].losses.append(loss)


def _team_obs(member: MultiAgentOnPolicyAlgorithm, obs: Any) -> Mapping[str, Observation]:
    """A team's observations by group of agents, as its ``obs_tensor`` gives them."""
    return cast("Mapping[str, Observation]", member.obs_tensor(obs))


def _member_infos(infos: Mapping[str, Any], rows: np.ndarray) -> dict[str, Any]:
    """The per-agent arrays of a team step's infos on one member's rows."""
    keys = ("agent_rewards", "agent_terminated", "agent_truncated")
    return {key: {agent: np.asarray(value)[rows] for agent, value in infos[key].items()}
            for key in keys}  # fmt: skip
