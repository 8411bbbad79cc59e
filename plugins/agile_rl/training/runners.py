"""One generation of training for one member, per family, and evaluation.

Vector environments use gymnasium's next-step autoreset: the step after an episode ends only
resets that sub-environment. Those steps are masked out of learning (``valid`` below), and
the member hears through :meth:`~agile_cli.Member.reset_state` that the observation
they return starts a new episode (as it does after ``env.reset()``).
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

import numpy as np

from agile_cli import (  # noqa: F401  (part of this module's names)
    EpisodeProgress,
    GenerationStats,
    Member,
    Progress,
    Runner,
    TrainingError,
)
from agile_cli.helpers import reset_seed
from agile_rl.runtime.agent import LearnResult, OffPolicyAlgorithm, OnPolicyAlgorithm
from agile_rl.runtime.buffers import NStepAccumulator, PrioritizedReplayBuffer, ReplayBuffer
from agile_rl.runtime.rollout import Rollout

A = TypeVar("A", bound=Member)


class EpisodeRunner(Runner[A]):
    """The base of the RL runners: a member's fitness is the mean return of greedy episodes
    (:func:`evaluate`), and ``agile evaluate`` reports each episode's return."""

    def evaluate(self, member: A, rounds: int, max_steps: int | None) -> float:
        """The mean return of each sub-environment's first greedy episode, over ``rounds``
        rounds of at most ``max_steps`` steps."""
        return evaluate(member, self.env, rounds, max_steps)

    def episode_returns(
        self, member: A, episodes: int, max_steps: int | None, seed: int
    ) -> list[float] | None:
        """The first greedy episode's return in each sub-environment (``agile evaluate``
        builds as many as it plays)."""
        returns = first_episode_returns(member, self.env, max_steps, seed=seed)
        return [float(value) for value in returns]


def budget_progress(member: Member) -> float:
    """The fraction of its step budget (``training.max_steps``) the member has trained, at
    most 1."""
    return min(1.0, member.record.steps / member.context.training.max_steps)


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


class EpisodeTracker:
    """Sums rewards per sub-environment and reports finished episodes."""

    def __init__(self, num_envs: int) -> None:
        self.returns = np.zeros(num_envs)
        self.prev_done = np.zeros(num_envs, dtype=bool)

    def step(
        self, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> tuple[np.ndarray, list[float]]:
        """Record one vector step; return which rows were real steps and finished returns."""
        valid, _, finished = self.step_rows(rewards, terminated, truncated)
        return valid, finished.tolist()

    def step_rows(
        self, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As :meth:`step`, also saying which rows finished: ``(valid, done, returns)``, the
        returns being those of the ``done`` rows, in row order."""
        valid = ~self.prev_done
        self.returns += np.where(valid, rewards, 0.0)
        done = (terminated | truncated) & valid
        finished = self.returns[done]
        self.returns[done] = 0.0
        self.prev_done = terminated | truncated
        return valid, done, finished


class OffPolicyRunner(EpisodeRunner[OffPolicyAlgorithm]):
    """Collects experience into the shared replay buffer and learns from it."""

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
        self.num_envs = env.num_envs

    def train(self, member: OffPolicyAlgorithm, steps: int, progress: Progress) -> GenerationStats:
        """Train ``member`` for about ``steps`` environment steps."""
        stats = GenerationStats()
        tracker = EpisodeTracker(self.num_envs)
        every, repeats = _learn_schedule(int(member.spec.learn_step), self.num_envs)
        obs, _ = self.env.reset(seed=reset_seed([member], "train"))
        if self.n_step is not None:  # the reset ends every pending window
            self.n_step.reset()
        member.reset_state()
        for t in range(max(1, steps // self.num_envs)):
            actions = member.act(obs, explore=True)
            next_obs, rewards, terminated, truncated, infos = self.env.step(actions)
            valid, finished = tracker.step(rewards, terminated, truncated)
            if not valid.all():  # those steps only reset: next_obs starts new episodes
                member.reset_state(~valid)
            self.store(obs, actions, rewards, next_obs, terminated, truncated, valid, infos)
            stats.add_episodes(finished, progress)
            obs = next_obs
            if (t + 1) % every == 0 and self._ready(member):
                for _ in range(repeats):
                    stats.losses.append(self._learn(member))
            stats.steps += self.num_envs
            member.record.steps += self.num_envs
            progress(self.num_envs)
        return stats

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
        else:
            self._store_n_step(obs, actions, rewards, next_obs, terminated, truncated, valid)

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

    def _store_n_step(
        self,
        obs: Any,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: Any,
        terminated: np.ndarray,
        truncated: np.ndarray,
        valid: np.ndarray,
    ) -> None:
        assert self.n_step is not None
        ready = self.n_step.push(obs, actions, rewards, next_obs, terminated, truncated, valid)
        if ready is not None:
            self.buffer.add(
                ready.obs, ready.actions, ready.rewards, ready.next_obs, ready.terminated,
                discounts=ready.discounts,
            )  # fmt: skip

    def _ready(self, member: OffPolicyAlgorithm) -> bool:
        size = len(self.buffer)
        return size >= int(member.spec.batch_size) and size > self.learning_delay

    def _learn(self, member: OffPolicyAlgorithm) -> float:
        size = int(member.spec.batch_size)
        if isinstance(self.buffer, PrioritizedReplayBuffer):
            beta = member.importance_exponent(budget_progress(member))
            batch = self.buffer.sample(size, member.generator, beta)
        else:
            batch = self.buffer.sample(size, member.generator)
        result = member.learn(batch)
        if result.priorities is not None and isinstance(self.buffer, PrioritizedReplayBuffer):
            self.buffer.update_priorities(batch.indices, result.priorities)
        return result.loss


class MultiAgentOffPolicyRunner(OffPolicyRunner):
    """The off-policy runner for teams on a :class:`~agile_rl.runtime.team_env.TeamEnv`: each
    agent's reward and termination go to the shared multi-agent replay buffer."""

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


def _learn_schedule(learn_step: int, num_envs: int) -> tuple[int, int]:
    """(learn every this many vector steps, gradient steps each time) for one learn per
    ``learn_step`` environment steps."""
    if learn_step > num_envs:
        return learn_step // num_envs, 1
    return 1, max(1, num_envs // learn_step)


class OnPolicyRunner(EpisodeRunner[OnPolicyAlgorithm]):
    """Collects rollouts of ``learn_step`` environment steps and learns after each."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.num_envs = env.num_envs

    def train(self, member: OnPolicyAlgorithm, steps: int, progress: Progress) -> GenerationStats:
        stats = GenerationStats()
        tracker = EpisodeTracker(self.num_envs)
        total = max(1, math.ceil(steps / self.num_envs))  # vector steps this generation
        obs, _ = self.env.reset(seed=reset_seed([member], "train"))
        member.reset_state()
        for length in rollout_lengths(total, int(member.spec.learn_step), self.num_envs):
            rollout = Rollout()
            for _ in range(length):
                obs_tensor = member.obs_tensor(obs)
                actions, record = member.policy_step(obs_tensor)
                obs, rewards, terminated, truncated, _ = self.env.step(actions)
                valid, finished = tracker.step(rewards, terminated, truncated)
                if not valid.all():  # those steps only reset: obs starts new episodes
                    member.reset_state(~valid)
                rollout.add(obs_tensor, record, rewards, terminated, truncated, valid)
                stats.add_episodes(finished, progress)
                stats.steps += self.num_envs
                member.record.steps += self.num_envs
                progress(self.num_envs)
            stats.losses.append(learned_loss(member.learn(rollout, member.obs_tensor(obs))))
        return stats


def rollout_lengths(total: int, learn_step: int, num_envs: int) -> list[int]:
    """Split ``total`` vector steps into rollouts as close to ``learn_step`` env steps as the
    split allows, so every member trains exactly as many steps whatever its learn_step."""
    wanted = max(1, math.ceil(learn_step / num_envs))
    count = max(1, round(total / wanted))
    return [total // count + (1 if i < total % count else 0) for i in range(count)]


def evaluate(member: Member, env: Any, episodes: int, max_steps: int | None) -> float:
    """Mean return of each sub-environment's first episode, averaged over ``episodes`` rounds.

    The member acts without exploration (greedy / deterministic), round ``r`` starting from
    :func:`reset_seed` ``(member, "score", r)``.
    """
    scores = [
        first_episode_returns(member, env, max_steps, reset_seed([member], "score", r)).mean()
        for r in range(episodes)
    ]
    return float(np.mean(scores))


def first_episode_returns(
    member: Member, env: Any, max_steps: int | None, seed: int | None = None
) -> np.ndarray:
    """The return of each sub-environment's first episode (cut at ``max_steps`` steps),
    acting without exploration."""
    obs, _ = env.reset(seed=seed)
    member.reset_state()
    totals = np.zeros(env.num_envs)
    finished = np.zeros(env.num_envs, dtype=bool)
    steps = 0
    while not finished.all() and (max_steps is None or steps < max_steps):
        obs, rewards, terminated, truncated, _ = env.step(member.act(obs, explore=False))
        totals += np.where(finished, 0.0, rewards)
        finished |= terminated | truncated
        steps += 1
    return totals
