"""The manifest's core specs, for building a run from Python."""

from agile_cli.models.algorithm import AlgorithmSpec, EnvironmentSpec
from agile_cli.models.base import Spec
from agile_cli.models.mutation import MutationProbabilities, MutationSpec, RLHyperparameter
from agile_cli.models.selection import SelectionSpec, TournamentSelectionSpec
from agile_cli.models.training import TrainingSpec

__all__ = [
    "AlgorithmSpec",
    "EnvironmentSpec",
    "MutationProbabilities",
    "MutationSpec",
    "RLHyperparameter",
    "SelectionSpec",
    "Spec",
    "TournamentSelectionSpec",
    "TrainingSpec",
]
