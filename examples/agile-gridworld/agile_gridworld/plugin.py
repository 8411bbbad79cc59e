"""Registers the ``gridworld`` environment builder for single-agent algorithms."""

from __future__ import annotations

from agile_cli import Family, RegisterEnvironment, hookimpl
from agile_gridworld.spec import GridWorldSpec


@hookimpl
def agile_register_environments(register: RegisterEnvironment) -> None:
    register(
        name="gridworld",
        spec=GridWorldSpec,
        families=[Family.ON_POLICY, Family.OFF_POLICY],
        implementation="agile_gridworld.builder:GridWorldBuilder",
    )
