"""The ``algorithm`` section of MADDPG: the centralised actor-critic fields of ``agile_cli``."""

from __future__ import annotations

from agile_rl import CentralisedActorCriticSpec


class MADDPGSpec(CentralisedActorCriticSpec):
    """Multi-Agent DDPG (Lowe et al., 2017): decentralised actors, centralised critics; each
    agent's actions may be Box or Discrete."""
