"""The ``environment`` section when ``builder: gridworld``."""

from __future__ import annotations

from pydantic import Field

from agile_cli import EnvironmentSpec


class GridWorldSpec(EnvironmentSpec):
    """A grid world read from ``<directory>/<name>.txt``."""

    name: str = Field(min_length=1, description="Map name: the file <directory>/<name>.txt.")
    directory: str = Field("gridworlds", description="Folder holding the map files.")
    num_envs: int = Field(8, ge=1, description="Copies stepped side by side.")
    max_episode_steps: int = Field(100, ge=1, description="Steps before an episode is cut.")
    step_penalty: float = Field(0.01, ge=0, description="Reward subtracted on every step.")
