"""The ``algorithm`` sections of NeuralUCB and NeuralTS, and the bandit ``environment`` section.

Light: pydantic and agile_cli only, so ``agile validate`` never imports torch for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, ClassVar

from pydantic import AliasChoices, Field, field_serializer, field_validator, model_validator

from agile_cli import AlgorithmSpec, EnvironmentSpec, StarterValue, TrainingSpec, limits
from agile_cli.helpers import check_entrypoint, located_error

TABLE_SUFFIXES = (".csv", ".parquet", ".pq", ".h5", ".hdf5")
IN_MEMORY_LABEL = "<in-memory table"


class _NeuralBanditSpec(AlgorithmSpec):
    """What NeuralUCB and NeuralTS share."""

    batch_size: int = Field(64, ge=1, le=limits.BATCH, description="Transitions per gradient step.")
    learn_step: int = Field(
        2,
        ge=1,
        le=limits.ITERATIONS,
        description="Gradient steps after each bandit step, once the buffer holds a batch.",
    )
    gamma: float = Field(
        1.0, gt=0, description="Exploration scale: multiplies the gradient-feature uncertainty."
    )
    lamb: float = Field(
        1.0, gt=0, description="Ridge regulariser: the exploration matrix starts at lamb * I."
    )
    reg: float = Field(
        6.25e-4, gt=0, description="Weight decay on the network parameters in the regression loss."
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr", "batch_size", "learn_step", "gamma", "lamb", "reg",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "batch_size", "learn_step")
    default_evo_steps: ClassVar[int] = 500


class NeuralUCBSpec(_NeuralBanditSpec):
    """Neural contextual bandit with upper-confidence-bound exploration (Zhou et al., 2020)."""

    lr: float = Field(1e-3, gt=0, description="Adam learning rate.")


class NeuralTSSpec(_NeuralBanditSpec):
    """Neural contextual bandit with Thompson-sampling exploration (Zhang et al., 2021)."""

    lr: float = Field(3e-3, gt=0, description="Adam learning rate.")


class BanditEnvSpec(EnvironmentSpec):
    """A contextual bandit: a labelled table (each class an arm) or your own bandit env."""

    reference_env_type: ClassVar[str | None] = "bandit"

    name: str = Field("BanditEnv", min_length=1, description="Label only.")
    features: Any = Field(
        None,
        description=(
            "Context table: a .csv, .parquet/.pq or .h5/.hdf5 file, relative to path (else the "
            "working directory); from Python also a numpy array or pandas DataFrame."
        ),
    )
    targets: Any = Field(
        None,
        description="One column of class labels, one per features row; each class is an arm.",
    )
    entrypoint: str | None = Field(
        None, description="'module:Callable' or 'file.py:Callable' returning a bandit env."
    )
    path: str | None = Field(
        None, description="Directory that entrypoint and table files are resolved from."
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("config", "env_config"),
        description="Keyword arguments for the entrypoint (alias env_config).",
    )

    starter_values: ClassVar[Mapping[str, StarterValue]] = {
        "name": StarterValue("Table"),
        "features": StarterValue(
            "data/features.csv", "a CSV table of context features", placeholder=True
        ),
        "targets": StarterValue(
            "data/targets.csv", "a CSV column of labels (one arm each)", placeholder=True
        ),
    }

    _entrypoint_shape = field_validator("entrypoint")(check_entrypoint)

    @field_validator("features", "targets")
    @classmethod
    def _table(cls, value: Any) -> Any:
        if value is None or is_in_memory(value):
            return value
        if not isinstance(value, str):
            raise ValueError(
                "must be a file path (.csv, .parquet, .pq, .h5, .hdf5); a numpy array or "
                "pandas table only from Python"
            )
        if value.startswith(IN_MEMORY_LABEL):
            raise ValueError(
                "an in-memory table is not saved with the run: pass the table again from "
                "Python, or give a file path"
            )
        suffix = PurePath(value).suffix.lower()
        if suffix not in TABLE_SUFFIXES:
            raise ValueError(
                f"unsupported file type {suffix or '(none)'!r}: use one of "
                + ", ".join(TABLE_SUFFIXES)
            )
        return value

    @model_validator(mode="after")
    def _one_mode(self) -> BanditEnvSpec:
        has_features, has_targets = self.features is not None, self.targets is not None
        if has_features and not has_targets:
            raise located_error(
                "targets", "required with environment.features", "add the labels table"
            )
        if has_targets and not has_features:
            raise located_error(
                "features", "required with environment.targets", "add the contexts table"
            )
        if has_features and self.entrypoint:
            raise located_error(
                "entrypoint", "given together with features and targets",
                "keep either the table (features, targets) or entrypoint",
            )  # fmt: skip
        if not has_features and not self.entrypoint:
            raise located_error(
                "features", "a bandit needs a labelled table or an entrypoint",
                "set features and targets, or entrypoint",
            )  # fmt: skip
        return self

    @field_serializer("features", "targets", when_used="json")
    def _describe(self, value: Any) -> Any:
        return describe_table(value)


def is_in_memory(value: Any) -> bool:
    """Whether ``value`` is a table given from Python: a numpy array or a pandas object."""
    module = type(value).__module__.split(".")[0]
    return module in ("numpy", "pandas") and hasattr(value, "shape")


def describe_table(value: Any) -> Any:
    """A path as is; an in-memory table as a short label (manifests on disk stay readable)."""
    if value is None or isinstance(value, str):
        return value
    shape = tuple(getattr(value, "shape", ()))
    return f"{IN_MEMORY_LABEL} {'x'.join(str(n) for n in shape) or '?'}>"


class BanditTraining(TrainingSpec):
    """The bandit paradigm's ``training`` fields."""

    episode_steps: int = Field(
        default=500,
        ge=1,
        le=limits.EPISODE_STEPS,
        description="Bandits only: steps per training episode.",
    )

    starter_values: ClassVar[Mapping[str, StarterValue]] = {
        "max_steps": StarterValue(2_000, "a first run's budget"),
    }
