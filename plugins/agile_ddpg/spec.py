"""The ``algorithm`` section of DDPG: the deterministic actor-critic fields of ``agile_cli``."""

from __future__ import annotations

from agile_rl import DeterministicActorCriticSpec


class DDPGSpec(DeterministicActorCriticSpec):
    """Deep Deterministic Policy Gradient (Lillicrap et al., 2016), for Box action spaces."""
