"""The ``environment`` section for single-agent (Gymnasium) algorithms."""

from __future__ import annotations

from agile_cli import GymnasiumEnvSpec


class GymEnvSpec(GymnasiumEnvSpec):
    """A vector of Gymnasium environments: a registered id (``config`` goes to
    ``gymnasium.make``) or your own callable."""
