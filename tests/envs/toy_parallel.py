"""A tiny PettingZoo parallel environment: two agents with different spaces, pure numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

SPEAKER, LISTENER = "speaker_0", "listener_0"


class ToyParallel:
    """The speaker says one of three words; the listener moves in 2-D.

    Observations carry the step count, the other agent's last action and noise from the
    environment's own generator, so a trajectory depends on the seed and on every action.

    It implements the ``ParallelEnv`` API without subclassing it: tests/arena uploads this
    folder and expects exactly one environment class in it (DictReach).

    :param length: steps per episode (both agents are truncated then).
    :param speaker_leaves_at: the step at which the speaker terminates and leaves the episode
        while the listener carries on; ``None`` keeps it to the end.
    :param speaker_joins_at: the step at which the speaker first appears (absent before).
    :param fail_at: the step (counted over the environment's life) at which ``step`` raises.
    """

    metadata = {"name": "toy_parallel_v0"}

    def __init__(
        self,
        length: int = 5,
        speaker_leaves_at: int | None = None,
        speaker_joins_at: int | None = None,
        fail_at: int | None = None,
    ) -> None:
        self.possible_agents = [SPEAKER, LISTENER]
        self.agents: list[str] = []
        self.length = length
        self.speaker_leaves_at = speaker_leaves_at
        self.speaker_joins_at = speaker_joins_at
        self.fail_at = fail_at
        self.rng = np.random.default_rng()
        self.t = 0
        self.step_calls = 0
        self.reset_calls = 0
        self.last_actions: dict[str, Any] = {}

    def observation_space(self, agent: str) -> spaces.Space:
        size = 3 if agent == SPEAKER else 5
        return spaces.Box(-np.inf, np.inf, (size,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        if agent == SPEAKER:
            return spaces.Discrete(3)
        return spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.reset_calls += 1
        self.t = 0
        self.agents = [LISTENER] if self.speaker_joins_at else list(self.possible_agents)
        self.word, self.move = 0, np.zeros(2, np.float32)
        return self._observe(), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, ...]:
        self.step_calls += 1
        if self.fail_at is not None and self.step_calls >= self.fail_at:
            raise RuntimeError(f"toy failure at step {self.step_calls}")
        self.last_actions = dict(actions)
        self.t += 1
        rewards = {}
        if SPEAKER in actions:
            self.word = int(actions[SPEAKER])
            rewards[SPEAKER] = 0.1 * self.word + float(self.rng.normal())
        if LISTENER in actions:
            self.move = np.asarray(actions[LISTENER], np.float32)
            rewards[LISTENER] = -float(np.square(self.move).sum()) + float(self.rng.normal())
        if self.t == self.speaker_joins_at:
            self.agents.insert(0, SPEAKER)
        observations = self._observe()
        over = self.t >= self.length
        terminated = {agent: False for agent in self.agents}
        if SPEAKER in self.agents and self.t == self.speaker_leaves_at:
            terminated[SPEAKER] = True
        truncated = {agent: over and not terminated[agent] for agent in self.agents}
        infos = {agent: {} for agent in self.agents}
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        return observations, rewards, terminated, truncated, infos

    def close(self) -> None:
        """Nothing to release."""

    def _observe(self) -> dict[str, np.ndarray]:
        noise = self.rng.normal(size=4).astype(np.float32)
        observations = {
            SPEAKER: np.array([self.t, *self.move[:1], noise[0]], np.float32),
            LISTENER: np.array([self.t, self.word, *noise[1:]], np.float32),
        }
        return {agent: observations[agent] for agent in self.agents}


class ScaleRewards:
    """A parallel-environment wrapper multiplying every reward by ``factor``."""

    def __init__(self, env: Any, factor: float) -> None:
        self.env = env
        self.factor = factor

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def step(self, actions: dict[str, Any]) -> tuple[dict, ...]:
        observations, rewards, *rest = self.env.step(actions)
        return (observations, {a: r * self.factor for a, r in rewards.items()}, *rest)
