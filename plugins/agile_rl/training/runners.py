"""How an RL population trains for a generation and is scored: every member steps its own rows
of one vector environment, built for the whole population, and members whose networks stack
act and learn as one computation.

The population environment has ``members x num_envs`` sub-environments, member ``i`` owning
rows ``i * num_envs ... (i + 1) * num_envs - 1``; each sub-environment has its own seed, and
episode bookkeeping is per row, as in a member's own vector environment. At every vector step
each group acts on its members' rows (:mod:`agile_rl.training.groups`), the environments step
once, and each member learns on its own schedule (``learn_step``, ``batch_size``). A member
that stacks with no other is a group of one; ``agile train --per-member`` makes every member
one.

Vector environments use gymnasium's next-step autoreset: the step after an episode ends only
resets that sub-environment. Those steps are masked out of learning (``valid`` below), and
the member hears through :meth:`~agile_cli.Member.reset_state` that the observation
they return starts a new episode (as it does after ``env.reset()``).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from agile_cli import (  # noqa: F401  (part of this module's names)
    EpisodeProgress,
    GenerationStats,
    Member,
    Progress,
    Runner,
    TrainingError,
)
from agile_cli.helpers import reset_seed
from agile_rl.runtime.agent import Algorithm, LearnResult, OffPolicyAlgorithm
from agile_rl.runtime.buffers import NStepAccumulator, ReplayBuffer
from agile_rl.runtime.compiled import compilations, resolve, unavailable
from agile_rl.runtime.group import alone_reason
from agile_rl.training.groups import (
    Alone,
    LossLog,
    Slot,
    budget_progress,
    gradient_step,
    learning_groups,
    take_rows,
    write_back,
)

__all__ = [
    "EpisodeTracker",
    "MultiAgentOffPolicyRunner",
    "OffPolicyRunner",
    "PopulationRunner",
    "budget_progress",
    "learned_loss",
    "rollout_lengths",
]


def learned_loss(result: LearnResult) -> float:
    """The loss an on-policy ``learn`` reports.

    :raises TrainingError: ``learn`` returned something else (a bare float, as plugins written
        before the first release did).
    """
    if not isinstance(result, LearnResult):
        raise TrainingError(
            f"learn() returned {type(result).__name__}, not agile_rl.LearnResult",
            "return LearnResult(loss=...) from the algorithm's learn()",
        )
    return result.loss


def learning_signals(
    rewards: np.ndarray, terminated: np.ndarray, infos: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """What the learner sees of a step: the environment's rewards and terminations, or what
    its preprocessing made of them for learning where the step's infos carry that (an Atari
    game's clipped rewards and lost lives, :mod:`agile_rl.runtime.atari`); episodes and their
    returns follow the environment's own."""
    return infos.get("learning_rewards", rewards), infos.get("learning_terminated", terminated)


class EpisodeTracker:
    """Sums rewards per sub-environment and reports finished episodes."""

    def __init__(self, num_envs: int) -> None:
        self.returns = np.zeros(num_envs)
        self.prev_done = np.zeros(num_envs, dtype=bool)

    def step_rows(
        self, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Record one vector step: ``(valid, done, returns)``, which rows were real steps,
        which finished an episode, and the returns of those, in row order."""
        valid = ~self.prev_done
        self.returns += np.where(valid, rewards, 0.0)
        done = (terminated | truncated) & valid
        finished = self.returns[done]
        self.returns[done] = 0.0
        self.prev_done = terminated | truncated
        return valid, done, finished


class PopulationRunner(Runner[Any]):
    """What the RL runners of every family share: the population environment's rows, groups
    and their slots, acting, episode bookkeeping and scoring (see the module). A member's
    fitness is the mean return of its sub-environments' first greedy episodes, and
    ``agile evaluate`` reports each episode's return.

    :param env: the population environment, ``num_envs`` rows for each member it trains.
    """

    #: The :attr:`~agile_rl.GroupLearner.family` of the group learners it runs.
    family: ClassVar[str]

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.num_envs = int(env.num_envs)  # each member's rows, set for each population
        self.group_indices: list[list[int]] = []  # the last groups, as the members' indices
        #: Why members of the last groups trained alone, by member index (none under
        #: ``--per-member``, which asks for it).
        self.alone: dict[int, str] = {}
        self._said: set[str] = set()
        #: Whether the last groups ran compiled (``--compile``), and the process's compilations
        #: before the generation that ``generation_metrics`` reports.
        self.compiled = False
        self._compiled_before = compilations()

    def generation_metrics(self) -> dict[str, Any]:
        """The last generation's groups (members by index) and why any member trained alone
        whatever the population, for ``metrics.jsonl``."""
        alone = {"alone": {str(index): why for index, why in self.alone.items()}}
        metrics = {"groups": self.group_indices, **(alone if self.alone else {})}
        if self.compiled:
            graphs, seconds = compilations()
            metrics["compiled"] = {
                "graphs": graphs - self._compiled_before[0],
                "seconds": round(seconds - self._compiled_before[1], 3),
            }
            self._compiled_before = (graphs, seconds)
        return metrics

    def notes(self) -> list[str]:
        """Each reason members trained alone, once a run, with the members it held back."""
        by_reason: dict[str, list[int]] = {}
        for index, reason in self.alone.items():
            by_reason.setdefault(reason, []).append(index)
        fresh = {why: indices for why, indices in by_reason.items() if why not in self._said}
        self._said.update(fresh)
        return [f"members {', '.join(map(str, indices))} train one by one, not stacked: {why}"
                if len(indices) > 1 else f"member {indices[0]} trains alone, not stacked: {why}"
                for why, indices in fresh.items()]  # fmt: skip

    def train_population(
        self, members: list[Any], steps: int, progress: Progress
    ) -> list[GenerationStats]:
        slots = self._slots(members)
        try:
            return self.train_slots(members, slots, steps, progress)
        finally:
            write_back([(slot.positions, slot.actor) for slot in slots])

    @abc.abstractmethod
    def train_slots(
        self, members: list[Any], slots: list[Slot], steps: int, progress: Progress
    ) -> list[GenerationStats]:
        """Train every member for about ``steps`` steps, the slot of its group (from
        :func:`~agile_rl.training.groups.learning_groups`) acting and learning for it: what a
        family's runner implements."""

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

    def _slots(self, members: Sequence[Algorithm]) -> list[Slot]:
        """The population split into its groups (:func:`~agile_rl.training.groups.
        learning_groups`), each with what acts for it and its rows."""
        self.num_envs = self._member_rows(len(members))
        compiled = bool(members) and resolve(self.compile, members[0].device)
        if compiled and self.compiled is False:  # checked once, before the first compilation
            _check_compilable(members[0].device)
        groups = learning_groups(members, self.family, stack=self.stack, compiled=compiled)
        self.compiled = compiled
        self.group_indices = [[members[i].index for i in group] for group, _ in groups]
        reasons = [(m.index, alone_reason(m)) for m in members] if self.stack else []
        self.alone = {index: why for index, why in reasons if why is not None}
        return [Slot(actor, positions, self._rows(positions)) for positions, actor in groups]

    def _member_rows(self, members: int) -> int:
        """Each member's rows of the environment, for a population of ``members``."""
        rows, left = divmod(int(self.env.num_envs), members)
        if left or not rows:
            raise TrainingError(
                f"an environment of {self.env.num_envs} sub-environments cannot hold "
                f"{members} members alike",
                "build the runner on the environment the paradigm made for these members",
            )
        return rows

    def _rows(self, positions: list[int]) -> np.ndarray:
        """The population environment's rows of the members at ``positions``."""
        width = self.num_envs
        return np.concatenate([np.arange(p * width, (p + 1) * width) for p in positions])

    def _act(self, slots: list[Slot], obs: Any, *, explore: bool) -> np.ndarray:
        """Every slot's actions on its rows, as one action per population row."""
        parts = [slot.actor.act(take_rows(obs, slot.rows), explore=explore) for slot in slots]
        return self._assemble(slots, [_arrays(part) for part in parts])

    def _assemble(self, slots: list[Slot], parts: list[Any]) -> Any:
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
        """Every member's fitness: the mean return of its sub-environments' first greedy
        episodes over ``rounds`` rounds, round ``r`` starting from :func:`reset_seed`
        ``(members, "score", r)``, all members acting at once."""
        slots = self._slots(members)
        scores = [self._first_episodes(members, slots, max_steps, r) for r in range(rounds)]
        return [float(score) for score in np.mean(scores, axis=0)]

    def episode_returns(
        self, member: Any, episodes: int, max_steps: int | None, seed: int
    ) -> list[float] | None:
        """The first greedy episode's return in each sub-environment (``agile evaluate``
        builds as many as it plays), the member acting through its own ``act``."""
        self.num_envs = self._member_rows(1)
        slots = [Slot(Alone(member), [0], self._rows([0]))]
        returns = self._first_returns([member], slots, max_steps, seed)
        return [float(value) for value in returns]

    def _first_episodes(
        self, members: list[Any], slots: list[Slot], max_steps: int | None, round_: int
    ) -> np.ndarray:
        """Each member's mean return of its sub-environments' first greedy episodes."""
        seed = reset_seed(members, "score", round_)
        totals = self._first_returns(members, slots, max_steps, seed)
        return totals.reshape(len(members), self.num_envs).mean(axis=1)

    def _first_returns(
        self, members: list[Any], slots: list[Slot], max_steps: int | None, seed: int
    ) -> np.ndarray:
        """The return of every row's first greedy episode (cut at ``max_steps`` steps)."""
        obs, _ = self.env.reset(seed=seed)
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
        return totals


def _arrays(actions: Any) -> Any:
    """Actions as arrays (a team's dict of them stays a dict)."""
    if isinstance(actions, dict):
        return {agent: np.asarray(value) for agent, value in actions.items()}
    return np.asarray(actions)


def learn_schedule(learn_step: int, num_envs: int) -> tuple[int, int]:
    """(learn every this many vector steps, gradient steps each time) for one learn per
    ``learn_step`` environment steps."""
    if learn_step > num_envs:
        return learn_step // num_envs, 1
    return 1, max(1, num_envs // learn_step)


def rollout_lengths(total: int, learn_step: int, num_envs: int) -> list[int]:
    """Split ``total`` vector steps into rollouts as close to ``learn_step`` env steps as the
    split allows, so every member trains exactly as many steps whatever its learn_step."""
    wanted = max(1, math.ceil(learn_step / num_envs))
    count = max(1, round(total / wanted))
    return [total // count + (1 if i < total % count else 0) for i in range(count)]


class OffPolicyRunner(PopulationRunner):
    """Trains an off-policy population: every step's transitions go to the replay buffer the
    population shares, and each member learns from batches of its own on its own schedule;
    the members of a group that learn at a step share one sampled gather, one forward and
    backward pass and one optimizer step, the others masked out of that update.

    :param buffer: the shared replay buffer.
    :param learning_delay: environment steps the buffer must hold before anyone learns.
    :param n_step: the n-step accumulator transitions pass through, if any.
    """

    family = "off_policy"

    def __init__(
        self,
        env: Any,
        buffer: ReplayBuffer,
        *,
        learning_delay: int = 0,
        n_step: NStepAccumulator | None = None,
    ) -> None:
        super().__init__(env)
        self.buffer = buffer
        self.learning_delay = learning_delay
        self.n_step = n_step

    def train_slots(
        self,
        members: list[OffPolicyAlgorithm],
        slots: list[Slot],
        steps: int,
        progress: Progress,
    ) -> list[GenerationStats]:
        schedules = [learn_schedule(int(m.spec.learn_step), self.num_envs) for m in members]
        obs, stats, tracker = self._start(members)
        if self.n_step is not None:  # the reset ends every pending window
            self.n_step.reset()
        vector_steps = max(1, steps // self.num_envs)
        logs = [LossLog.for_slot(slot, schedules, vector_steps) for slot in slots]
        for t in range(vector_steps):
            actions = self._act(slots, obs, explore=True)
            next_obs, rewards, terminated, truncated, infos = self.env.step(actions)
            valid, done, returns = tracker.step_rows(rewards, terminated, truncated)
            self._episodes(members, stats, valid, done, returns, progress)
            rewards, terminated = learning_signals(rewards, terminated, infos)
            self.store(obs, actions, rewards, next_obs, terminated, truncated, valid, infos)
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

    def _learn(
        self,
        slot: Slot,
        log: LossLog | None,
        population: list[OffPolicyAlgorithm],
        schedules: list[tuple[int, int]],
        stats: list[GenerationStats],
        t: int,
    ) -> None:
        """Every gradient step the slot's members take after vector step ``t``."""
        repeats = []
        for position in slot.positions:
            every, count = schedules[position]
            learns = (t + 1) % every == 0 and self._ready(population[position])
            repeats.append(count if learns else 0)
        for repeat in range(max(repeats)):
            active = [count > repeat for count in repeats]
            losses = gradient_step(slot.actor, self.buffer, active)
            if log is not None:
                log.add(losses, active)
            else:  # a member alone: its loss is already read
                stats[slot.positions[0]].losses.append(float(losses[0]))

    def _ready(self, member: OffPolicyAlgorithm) -> bool:
        size = len(self.buffer)
        return size >= int(member.spec.batch_size) and size > self.learning_delay

    def store(
        self,
        obs: Any,
        actions: Any,
        rewards: np.ndarray,
        next_obs: Any,
        terminated: np.ndarray,
        truncated: np.ndarray,
        valid: np.ndarray,
        infos: dict[str, Any],
    ) -> None:
        """Store one vector step's real transitions (``valid`` rows) in the shared buffer,
        through the n-step accumulator when there is one."""
        if self.n_step is None:
            self._store(obs, actions, rewards, next_obs, terminated, valid, infos)
            return
        ready = self.n_step.push(obs, actions, rewards, next_obs, terminated, truncated, valid)
        if ready is not None:
            self.buffer.add(
                ready.obs, ready.actions, ready.rewards, ready.next_obs, ready.terminated,
                discounts=ready.discounts, first=ready.first,
            )  # fmt: skip

    def _store(
        self,
        obs: Any,
        actions: Any,
        rewards: np.ndarray,
        next_obs: Any,
        terminated: np.ndarray,
        valid: np.ndarray,
        infos: dict[str, Any],
    ) -> None:
        self.buffer.add(obs, actions, rewards, next_obs, terminated, mask=valid)


class MultiAgentOffPolicyRunner(OffPolicyRunner):
    """The off-policy runner for teams on a :class:`~agile_rl.runtime.team_env.TeamEnv`: each
    agent's reward and termination go to the shared multi-agent replay buffer."""

    family = "off_policy"

    def _store(
        self,
        obs: Any,
        actions: Any,
        rewards: np.ndarray,
        next_obs: Any,
        terminated: np.ndarray,
        valid: np.ndarray,
        infos: dict[str, Any],
    ) -> None:
        agent_rewards, agent_terminated = infos["agent_rewards"], infos["agent_terminated"]
        self.buffer.add(obs, actions, agent_rewards, next_obs, agent_terminated, mask=valid)


def _check_compilable(device: torch.device) -> None:
    """:raises TrainingError: ``--compile on`` on a ``device`` inductor cannot compile for here."""
    reason = unavailable(device)
    if reason is not None:
        raise TrainingError(
            f"--compile on cannot compile on {device}: {reason}",
            "install one, or train with --compile off: eager passes compute the same",
        )
