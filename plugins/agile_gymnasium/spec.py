"""The ``environment`` section for single-agent (Gymnasium) algorithms."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from agile_cli import StarterValue
from agile_rl import GymnasiumEnvSpec


class GymEnvSpec(GymnasiumEnvSpec):
    """A vector of Gymnasium environments: a registered id (``config`` goes to
    ``gymnasium.make``) or your own callable."""

    #: An algorithm's ``starter_environment`` replaces it (Pendulum-v1 for Box actions only).
    starter_values: ClassVar[Mapping[str, StarterValue]] = {"name": StarterValue("CartPole-v1")}
