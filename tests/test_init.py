"""`agile init`: starter manifests that validate as written, for every registered algorithm."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from click.testing import Result
from pydantic import Field

from agile_cli import AlgorithmSpec, EnvironmentSpec, StarterValue, TrainingSpec, hookimpl
from agile_cli.host.plugins import installed_registry
from agile_cli.manifest import TrainingManifest
from agile_cli.starter import hyperparameter_bounds

from .plugins.toy_paradigm import ToyParadigmPlugin

REGISTRY = installed_registry()
ALGORITHMS = sorted(REGISTRY.algorithms)

Run = Callable[..., Result]


def _starter(run: Run, *args: str, host: Any = None) -> str:
    result = run("init", *args, host=host)
    assert result.exit_code == 0, result.output
    return result.output


def _read(text: str) -> str:
    """A starter's lines as one line, without comment marks: what a reader reads."""
    return " ".join(line.strip().lstrip("#").strip() for line in text.splitlines())


def _validated(text: str, tmp_path: Path) -> TrainingManifest:
    path = tmp_path / "starter.yaml"
    path.write_text(text, encoding="utf-8")
    manifest: TrainingManifest = TrainingManifest.get_validated(path, registry=REGISTRY)
    return manifest


def test_the_example_plugin_is_among_the_algorithms() -> None:
    assert "REINFORCE" in ALGORITHMS  # examples/agile-reinforce, installed with the dev setup


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_starter_validates_without_warnings(run: Run, tmp_path: Path, algorithm: str) -> None:
    text = _starter(run, algorithm)
    manifest = _validated(text, tmp_path)
    assert manifest.algorithm_name == algorithm
    assert manifest.warnings == ()
    checked = run("validate", str(tmp_path / "starter.yaml"))
    assert checked.exit_code == 0
    assert "warning" not in checked.output


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_starter_lists_the_mutable_hyperparameters(run: Run, algorithm: str) -> None:
    spec = REGISTRY.algorithms[algorithm].spec
    text = _starter(run, algorithm)
    data = yaml.safe_load(text)
    active = data["mutation"]["rl_hp_selection"] or {}
    assert set(active) == set(spec.default_mutable)
    others = set(spec.mutable_hyperparameters) - set(spec.default_mutable)
    for name in others:  # commented-out candidates
        assert f"# {name}: {{min: " in text
    for name, bounds in active.items():
        assert bounds["min"] <= getattr(spec(), name) <= bounds["max"]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_section_is_written(run: Run, algorithm: str) -> None:
    entry = REGISTRY.algorithms[algorithm]
    data = yaml.safe_load(_starter(run, algorithm))
    wanted = {"algorithm", "environment", "training", "network", "mutation",
              "tournament_selection"}  # fmt: skip
    if REGISTRY.paradigm(entry.family).uses_replay_buffer:
        wanted.add("replay_buffer")
    assert set(data) == wanted


def test_comments_carry_the_descriptions(run: Run) -> None:
    text = _starter(run, "DQN")
    spec = REGISTRY.algorithms["DQN"].spec
    lines = text.splitlines()
    position = lines.index("  lr: " + yaml.safe_dump(spec().lr).split("\n")[0])
    assert lines[position - 1] == "  # " + spec.model_fields["lr"].description
    assert "# Transitions kept (alias memory_size)." in text  # replay_buffer.max_size
    assert "    # Width of each hidden layer.\n    hidden_size: [64]" in text  # nested head_config


def test_defaults_are_written_and_compatibility_fields_commented_out(run: Run) -> None:
    data = yaml.safe_load(_starter(run, "DQN"))
    defaults = REGISTRY.algorithms["DQN"].spec()
    for name, value in data["algorithm"].items():
        if name != "name":
            assert value == getattr(defaults, name), name
    assert data["training"]["pop_size"] == 4
    assert "standard_buffer" not in data["replay_buffer"]  # accepted for compatibility


def test_active_ranges_match_what_training_derives() -> None:
    from agile_cli.evolution.mutation import hyperparameter_ranges
    from agile_cli.models import MutationSpec

    spec = REGISTRY.algorithms["PPO"].spec
    derived = hyperparameter_ranges(MutationSpec(), spec())
    for name, expected in derived.items():
        bounds = hyperparameter_bounds(spec.model_fields[name], getattr(spec(), name))
        assert bounds["min"] == pytest.approx(expected.low)
        assert bounds["max"] == pytest.approx(expected.high)


def test_ranges_stay_within_the_field_bounds() -> None:
    spec = REGISTRY.algorithms["PPO"].spec
    gamma = hyperparameter_bounds(spec.model_fields["gamma"], 0.99)
    assert gamma["max"] <= 1  # gamma is at most 1: 0.99 * 10 would not validate
    assert gamma["min"] == pytest.approx(0.099)


def test_mutations_the_members_cannot_undergo_weigh_zero(run: Run) -> None:
    data = yaml.safe_load(_starter(run, "GRPO"))  # LLM members mutate hyperparameters only
    weights = data["mutation"]["probabilities"]
    assert weights["arch_mut"] == weights["params_mut"] == weights["act_mut"] == 0
    assert weights["rl_hp_mut"] > 0


def test_environment_defaults_per_family(run: Run) -> None:
    def name(algorithm: str) -> str:
        return str(yaml.safe_load(_starter(run, algorithm))["environment"]["name"])

    assert name("DQN") == "CartPole-v1"
    assert name("TD3") == "Pendulum-v1"  # Box actions only
    assert name("MADDPG") == "mpe2.simple_speaker_listener_v4"
    assert "Placeholder, replace it" in _starter(run, "CQN")  # the dataset is the user's


def test_an_explicit_environment_lands_in_the_section(run: Run, tmp_path: Path) -> None:
    text = _starter(run, "PPO", "Acrobot-v1")
    assert yaml.safe_load(text)["environment"]["name"] == "Acrobot-v1"
    assert _validated(text, tmp_path).environment.name == "Acrobot-v1"


@pytest.mark.parametrize(
    ("algorithm", "environment", "needed", "fitting"),
    [("TD3", "CartPole-v1", "Box", "Pendulum-v1, MountainCarContinuous-v0"),
     ("DQN", "Pendulum-v1", "Discrete", "CartPole-v1, Acrobot-v1")],
)  # fmt: skip
def test_an_environment_whose_actions_the_algorithm_refuses_is_a_usage_error(
    run: Run, tmp_path: Path, algorithm: str, environment: str, needed: str, fitting: str
) -> None:
    out = tmp_path / "starter.yaml"
    result = run("init", algorithm, environment, "--out", str(out))
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert said.startswith(f"error: {algorithm} cannot train on {environment} (")
    assert f"{needed} action" in said  # the algorithm's own words say what it needs
    assert f"give it an environment with {needed} actions, e.g. {fitting}" in said
    assert "Traceback" not in result.output
    assert not out.exists()


def test_an_algorithm_that_takes_both_kinds_of_actions_gets_its_starter(
    run: Run, tmp_path: Path
) -> None:
    manifest = _validated(_starter(run, "PPO", "Pendulum-v1"), tmp_path)  # PPO's own: CartPole
    assert manifest.environment.name == "Pendulum-v1"
    assert manifest.warnings == ()


def test_an_environment_that_cannot_be_built_to_check_leaves_a_note(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agile_cli.errors import EnvironmentNotFoundError
    from agile_cli.training import setup

    def missing(*args: Any, **kwargs: Any) -> Any:
        raise EnvironmentNotFoundError("Box2D is not installed", "pip install box2d")

    monkeypatch.setattr(setup, "build_environment", missing)
    result = run("init", "DDPG", "LunarLander-v3")
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout)["environment"]["name"] == "LunarLander-v3"
    assert result.stderr.startswith(
        "note: LunarLander-v3 could not be built here to check that DDPG takes its Discrete "
        "actions (its starter environment, Pendulum-v1, has Box ones): Box2D is not installed"
    )
    assert "agile validate --check-env" in result.stderr


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_starter_has_a_budget_a_first_run_finishes(run: Run, algorithm: str) -> None:
    training = yaml.safe_load(_starter(run, algorithm))["training"]
    assert training["max_steps"] <= 300_000  # not the default 1,000,000 per member


@pytest.mark.parametrize(
    ("args", "max_steps", "target_score"),
    [(["DQN"], 100_000, 475), (["TD3"], 50_000, -200), (["PPO", "Acrobot-v1"], 100_000, -100),
     (["MADDPG"], 100_000, None), (["GRPO"], 3_200, None), (["NeuralUCB"], 2_000, None)],
)  # fmt: skip
def test_budgets_fit_the_environment(
    run: Run, args: list[str], max_steps: int, target_score: float | None
) -> None:
    text = _starter(run, *args)
    training = yaml.safe_load(text)["training"]
    assert (training["max_steps"], training["target_score"]) == (max_steps, target_score)
    assert "(default 1,000,000; a first run's budget" in _read(text)


def test_an_unknown_environment_gets_a_modest_budget_to_raise(run: Run) -> None:
    text = _starter(run, "PPO", "MyEnv-v0")
    training = yaml.safe_load(text)["training"]
    assert (training["max_steps"], training["target_score"]) == (100_000, None)
    assert (
        "a modest first budget: agile has no figures for MyEnv-v0, so raise it, and set "
        "target_score" in _read(text)
    )


def test_a_misspelled_algorithm_is_a_usage_error(run: Run) -> None:
    result = run("init", "ppo")
    assert result.exit_code == 2
    assert "unknown algorithm 'ppo'" in result.output
    assert "did you mean 'PPO'?" in result.output
    assert "Traceback" not in result.output


def test_without_an_algorithm_it_lists_them(run: Run) -> None:
    result = run("init")
    assert result.exit_code == 0
    for algorithm in ALGORITHMS:
        assert f"  {algorithm} " in result.output


def test_out_writes_the_file_and_refuses_to_overwrite(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "ppo.yaml"
    assert run("init", "PPO", "--out", str(out)).exit_code == 0
    assert yaml.safe_load(out.read_text())["algorithm"]["name"] == "PPO"
    refused = run("init", "DQN", "--out", str(out))
    assert refused.exit_code == 2
    assert "--force" in refused.output
    assert yaml.safe_load(out.read_text())["algorithm"]["name"] == "PPO"  # untouched
    assert run("init", "DQN", "--out", str(out), "--force").exit_code == 0
    assert yaml.safe_load(out.read_text())["algorithm"]["name"] == "DQN"


def test_out_into_a_missing_folder_is_a_usage_error(run: Run, tmp_path: Path) -> None:
    result = run("init", "PPO", "--out", str(tmp_path / "no" / "such" / "ppo.yaml"))
    assert result.exit_code == 2
    assert "cannot write" in result.output


def test_init_is_a_core_command() -> None:
    from agile_cli.cli import CORE_COMMANDS

    assert "init" in CORE_COMMANDS


@pytest.mark.parametrize("args", [["PPO"], ["DQN", "Acrobot-v1"], ["PPO", "MyEnv-v0"]])
def test_init_imports_neither_torch_nor_gymnasium(args: list[str]) -> None:
    # an environment with the actions of the algorithm's own starter's, or an unknown one
    probe = (
        "import sys\n"
        "from agile_cli.cli import main\n"
        f"try:\n    main(['init', *{args!r}])\nexcept SystemExit:\n    pass\n"
        "print('HEAVY:', sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'gymnasium'}))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True)  # fmt: skip
    assert result.stdout.strip().splitlines()[-1] == "HEAVY: []"


class LegacySpec(AlgorithmSpec):
    """A made-up deterministic-policy algorithm, for Box action spaces."""

    lr: float = Field(default=1e-3, gt=0, le=1, description="Learning rate.")
    learn_step: int = Field(default=1, ge=1, description="Steps between updates.")
    gamma: float = Field(default=0.99, ge=0, le=1, description="Discount factor.")
    old_knob: int = Field(default=0, description="Accepted for compatibility; not read.")
    verbose: bool = Field(default=False, description="Print more.")
    mutable_hyperparameters: ClassVar[tuple[str, ...]] = ("lr", "batch_size")
    starter_environment: ClassVar[str | None] = "Pendulum-v1"
    default_mutable: ClassVar[tuple[str, ...]] = ("lr",)

    def manifest_warnings(self, manifest: Any) -> list[str]:
        # warns when the field is written at all, as some specs do for "set on purpose"
        return ["algorithm.verbose: not used yet"] if "verbose" in self.model_fields_set else []


class LegacyPlugin:
    @hookimpl
    def agile_register_algorithms(self, register: Any) -> None:
        register(name="Legacy", spec=LegacySpec, family="off_policy", implementation="x:Legacy")


class LevelSpec(EnvironmentSpec):
    """An environment builder that needs a field no default can fill."""

    name: str = Field(default="maze", description="Label.")
    level: int = Field(description="Level to play.")


class LevelPlugin:
    @hookimpl
    def agile_register_paradigms(self, register: Any) -> None:
        register(name="levels", implementation="x:Levels")

    @hookimpl
    def agile_register_algorithms(self, register: Any) -> None:
        register(name="Climber", spec=AlgorithmSpec, family="levels", implementation="x:Climber")

    @hookimpl
    def agile_register_environments(self, register: Any) -> None:
        register(name="levels", spec=LevelSpec, families=["levels"], implementation="x:Builder")


def test_a_third_party_algorithm_needs_no_extra_work(make_host, run: Run) -> None:
    host = make_host(("legacy", LegacyPlugin()))
    text = _starter(run, "Legacy", host=host)
    manifest = TrainingManifest.get_validated(yaml.safe_load(text), registry=host.registry)
    assert manifest.warnings == ()
    assert manifest.environment.name == "Pendulum-v1"  # its spec's starter_environment
    assert "  # old_knob: 0" in text and "  # verbose: false" in text  # commented out
    assert "    lr: {min: 0.0001, max: 0.01, " in text
    assert "    # batch_size: {min: 16, max: 256, " in text


def test_a_third_party_paradigm_s_starter_validates(make_host, run: Run) -> None:
    host = make_host(("toy-paradigm", ToyParadigmPlugin()))
    text = _starter(run, "Fitter", host=host)
    data = yaml.safe_load(text)
    assert data["training"]["samples_per_step"] == 8  # the paradigm's own training field
    assert data["mutation"]["rl_hp_selection"] == {}  # no default set: lr is a candidate only
    assert "    # lr: {min: " in text
    manifest = TrainingManifest.get_validated(data, registry=host.registry)
    assert manifest.warnings == ()


def test_a_starter_that_cannot_validate_says_why(make_host, run: Run) -> None:
    result = run("init", "Climber", host=make_host(("levels", LevelPlugin())))
    assert result.exit_code == 0
    assert "level: null" in result.stdout
    assert "Placeholder, replace it: required, fill it in" in result.stdout
    assert "note: does not validate as written: environment.level" in result.stderr


class ShelfSpec(EnvironmentSpec):
    """Items to stock, from a shelf file."""

    name: str = Field(description="Label.")
    shelf: str | None = Field(default=None, description="The shelf file.")
    aisle: int = Field(default=1, ge=1, description="Aisle to stock.")
    starter_values: ClassVar[Mapping[str, StarterValue]] = {
        "name": StarterValue("Pantry"),
        "shelf": StarterValue("data/shelf.csv", "your shelf file", placeholder=True),
    }


class StockingTraining(TrainingSpec):
    """The stocking paradigm's training section."""

    starter_values: ClassVar[Mapping[str, StarterValue]] = {
        "max_steps": StarterValue(500, "a first run's budget of shelves"),
    }


class StockerSpec(AlgorithmSpec):
    """A made-up algorithm that stocks shelves."""

    restock: int = Field(default=1, ge=1, description="Items restocked per step.")
    starter_values: ClassVar[Mapping[str, StarterValue]] = {
        "restock": StarterValue(3, "(default 1; a starter restocks three)"),
    }

    @classmethod
    def starter_sections(cls) -> dict[str, dict[str, StarterValue]]:
        return {"environment": {"aisle": StarterValue(7, "the aisle it was tuned on")}}


class StockingPlugin:
    @hookimpl
    def agile_register_paradigms(self, register: Any) -> None:
        register(name="stocking", implementation="x:Stocking", training=StockingTraining)

    @hookimpl
    def agile_register_algorithms(self, register: Any) -> None:
        register(name="Stocker", spec=StockerSpec, family="stocking", implementation="x:Stocker")

    @hookimpl
    def agile_register_environments(self, register: Any) -> None:
        register(name="shelves", spec=ShelfSpec, families=["stocking"], implementation="x:Shelves")


def test_a_third_party_plugin_s_specs_give_the_starter_values(make_host, run: Run) -> None:
    """Only the specs know these values: the core names no family, builder or plugin."""
    host = make_host(("stocking", StockingPlugin()))
    text = _starter(run, "Stocker", host=host)
    data = yaml.safe_load(text)
    assert data["environment"]["name"] == "Pantry"  # not the builder's name, a placeholder
    assert (data["environment"]["shelf"], data["environment"]["aisle"]) == ("data/shelf.csv", 7)
    assert data["algorithm"]["restock"] == 3
    assert data["training"]["max_steps"] == 500
    read = _read(text)
    assert "Placeholder, replace it: your shelf file" in read
    assert "the aisle it was tuned on" in read and "a starter restocks three" in read
    assert "(default 1,000,000; a first run's budget of shelves: raise it for a full run)" in read
    assert "an environment the builder knows" not in read
    manifest = TrainingManifest.get_validated(data, registry=host.registry)
    assert manifest.warnings == ()
