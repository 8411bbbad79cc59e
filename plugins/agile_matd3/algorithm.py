"""Multi-Agent Twin Delayed DDPG.

Ackermann et al., "Reducing Overestimation Bias in Multi-Agent Domains Using Double Centralized
Critics", 2019 (TD3's three changes, Fujimoto et al. 2018, applied to MADDPG).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from agile_matd3.spec import MATD3Spec
from agile_rl import CentralisedActorCritic, CentralisedActorCriticGroup

# Target-policy smoothing of Box agents' target actions, in [-1, 1] units (Fujimoto et al.'s
# values); Discrete agents' target actions stay greedy.
SMOOTHING_STD = 0.2
SMOOTHING_CLIP = 0.5


class MATD3Group(CentralisedActorCriticGroup["MATD3"]):
    """MATD3's targets for a group of members: smoothed target actions (each member's noise
    from its own generator, for its own rows) and the smaller of each agent's twin target
    critics."""

    def target_actions(self, next_obs: Mapping[str, Any], counts: Sequence[int]) -> torch.Tensor:
        columns = []
        for agent in self._agents():
            action = self.greedy(agent, self._target_out(next_obs, agent))
            if agent in self.members[0].boxes:
                noise = self.member_noise(action.shape, counts, _normal)
                noise = (noise * SMOOTHING_STD).clamp(-SMOOTHING_CLIP, SMOOTHING_CLIP)
                action = (action + noise).clamp(-1.0, 1.0)
            columns.append(action)
        return torch.cat(columns, dim=2)

    def next_values(self, next_obs: torch.Tensor, next_actions: torch.Tensor) -> dict[str, Any]:
        """The smaller of each agent's two target critics (clipped double Q)."""
        return {
            agent: torch.minimum(
                self.q_value(f"critic_1_target.{agent}", next_obs, next_actions),
                self.q_value(f"critic_2_target.{agent}", next_obs, next_actions),
            )
            for agent in self._agents()
        }


def _normal(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=generator)


class MATD3(CentralisedActorCritic):
    """MADDPG with two centralised critics per agent, delayed actor updates and smoothed
    targets (the frame of both is :class:`agile_rl.CentralisedActorCritic`; the targets are
    :class:`MATD3Group`'s).

    Both of agent ``i``'s critics regress onto ``r_i + gamma * (1 - terminated_i) *
    min(Q'_i1, Q'_i2)(x', a')``, where each Box agent's target action carries clipped Gaussian
    noise (std 0.2, clipped to 0.5); every ``policy_freq``-th learn call the actors climb their
    first critic and the targets follow. Both critics of every agent share one optimizer per
    critic index, following ``lr_critic``.
    """

    critics: ClassVar[tuple[str, ...]] = ("critic_1", "critic_2")
    group_learner = MATD3Group

    spec: MATD3Spec

    def actors_due(self) -> bool:
        """The delayed policy update: every ``policy_freq``-th learn call."""
        return self.learn_counter % self.spec.policy_freq == 0
