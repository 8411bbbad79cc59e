"""Registers the offline environment builder and ``agile dataset`` (light: no h5py, gymnasium
or torch import here)."""

from __future__ import annotations

from agile_cli import Family, RegisterCommand, RegisterEnvironment, hookimpl
from agile_offline.command import dataset
from agile_offline.spec import OfflineEnvSpec


@hookimpl
def agile_register_environments(register: RegisterEnvironment) -> None:
    register(
        name="offline",
        spec=OfflineEnvSpec,
        families=[Family.OFFLINE],
        implementation="agile_offline.builder:OfflineBuilder",
    )


@hookimpl
def agile_register_commands(register: RegisterCommand) -> None:
    register(dataset)
