"""Registers the bandit paradigm, NeuralUCB, NeuralTS and the ``bandit`` environment builder
(light: the specs are named by reference, imported when a manifest needs them, and the
implementations are imported only to train)."""

from __future__ import annotations

from agile_cli import RegisterAlgorithm, RegisterEnvironment, RegisterParadigm, hookimpl
from agile_rl import check_architecture


@hookimpl
def agile_register_paradigms(register: RegisterParadigm) -> None:
    register(
        name="bandit",
        implementation="agile_bandits.runner:Bandit",
        network="agile_rl.models.network:NetworkSpec",
        replay_buffer="agile_rl.models.replay_buffer:ReplayBufferSpec",
        training="agile_bandits.spec:BanditTraining",
        algorithm_fields={"learn_step": int, "gamma": float},
        check_architecture=check_architecture,
        description="pull arms in episodes of episode_steps, learn from the shared buffer",
    )


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="NeuralUCB",
        spec="agile_bandits.spec:NeuralUCBSpec",
        family="bandit",
        implementation="agile_bandits.algorithm:NeuralUCB",
    )
    register(
        name="NeuralTS",
        spec="agile_bandits.spec:NeuralTSSpec",
        family="bandit",
        implementation="agile_bandits.algorithm:NeuralTS",
    )


@hookimpl
def agile_register_environments(register: RegisterEnvironment) -> None:
    register(
        name="bandit",
        spec="agile_bandits.spec:BanditEnvSpec",
        families=["bandit"],
        implementation="agile_bandits.environment:BanditBuilder",
    )
