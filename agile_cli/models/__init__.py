"""The manifest's core specs, for building a run from Python."""

from agile_cli.models.algorithm import AlgorithmSpec, EnvironmentSpec, Family
from agile_cli.models.base import Spec
from agile_cli.models.mutation import MutationProbabilities, MutationSpec, RLHyperparameter
from agile_cli.models.network import (
    CNNEncoderConfig,
    LSTMEncoderConfig,
    MLPConfig,
    MLPEncoderConfig,
    MultiInputEncoderConfig,
    NetworkSpec,
    SimBaEncoderConfig,
    StochasticNetworkSpec,
)
from agile_cli.models.replay_buffer import NStepBufferArgs, PERBufferArgs, ReplayBufferSpec
from agile_cli.models.selection import SelectionSpec, TournamentSelectionSpec
from agile_cli.models.training import TrainingSpec

__all__ = [
    "AlgorithmSpec",
    "CNNEncoderConfig",
    "EnvironmentSpec",
    "Family",
    "LSTMEncoderConfig",
    "MLPConfig",
    "MLPEncoderConfig",
    "MultiInputEncoderConfig",
    "MutationProbabilities",
    "MutationSpec",
    "NStepBufferArgs",
    "NetworkSpec",
    "PERBufferArgs",
    "RLHyperparameter",
    "ReplayBufferSpec",
    "SelectionSpec",
    "SimBaEncoderConfig",
    "Spec",
    "StochasticNetworkSpec",
    "TournamentSelectionSpec",
    "TrainingSpec",
]
