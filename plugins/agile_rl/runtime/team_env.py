"""The team's view of a multi-agent vector environment, which lets the evolution loop, the runners
and evaluation treat a team like one member."""

from __future__ import annotations

from typing import Any

import numpy as np

from agile_cli import MultiAgentVectorEnv


class TeamEnv:
    """A multi-agent vector environment seen as one team per copy.

    ``step`` returns the team's reward (the agents' rewards summed, or averaged when
    ``sum_scores`` is false) and ends a copy's episode when every agent is done, so the runners'
    episode bookkeeping and evaluation work unchanged; the per-agent arrays travel in the
    infos as ``agent_rewards``, ``agent_terminated`` and ``agent_truncated``.
    """

    def __init__(self, env: MultiAgentVectorEnv, sum_scores: bool = True) -> None:
        self.env = env
        self.sum_scores = sum_scores
        self.num_envs = env.num_envs
        self.agents = list(env.agents)
        self.single_observation_spaces = dict(env.single_observation_spaces)
        self.single_action_spaces = dict(env.single_action_spaces)

    def reset(self, *, seed: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.env.reset(seed=seed)

    def step(self, actions: dict[str, Any]) -> tuple[Any, ...]:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        team_reward = np.sum([rewards[agent] for agent in self.agents], axis=0, dtype=np.float64)
        if not self.sum_scores:
            team_reward /= len(self.agents)
        all_terminated = np.all([terminated[agent] for agent in self.agents], axis=0)
        done = np.all([terminated[a] | truncated[a] for a in self.agents], axis=0)
        infos = dict(infos)
        infos.update(agent_rewards=rewards, agent_terminated=terminated, agent_truncated=truncated)
        return obs, team_reward, all_terminated, done & ~all_terminated, infos

    def render(self) -> Any:
        """The copies' frames, as the wrapped vector's ``render()`` gives them (None when it
        has none)."""
        render = getattr(self.env, "render", None)
        return None if render is None else render()

    def close(self) -> None:
        self.env.close()
