"""Registers NeuralUCB, NeuralTS and the ``bandit`` environment builder (light: the
implementations are imported only to train)."""

from __future__ import annotations

from agile_bandits.spec import BanditEnvSpec, NeuralTSSpec, NeuralUCBSpec
from agile_cli import Family, RegisterAlgorithm, RegisterEnvironment, hookimpl


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="NeuralUCB",
        spec=NeuralUCBSpec,
        family=Family.BANDIT,
        implementation="agile_bandits.algorithm:NeuralUCB",
    )
    register(
        name="NeuralTS",
        spec=NeuralTSSpec,
        family=Family.BANDIT,
        implementation="agile_bandits.algorithm:NeuralTS",
    )


@hookimpl
def agile_register_environments(register: RegisterEnvironment) -> None:
    register(
        name="bandit",
        spec=BanditEnvSpec,
        families=[Family.BANDIT],
        implementation="agile_bandits.environment:BanditBuilder",
    )
