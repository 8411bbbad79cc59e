"""Multi-Agent Deep Deterministic Policy Gradient.

Lowe et al., "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive Environments",
NeurIPS 2017.
"""

from __future__ import annotations

from agile_maddpg.spec import MADDPGSpec
from agile_rl import CentralisedActorCritic


class MADDPG(CentralisedActorCritic):
    """Decentralised actors trained through centralised critics (Lowe et al., 2017).

    Every agent has its own actor, reading only its own observations, and its own critic
    ``Q_i(x, a_1, ..., a_n)`` reading every agent's observations ``x`` and actions, so the
    agents may differ in observation and action spaces. Acting, exploration and action scaling
    come from :class:`agile_rl.CentralisedActorCritic`.

    **Updates.** Critic ``i`` regresses onto ``r_i + gamma * (1 - terminated_i) * Q'_i(x',
    a'_1, ..., a'_n)`` with every next action from the target actors (greedy for Discrete
    agents). Actor ``i`` then climbs ``Q_i`` with its own action from its current policy and
    the other agents' actions from the batch, and the targets move ``tau`` of the way. All
    actors share one optimizer following ``lr_actor``, all critics one following
    ``lr_critic``; a team's loss is the sum of its agents'.
    """

    spec: MADDPGSpec
