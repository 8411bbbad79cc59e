"""Grid worlds from text maps, built as gymnasium vector environments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agile_cli import EnvironmentBuilder, EnvironmentNotFoundError
from agile_gridworld.spec import GridWorldSpec

MOVES = np.array([(-1, 0), (0, 1), (1, 0), (0, -1)])  # up, right, down, left


def read_map(path: Path) -> list[str]:
    """The rows of a map file, checked: rectangular, one S, one G, only # . S G."""
    if not path.is_file():
        raise EnvironmentNotFoundError(
            f"no grid-world map at {path}", "check environment.directory and environment.name"
        )
    rows = [line.rstrip("\n") for line in path.read_text().splitlines() if line.strip()]
    text = "".join(rows)
    problems = []
    if len({len(row) for row in rows}) != 1:
        problems.append("rows differ in length")
    if set(text) - set("#.SG"):
        problems.append(f"unknown characters {sorted(set(text) - set('#.SG'))}")
    if text.count("S") != 1 or text.count("G") != 1:
        problems.append("it needs exactly one S and one G")
    if problems:
        raise EnvironmentNotFoundError(f"map {path} is invalid: {'; '.join(problems)}")
    return rows


class GridWorld(gym.Env):
    """Move from S to G; observations are the one-hot cell index, actions the four moves."""

    def __init__(self, rows: list[str], max_episode_steps: int, step_penalty: float) -> None:
        self.walls = np.array([[cell == "#" for cell in row] for row in rows])
        self.start = _find(rows, "S")
        self.goal = _find(rows, "G")
        self.width = len(rows[0])
        self.observation_space = gym.spaces.Discrete(self.walls.size)
        self.action_space = gym.spaces.Discrete(4)
        self.max_episode_steps = max_episode_steps
        self.step_penalty = step_penalty

    def _obs(self) -> int:
        return int(self.position[0] * self.width + self.position[1])

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[int, dict]:
        super().reset(seed=seed)
        self.position = self.start.copy()
        self.steps = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict]:
        target = self.position + MOVES[int(action)]
        if not self.walls[tuple(target)]:
            self.position = target
        self.steps += 1
        reached = bool((self.position == self.goal).all())
        reward = (1.0 if reached else 0.0) - self.step_penalty
        return self._obs(), reward, reached, self.steps >= self.max_episode_steps, {}


def _find(rows: list[str], mark: str) -> np.ndarray:
    for r, row in enumerate(rows):
        if mark in row:
            return np.array([r, row.index(mark)])
    raise ValueError(mark)


class GridWorldBuilder(EnvironmentBuilder[GridWorldSpec]):
    """Builds ``num_envs`` copies of a map in this process (they are tiny)."""

    def check(self, spec: GridWorldSpec) -> None:
        read_map(Path(spec.directory) / f"{spec.name}.txt")

    def build(self, spec: GridWorldSpec, *, seed: int | None = None) -> gym.vector.VectorEnv:
        rows = read_map(Path(spec.directory) / f"{spec.name}.txt")

        def make() -> gym.Env:
            return GridWorld(rows, spec.max_episode_steps, spec.step_penalty)

        envs = gym.vector.SyncVectorEnv([make] * spec.num_envs)
        envs.reset(seed=seed)
        return envs
