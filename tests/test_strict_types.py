"""Strict types in every spec: a boolean is not a number, a string is not a number or a
boolean; an integral float is an integer and an integer is a float."""

from __future__ import annotations

import enum
from pathlib import Path

import numpy as np
import pytest
from pydantic import Field, ValidationError

from agile_cli import Spec, TrainingManifest
from agile_cli.models import TrainingSpec
from agile_cli.models.base import field_errors
from agile_gymnasium.spec import GymEnvSpec
from agile_local.spec import LocalOptions
from agile_rl import EpsilonGreedyTraining, MLPConfig

from .conftest import MINIMAL


def _errors(run, write, text: str) -> list[str]:
    result = run("validate", str(write("bad.yaml", text)))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return [line.strip() for line in result.output.splitlines()[1:]]


REFUSED = [
    ("training:\n  pop_size: true\n",
     "training.pop_size: expected an integer, got a boolean (got True)"),
    ("training:\n  max_steps: '5000'\n",
     "training.max_steps: expected an integer, got a string (got '5000'; write the number "
     "without quotes)"),
    ("training:\n  pop_size: 2.5\n",
     "training.pop_size: expected an integer, got a number with a fractional part (got 2.5)"),
    ("training:\n  eps_start: true\n",
     "training.eps_start: expected a number, got a boolean (got True)"),
    ("training:\n  eps_start: '0.5'\n",
     "training.eps_start: expected a number, got a string (got '0.5'; write the number "
     "without quotes)"),
    ("  double: 'yes'\n",
     "algorithm.double: expected true or false, got a string (got 'yes'; write true or false "
     "without quotes)"),
    ("  double: 1\n", "algorithm.double: expected true or false, got an integer (got 1)"),
    ("  name: 5\n", "environment.name: expected a string, got an integer (got 5)"),
    ("replay_buffer:\n  memory_size: '1e5'\n",
     "replay_buffer.memory_size: expected an integer, got a string (got '1e5'; write the "
     "number without quotes)"),
    ("network:\n  head_config:\n    hidden_size: [64, true]\n",
     "network.head_config.hidden_size[1]: expected an integer, got a boolean (got True)"),
    ("network:\n  head_config:\n    hidden_size: 64\n",
     "network.head_config.hidden_size: expected a list, got an integer (got 64)"),
    ("network:\n  head_config: [64]\n", "network.head_config: expected a mapping, got a list"),
    ("  wrappers: [5]\n",
     "environment.wrappers[0]: expected a string or a list, got an integer (got 5)"),
]  # fmt: skip


@pytest.mark.parametrize(("extra", "expected"), REFUSED, ids=[r[1].split(":")[0] for r in REFUSED])
def test_coercions_are_refused_with_a_readable_message(run, write, extra, expected) -> None:
    text = MINIMAL + extra
    if extra.startswith("  double"):
        text = MINIMAL.replace("  name: DQN\n", "  name: DQN\n" + extra)
    elif extra.startswith("  name"):
        text = MINIMAL.replace("  name: CartPole-v1\n", extra)
    assert expected in _errors(run, write, text)


def test_what_practitioners_write_is_accepted() -> None:
    manifest = TrainingManifest.get_validated(
        {
            "algorithm": {"name": "DQN", "lr": 1, "batch_size": 128.0},
            "environment": {
                "name": "CartPole-v1", "num_envs": 4.0,
                "wrappers": [["gymnasium.wrappers.TimeLimit", {"max_episode_steps": 1e2}]],
            },
            "training": {"max_steps": 1e6, "population_size": 2.0, "eps_end": 0},
            "network": {"arch": "mlp", "latent_dim": 32.0,
                        "encoder_config": {"hidden_size": [64.0, 32], "activation": "Tanh"}},
            "replay_buffer": {"memory_size": 1e5},
            "mutation": {"rl_hp_selection": {"lr": {"min": 1e-5, "max": 1}}},
        }
    )  # fmt: skip
    training = manifest.training
    assert (training.max_steps, training.pop_size) == (1_000_000, 2)
    assert type(training.max_steps) is int and type(training.pop_size) is int
    assert type(manifest.algorithm.lr) is float and manifest.algorithm.batch_size == 128
    assert type(manifest.algorithm.batch_size) is int
    assert type(training.eps_end) is float
    assert manifest.environment.num_envs == 4 and type(manifest.environment.num_envs) is int
    assert manifest.environment.wrappers == [
        ("gymnasium.wrappers.TimeLimit", {"max_episode_steps": 1e2})
    ]  # a list from YAML is the (target, kwargs) tuple; kwargs are passed as written
    assert manifest.network.encoder_config.hidden_size == [64, 32]
    assert manifest.network.encoder_config.activation == "Tanh"
    assert manifest.replay_buffer.max_size == 100_000
    assert manifest.mutation.rl_hp_selection["lr"].max == 1.0


def test_optional_fields_take_null() -> None:
    training = TrainingSpec.model_validate({"evo_steps": None, "target_score": None})
    assert training.evo_steps is None and training.target_score is None


def test_python_callers_may_pass_numpy_numbers_and_tuples() -> None:
    training = EpsilonGreedyTraining(
        pop_size=np.int64(3), max_steps=np.float64(1e4), eps_end=np.float32(0)
    )
    assert (training.pop_size, training.max_steps) == (3, 10_000)
    assert type(training.pop_size) is int and type(training.eps_end) is float
    assert MLPConfig(hidden_size=(32, 16)).hidden_size == [32, 16]
    with pytest.raises(ValidationError):
        TrainingSpec(pop_size=np.bool_(True))


def test_a_validated_manifest_cannot_change_in_place() -> None:
    manifest = TrainingManifest.get_validated(
        {"algorithm": {"name": "DQN"}, "environment": "CartPole-v1"}
    )
    changes = (("training", "evo_steps", 5), ("algorithm", "lr", 0.5),
               ("network", "latent_dim", 8), ("environment", "num_envs", 2))  # fmt: skip
    for section, field, value in changes:
        with pytest.raises(ValidationError, match="frozen"):
            setattr(getattr(manifest, section), field, value)
    with pytest.raises(ValidationError, match="frozen"):
        manifest.network.head_config.hidden_size = [8]  # nested sections too
    changed = manifest.training.model_copy(update={"evo_steps": 5})
    assert changed.evo_steps == 5 and manifest.training.evo_steps != 5


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


class PluginSpec(Spec):
    """A third-party plugin's spec: it only subclasses Spec and gets strict types."""

    colour: Colour = Field(Colour.RED, description="An enum.")
    where: Path = Field(Path("."), description="A path.")
    shape: tuple[int, ...] = Field((1,), description="A tuple.")
    pair: tuple[str, float] = Field(("a", 1.0), description="A fixed tuple.")
    sizes: dict[str, int] = Field(default_factory=dict, description="A mapping of integers.")
    count: int | None = Field(None, description="An optional integer.")
    ratio: float | str = Field(0.5, description="A number or a word.")


def test_a_plugin_spec_gets_strict_types_and_keeps_enums_paths_and_tuples() -> None:
    spec = PluginSpec.model_validate(
        {
            "colour": "green",
            "where": "data/x.h5",
            "shape": [2.0, 3],
            "pair": ["b", 2],
            "sizes": {"a": 4.0},
            "count": 7.0,
            "ratio": 3,
        }
    )
    assert spec.colour is Colour.GREEN and spec.where == Path("data/x.h5")
    assert spec.shape == (2, 3) and spec.pair == ("b", 2.0) and spec.sizes == {"a": 4}
    assert spec.count == 7 and spec.ratio == 3.0
    assert PluginSpec.model_validate({"colour": Colour.RED, "ratio": "half"}).ratio == "half"
    for bad, path, message in (
        ({"colour": "blue"}, "colour", "expected one of 'red', 'green', got a string"),
        ({"sizes": {"a": True}}, "sizes.a", "expected an integer, got a boolean"),
        ({"count": "7"}, "count", "expected an integer, got a string"),
        ({"shape": [1, "2"]}, "shape[1]", "expected an integer, got a string"),
        ({"where": 5}, "where", "expected a path, got an integer"),
    ):
        with pytest.raises(ValidationError) as excinfo:
            PluginSpec.model_validate(bad)
        (error,) = field_errors(excinfo.value, PluginSpec)
        assert (error.path, error.message) == (path, message)


def test_backend_options_validate_what_click_and_python_pass() -> None:
    options = LocalOptions.model_validate({"seed": 3, "checkpoint_steps": 1e3, "wb": True})
    assert (options.seed, options.checkpoint_steps, options.wb) == (3, 1000, True)
    with pytest.raises(ValidationError):
        LocalOptions.model_validate({"seed": "3"})


def test_gym_spec_keeps_config_values_as_written() -> None:
    spec = GymEnvSpec(name="CartPole-v1", config={"max_episode_steps": 5, "render_mode": None})
    assert spec.config == {"max_episode_steps": 5, "render_mode": None}
