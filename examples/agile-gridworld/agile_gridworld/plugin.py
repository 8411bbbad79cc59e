"""Registers the ``gridworld`` environment builder for single-agent algorithms.

Its spec is named by reference (``"module:Class"``), so registering it imports nothing: agile
imports the spec when a manifest uses this builder, and the builder only to train.
"""

from __future__ import annotations

from agile_cli import RegisterEnvironment, hookimpl


@hookimpl
def agile_register_environments(register: RegisterEnvironment) -> None:
    register(
        name="gridworld",
        spec="agile_gridworld.spec:GridWorldSpec",
        families=["on_policy", "off_policy"],
        implementation="agile_gridworld.builder:GridWorldBuilder",
    )
