"""Multi-Agent Deep Deterministic Policy Gradient.

Lowe et al., "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive Environments",
NeurIPS 2017.
"""

from __future__ import annotations

from typing import cast

import torch

from agile_cli import CentralisedActorCritic, LearnResult, Transitions
from agile_maddpg.spec import MADDPGSpec


class MADDPG(CentralisedActorCritic):
    """Decentralised actors trained through centralised critics (Lowe et al., 2017).

    Every agent has its own actor, reading only its own observations, and its own critic
    ``Q_i(x, a_1, ..., a_n)`` reading every agent's observations ``x`` and actions, so the
    agents may differ in observation and action spaces. Acting, exploration and action scaling
    come from :class:`agile_cli.CentralisedActorCritic`.

    **Updates.** Critic ``i`` regresses onto ``r_i + gamma * (1 - terminated_i) * Q'_i(x',
    a'_1, ..., a'_n)`` with every next action from the target actors (greedy for Discrete
    agents). Actor ``i`` then climbs ``Q_i`` with its own action from its current policy and
    the other agents' actions from the batch, and the targets move ``tau`` of the way. All
    actors share one optimizer following ``lr_actor``, all critics one following
    ``lr_critic``; a team's loss is the sum of its agents'.
    """

    spec: MADDPGSpec

    def learn(self, batch: Transitions) -> LearnResult:
        # a multi-agent buffer samples observations and actions by agent
        agent_obs = cast("dict[str, torch.Tensor]", batch.obs)
        stored = cast("dict[str, torch.Tensor]", batch.actions)
        obs = self.joint_obs(agent_obs)
        taken = {agent: self.critic_action(agent, stored[agent]) for agent in self.agents}
        actions = torch.cat([taken[agent] for agent in self.agents], dim=1)
        loss = self.critic_loss(obs, actions, self.td_targets(batch))
        self.minimise(loss, self.critics)
        self.learn_counter += 1
        self.update_actors(agent_obs, obs, taken)
        self.soft_update_targets()
        return LearnResult(float(loss.detach()))
