"""The ``environment`` and ``training`` sections for offline algorithms (CQN)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field, model_validator

from agile_cli import StarterValue, TrainingSpec
from agile_cli.helpers import located_error
from agile_rl import GymnasiumEnvSpec


class OfflineEnvSpec(GymnasiumEnvSpec):
    """A Gymnasium environment to evaluate on, plus the fixed dataset to learn from."""

    reference_env_type: ClassVar[str | None] = "offline"

    minari_dataset_id: str | None = Field(
        None, min_length=1, description="Id of a Minari dataset already in the local Minari root."
    )
    dataset_path: str | None = Field(
        None,
        min_length=1,
        description=(
            "HDF5 file with datasets observations, actions, rewards, terminals (optional "
            "next_observations, timeouts); relative paths start at the working directory."
        ),
    )
    remote: bool = Field(
        False,
        description="Download a missing Minari dataset; refused: agile never downloads data.",
    )

    starter_values: ClassVar[Mapping[str, StarterValue]] = {
        "name": StarterValue("CartPole-v1"),
        "dataset_path": StarterValue(
            "data/dataset.h5",
            "an HDF5 dataset recorded on this environment, e.g. by "
            "`agile dataset collect RUN_DIR --out data/dataset.h5`",
            placeholder=True,
        ),
    }

    @model_validator(mode="after")
    def _one_source(self) -> OfflineEnvSpec:
        if (self.minari_dataset_id is None) == (self.dataset_path is None):
            raise located_error(
                "dataset_path",
                "give exactly one of minari_dataset_id or dataset_path",
                "dataset_path for a local HDF5 file, minari_dataset_id for a Minari dataset",
            )
        if self.remote:
            raise located_error(
                "remote",
                "agile does not download datasets",
                "run `minari download ID` on a machine with network, copy the dataset into "
                "this machine's Minari root, and drop remote",
            )
        return self


class OfflineTraining(TrainingSpec):
    """The offline paradigm's ``training`` section: the core's fields; ``max_steps`` counts
    updates."""

    starter_values: ClassVar[Mapping[str, StarterValue]] = {
        "max_steps": StarterValue(20_000, "a first run's budget"),
    }
