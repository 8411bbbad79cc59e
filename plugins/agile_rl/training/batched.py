"""A batched population: every member steps its environments in one vector environment, and
members whose networks stack act and learn as one computation.

The population's environments are one vector environment of ``pop_size x num_envs``
sub-environments, member ``i`` owning rows ``i * num_envs ... (i + 1) * num_envs - 1``; each
sub-environment has its own seed, and episode bookkeeping is per row, as in a member's own
vector environment. At every vector step each group acts on its members' rows
(:class:`~agile_rl.GroupLearner`), the environments step once, every transition goes to the
shared replay buffer at once, and each member learns on its own schedule (``learn_step``,
``batch_size``): the members of a group that learn at a step share one sampled gather, one
forward and backward pass and one optimizer step; the others are masked out of that update.
A member that stacks with no other (an unsupported network, a class without a group
learner) acts and learns through its own methods, as the per-member path does.

``agile train --per-member`` switches back to training members one after the other, each
in the manifest's ``num_envs`` environments.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from agile_cli import Family, Member, TrainingError, TrainingManifest
from agile_rl.runtime.agent import Algorithm, OffPolicyAlgorithm, OnPolicyAlgorithm
from agile_rl.runtime.algorithms.deterministic import DeterministicActorCritic
from agile_rl.runtime.buffers import PrioritizedReplayBuffer, ReplayBuffer
from agile_rl.runtime.group import (
    GroupLearner,
    MemberGroup,
    group_learner_of,
    group_members,
    stackable,
)
from agile_rl.training.runners import (
    EpisodeTracker,
    GenerationStats,
    OffPolicyRunner,
    Progress,
    Runner,
    _learn_schedule,
    budget_progress,
    reset_seed,
)

#: The paradigms whose runners the batched runners replace.
_BATCHED_FAMILIES = (
    Family.OFF_POLICY,
    Family.ON_POLICY,
    Family.MULTI_AGENT_OFF_POLICY,
    Family.MULTI_AGENT_ON_POLICY,
)


def applies(manifest: TrainingManifest, cls: type[Member]) -> bool:
    """Whether a run of ``manifest`` can train as a batched population: an off- or on-policy
    algorithm (single-agent, or a team) whose class has a group learner,
    trained by the RL library's runner of its family, in environments whose number the
    manifest sets. Deterministic
    actor-critics with ``share_encoders`` train one by one (stacked critics cannot read their
    actor's encoder)."""
    paradigm = manifest.paradigm
    if paradigm is None or paradigm.name not in _BATCHED_FAMILIES:
        return False
    shares = getattr(manifest.algorithm, "share_encoders", False)
    if shares and issubclass(cls, DeterministicActorCritic):
        return False
    families = (OffPolicyAlgorithm, OnPolicyAlgorithm)
    if not issubclass(cls, families) or group_learner_of(cls) is None:
        return False
    return "num_envs" in type(manifest.environment).model_fields


class _Single:
    """A member that stacks with no other, acting through its own ``act``."""

    def __init__(self, member: Algorithm) -> None:
        self.members = [member]

    def act(self, obs: Any, *, explore: bool) -> Any:
        return self.members[0].act(obs, explore=explore)


@dataclass
class _Slot:
    """What acts for some members, their places in the population, and their env rows."""

    actor: GroupLearner | _Single
    positions: list[int]
    rows: np.ndarray


class BatchedRunner(Runner[Any]):
    """What the batched runners of both families share: the population environment's rows,
    groups and their slots, batched acting, episode bookkeeping and scoring (see the module).

    :param inner: the paradigm's runner of the family (a :attr:`runner_type`, or a subclass
        of it), built on the population environment.
    :param members: the population size.
    """

    #: The family's core runner, which this one replaces.
    runner_type: ClassVar[type[Runner[Any]]]
    #: The :attr:`~agile_rl.GroupLearner.family` of the group learners it runs.
    family: ClassVar[str]

    def __init__(self, inner: Runner[Any], members: int) -> None:
        if not isinstance(inner, self.runner_type):
            raise TrainingError(
                f"this paradigm's runner ({type(inner).__name__}) does not train a batched "
                "population",
                "train with --per-member",
            )
        super().__init__(inner.env)
        self.num_envs = self.env.num_envs // members
        self.groups: list[list[int]] = []
        self.group_indices: list[list[int]] = []  # the same, as the members' indices

    def generation_metrics(self) -> dict[str, Any]:
        """The last generation's groups (members by index), for ``metrics.jsonl``."""
        return {"groups": self.group_indices}

    def train(self, member: Any, steps: int, progress: Progress) -> GenerationStats:
        raise NotImplementedError("a batched runner trains the whole population at once")

    def train_population(
        self, members: list[Any], steps: int, progress: Progress
    ) -> list[GenerationStats]:
        slots = self._slots(members)
        try:
            return self._generation(members, slots, steps, progress)
        finally:
            _write_back(slots)

    @abc.abstractmethod
    def _generation(
        self, members: list[Any], slots: list[_Slot], steps: int, progress: Progress
    ) -> list[GenerationStats]:
        """Train every member for about ``steps`` steps, its group acting and learning for it."""

    def _start(
        self, members: Sequence[Algorithm]
    ) -> tuple[Any, list[GenerationStats], EpisodeTracker]:
        """Reset the environments and the members' episode state for a generation: the first
        observations, each member's (empty) stats and the rows' episode tracker."""
        obs, _ = self.env.reset(seed=reset_seed(members, "train"))
        for member in members:
            member.reset_state()
        return obs, [GenerationStats() for _ in members], EpisodeTracker(self.env.num_envs)

    def _episodes(
        self,
        members: Sequence[Algorithm],
        stats: list[GenerationStats],
        valid: np.ndarray,
        done: np.ndarray,
        returns: np.ndarray,
        progress: Progress | None = None,
    ) -> None:
        """Hand each member its finished episodes (telling ``progress`` of them) and the rows
        whose episodes start anew."""
        for row, value in zip(np.flatnonzero(done), returns, strict=True):
            stats[row // self.num_envs].add_episodes([value], progress)
        if not valid.all():
            starts = ~valid.reshape(len(members), self.num_envs)
            for member, rows in zip(members, starts, strict=True):
                if rows.any():
                    member.reset_state(rows)

    # -- groups and acting -------------------------------------------------------------------

    def _slots(self, members: Sequence[Algorithm]) -> list[_Slot]:
        """The population split into groups that stack (:func:`~agile_rl.runtime.group.
        group_members`), each with what acts for it; a group of one, or of a class whose
        group learner is of another family, acts member by member."""
        groups = learning_groups(members, self.family)
        self.groups = [positions for positions, _ in groups]
        self.group_indices = [[members[i].index for i in group] for group in self.groups]
        return [
            _Slot(learner or _Single(members[positions[0]]), positions, self._rows(positions))
            for positions, learner in groups
        ]

    def _rows(self, positions: list[int]) -> np.ndarray:
        """The population environment's rows of the members at ``positions``."""
        width = self.num_envs
        return np.concatenate([np.arange(p * width, (p + 1) * width) for p in positions])

    def _act(self, slots: list[_Slot], obs: Any, *, explore: bool) -> np.ndarray:
        """Every slot's actions on its rows, as one action per population row."""
        parts = [slot.actor.act(_take(obs, slot.rows), explore=explore) for slot in slots]
        return self._assemble(slots, [_arrays(part) for part in parts])

    def _assemble(self, slots: list[_Slot], parts: list[Any]) -> Any:
        """The slots' actions on their rows as one action per population row (a team's:
        per agent)."""
        if len(slots) == 1:
            return parts[0]
        if isinstance(parts[0], dict):
            return {
                agent: self._assemble(slots, [part[agent] for part in parts]) for agent in parts[0]
            }
        actions = np.empty((self.env.num_envs, *parts[0].shape[1:]), dtype=parts[0].dtype)
        for slot, part in zip(slots, parts, strict=True):
            actions[slot.rows] = part
        return actions

    # -- scoring -------------------------------------------------------------------------------

    def evaluate_population(
        self, members: list[Any], rounds: int, max_steps: int | None
    ) -> list[float]:
        """Every member's fitness as :func:`~agile_rl.training.runners.evaluate` scores
        it, all members acting at once in the population environment."""
        slots = self._slots(members)
        scores = [self._first_episodes(members, slots, max_steps, r) for r in range(rounds)]
        return [float(score) for score in np.mean(scores, axis=0)]

    def _first_episodes(
        self, members: list[Any], slots: list[_Slot], max_steps: int | None, round_: int
    ) -> np.ndarray:
        """Each member's mean return of its sub-environments' first greedy episodes."""
        obs, _ = self.env.reset(seed=reset_seed(members, "score", round_))
        for member in members:
            member.reset_state()
        totals = np.zeros(self.env.num_envs)
        finished = np.zeros(self.env.num_envs, dtype=bool)
        steps = 0
        while not finished.all() and (max_steps is None or steps < max_steps):
            actions = self._act(slots, obs, explore=False)
            obs, rewards, terminated, truncated, _ = self.env.step(actions)
            totals += np.where(finished, 0.0, rewards)
            finished |= terminated | truncated
            steps += 1
        return totals.reshape(len(members), self.num_envs).mean(axis=1)


class BatchedOffPolicyRunner(BatchedRunner):
    """Trains a whole off-policy population in its population environment (see the module).

    :param inner: the paradigm's off-policy runner, built on the population environment (its
        replay buffer, learning delay and n-step accumulator serve every member).
    :param members: the population size.
    """

    runner_type = OffPolicyRunner
    family = "off_policy"

    def __init__(self, inner: Runner[Any], members: int) -> None:
        super().__init__(inner, members)
        assert isinstance(inner, OffPolicyRunner)
        self.inner = inner
        self.buffer = inner.buffer

    # -- training ------------------------------------------------------------------------------

    def _generation(
        self,
        members: list[OffPolicyAlgorithm],
        slots: list[_Slot],
        steps: int,
        progress: Progress,
    ) -> list[GenerationStats]:
        schedules = [_learn_schedule(int(m.spec.learn_step), self.num_envs) for m in members]
        obs, stats, tracker = self._start(members)
        if self.inner.n_step is not None:  # the reset ends every pending window
            self.inner.n_step.reset()
        vector_steps = max(1, steps // self.num_envs)
        logs = [_LossLog.for_slot(slot, schedules, vector_steps) for slot in slots]
        for t in range(vector_steps):
            actions = self._act(slots, obs, explore=True)
            next_obs, rewards, terminated, truncated, infos = self.env.step(actions)
            valid, done, returns = tracker.step_rows(rewards, terminated, truncated)
            self._episodes(members, stats, valid, done, returns, progress)
            self.inner.store(obs, actions, rewards, next_obs, terminated, truncated, valid, infos)
            obs = next_obs
            for slot, log in zip(slots, logs, strict=True):
                self._learn(slot, log, members, schedules, stats, t)
            for member, stat in zip(members, stats, strict=True):
                stat.steps += self.num_envs
                member.record.steps += self.num_envs
            progress(self.env.num_envs)
        for log in logs:
            if log is not None:
                log.read_into(stats)
        return stats

    # -- learning ------------------------------------------------------------------------------

    def _learn(
        self,
        slot: _Slot,
        log: _LossLog | None,
        population: list[OffPolicyAlgorithm],
        schedules: list[tuple[int, int]],
        stats: list[GenerationStats],
        t: int,
    ) -> None:
        """Every gradient step the slot's members take after vector step ``t``."""
        repeats = []
        for position in slot.positions:
            every, count = schedules[position]
            learns = (t + 1) % every == 0 and self.inner._ready(population[position])
            repeats.append(count if learns else 0)
        for repeat in range(max(repeats)):
            if isinstance(slot.actor, _Single):
                member = population[slot.positions[0]]
                stats[slot.positions[0]].losses.append(self.inner._learn(member))
                continue
            active = [count > repeat for count in repeats]
            assert log is not None  # a group's slot has one
            log.add(stacked_step(slot.actor, self.buffer, active), active)


class _LossLog:
    """A group's losses over a generation, written into one tensor allocated at its start on
    the group's device and read back once at its end: reading each step's would wait for the
    step (one synchronisation per update on a GPU), and keeping each step's own small tensor
    alive until then fragmented the CPU heap (peak memory 577 against 373 MiB for a
    population of 64 CartPole DQN members).

    :param positions: the group's members' places in the population.
    :param capacity: the most gradient steps the group can take in the generation.
    """

    def __init__(self, positions: list[int], capacity: int, device: torch.device) -> None:
        self.positions = positions
        self.losses = torch.zeros(capacity, len(positions), device=device)
        self.active: list[list[bool]] = []

    @classmethod
    def for_slot(
        cls, slot: _Slot, schedules: list[tuple[int, int]], vector_steps: int
    ) -> _LossLog | None:
        """The log of a group's slot (None for a member acting alone)."""
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
    members: Sequence[Algorithm], family: str
) -> list[tuple[list[int], GroupLearner | None]]:
    """``members`` split into the groups that learn as one computation: each group's positions
    in ``members`` and its group learner (of ``family``), or None for a member that learns
    alone through its own ``act`` and ``learn`` (its class has no group learner of that
    family, or its networks do not stack, see :func:`~agile_rl.runtime.group.group_members`).
    A stackable member that no other member joins is a group of one: it computes what it
    would alone, as fast (1.81 vs 1.78 ms a CartPole DQN update), and its optimizer steps
    never load torch.optim's compiler machinery (``torch._dynamo``: 0.9 s on the first
    step). A runner that built groups calls :func:`write_back` with them once it is done."""
    groups: list[tuple[list[int], GroupLearner | None]] = []
    for positions in group_members(members):
        chosen = [members[i] for i in positions]
        learner = group_learner_of(type(chosen[0]))
        stacks = len(chosen) > 1 or stackable(chosen[0])
        if stacks and learner is not None and learner.family == family:
            groups.append((positions, learner(MemberGroup(chosen))))
        else:
            groups += [([i], None) for i in positions]
    return groups


def write_back(groups: Sequence[tuple[list[int], GroupLearner | None]]) -> None:
    """Copy the stacked weights and optimizer states of :func:`learning_groups`' groups back
    into their members (the members alone have nothing to copy)."""
    for _, learner in groups:
        if learner is not None:
            learner.group.write_back()


def learn_stacked(
    learner: GroupLearner, buffer: ReplayBuffer, active: Sequence[bool]
) -> list[float]:
    """One gradient step for each ``active`` member of ``learner``'s group, each on a batch of
    its own ``batch_size`` drawn from ``buffer`` with its own generator (and, prioritised, its
    own importance exponent), as it draws one alone; returns each member's loss (an inactive
    member's is not meaningful)."""
    return [float(loss) for loss in stacked_step(learner, buffer, active).tolist()]


def stacked_step(
    learner: GroupLearner, buffer: ReplayBuffer, active: Sequence[bool]
) -> torch.Tensor:
    """:func:`learn_stacked`, its losses ``[k]`` left on the device (not read back)."""
    members = learner.members
    sizes = [int(m.spec.batch_size) if on else 0 for m, on in zip(members, active, strict=True)]
    prioritised = isinstance(buffer, PrioritizedReplayBuffer)
    betas = None
    if prioritised:
        betas = [m.importance_exponent(budget_progress(m)) for m in members]  # type: ignore[attr-defined]
    generators = [m.generator for m in members]
    batch, rows = buffer.sample_stacked(sizes, generators, betas)
    mask = torch.tensor(active, device=rows.device)
    losses, priorities = _learned(learner, learner.learn_batch(batch, rows, mask))
    if prioritised and priorities is not None:
        for row, size in enumerate(sizes):
            if size:
                indices, values = batch.indices[row, :size], priorities[row, :size]
                buffer.update_priorities(indices, values)  # type: ignore[attr-defined]
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


def _arrays(actions: Any) -> Any:
    """Actions as arrays (a team's dict of them stays a dict)."""
    if isinstance(actions, dict):
        return {agent: np.asarray(value) for agent, value in actions.items()}
    return np.asarray(actions)


def _take(obs: Any, rows: np.ndarray) -> Any:
    if isinstance(obs, dict):
        return {key: value[rows] for key, value in obs.items()}
    return obs[rows]


def _write_back(slots: list[_Slot]) -> None:
    for slot in slots:
        if isinstance(slot.actor, GroupLearner):
            slot.actor.group.write_back()
