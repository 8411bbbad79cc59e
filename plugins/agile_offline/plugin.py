"""Registers the offline paradigm, its environment builder and ``agile dataset`` (light: no
h5py, gymnasium or torch import here; the specs are named by reference, imported when a
manifest needs them, and the command is imported when commands are asked for)."""

from __future__ import annotations

from agile_cli import RegisterCommand, RegisterEnvironment, RegisterParadigm, hookimpl
from agile_rl import check_architecture


@hookimpl
def agile_register_paradigms(register: RegisterParadigm) -> None:
    register(
        name="offline",
        implementation="agile_offline.runner:Offline",
        network="agile_rl.models.network:NetworkSpec",
        replay_buffer="agile_rl.models.replay_buffer:ReplayBufferSpec",
        training="agile_offline.spec:OfflineTraining",
        algorithm_fields={"gamma": float},
        check_architecture=check_architecture,
        description="learn from a fixed dataset copied into a replay buffer, without acting",
        step_unit="updates",
    )


@hookimpl
def agile_register_environments(register: RegisterEnvironment) -> None:
    register(
        name="offline",
        spec="agile_offline.spec:OfflineEnvSpec",
        families=["offline"],
        implementation="agile_offline.builder:OfflineBuilder",
    )


@hookimpl
def agile_register_commands(register: RegisterCommand) -> None:
    from agile_offline.command import dataset

    register(dataset)
