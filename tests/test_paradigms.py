"""Training paradigms are plugins: a third party adds one without touching agile's core."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agile_cli import RegisterAlgorithm, TrainingManifest, hookimpl
from agile_cli.host.plugins import build_host

from .conftest import MINIMAL
from .plugins.toy_paradigm import (
    FitterSpec,
    LineSpec,
    MalformedRunnerPlugin,
    NoPopulationPlugin,
    ToyParadigmPlugin,
)

REGRESSION = """\
algorithm: {name: Fitter, lr: 0.05}
environment: {name: line}
training: {max_steps: 300, evo_steps: 100, pop_size: 2, samples_per_step: 16}
mutation:
  probabilities: {no_mut: 0.5, rl_hp_mut: 0.5, arch_mut: 0, new_layer: 0, params_mut: 0, act_mut: 0}
  rl_hp_selection: {lr: {min: 0.01, max: 0.1}}
tournament_selection: {tournament_size: 2}
"""


@pytest.fixture
def toy_host(make_host):
    return make_host(("toy-paradigm", ToyParadigmPlugin()))


def test_the_toy_paradigm_trains_through_the_cli(toy_host, run, write, tmp_path: Path) -> None:
    manifest = write("fit.yaml", REGRESSION)
    run_dir = tmp_path / "fit"
    result = run("train", str(manifest), "--run-dir", str(run_dir), "--quiet", host=toy_host)
    assert result.exit_code == 0, result.output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["generations"] == 3
    # Its own runner trained and scored the members: minus the squared error of y = 2x, which
    # an untrained network gets wrong by about 4/3 on average over x in [-1, 1].
    assert -0.2 < summary["best_fitness"] <= 0.0
    resolved = (run_dir / "manifest.yaml").read_text()
    assert "samples_per_step: 16" in resolved
    # agile evaluate scores the elite as the paradigm does: there are no episodes to play.
    scored = run("evaluate", str(run_dir), "--episodes", "2", host=toy_host)
    assert scored.exit_code == 0, scored.output
    assert "Fitter member" in scored.output and "over 2 rounds (regression)" in scored.output
    fitness = float(scored.output.split("fitness ")[1].split()[0])
    assert -0.2 < fitness <= 0.0


def test_a_paradigm_s_runner_must_be_a_runner(make_host, run, write, tmp_path: Path) -> None:
    host = make_host(("bogus", MalformedRunnerPlugin()))
    manifest = write("bogus.yaml", "algorithm: {name: Bogus}\nenvironment: {name: line}\n")
    result = run("train", str(manifest), "--run-dir", str(tmp_path / "b"), "--quiet", host=host)
    assert result.exit_code == 1
    assert "the bogus paradigm's runner (tests.plugins.toy_paradigm:NotARunner)" in result.output
    assert "made a object, not an agile_cli.Runner" in result.output


def test_a_paradigm_without_population_is_named(make_host, run, write, tmp_path: Path) -> None:
    host = make_host(("unpopulated", NoPopulationPlugin()))
    manifest = write("lonely.yaml", "algorithm: {name: Lonely}\nenvironment: {name: line}\n")
    result = run("train", str(manifest), "--run-dir", str(tmp_path / "l"), "--quiet", host=host)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "(tests.plugins.toy_paradigm:RunnerOnly) does not implement population" in result.output
    assert "agile_rl.RLParadigm" in result.output


class NotAParadigm:
    """A registration whose implementation is a plain function, not a Paradigm subclass."""

    @hookimpl
    def agile_register_paradigms(self, register) -> None:
        register(name="bogus", implementation="tests.plugins.toy_paradigm:LineBuilder")

    @hookimpl
    def agile_register_algorithms(self, register) -> None:
        register(name="Bogus", spec=FitterSpec, family="bogus",
                 implementation="tests.plugins.toy_paradigm:Fitter")  # fmt: skip

    @hookimpl
    def agile_register_environments(self, register) -> None:
        register(name="bogus-line", spec=LineSpec, families=["bogus"],
                 implementation="tests.plugins.toy_paradigm:LineBuilder")  # fmt: skip


def test_an_implementation_that_is_not_a_paradigm_is_named(make_host, run, write, tmp_path) -> None:
    host = make_host(("bogus", NotAParadigm()))
    manifest = write("bogus.yaml", "algorithm: {name: Bogus}\nenvironment: {name: line}\n")
    result = run("train", str(manifest), "--run-dir", str(tmp_path / "b"), "--quiet", host=host)
    assert result.exit_code == 1
    assert "(tests.plugins.toy_paradigm:LineBuilder) is not an agile_cli.Paradigm" in result.output
    assert "Traceback" not in result.output


def test_the_paradigm_s_training_field_is_validated_with_its_path(toy_host, run, write) -> None:
    bad = write("bad.yaml", REGRESSION.replace("samples_per_step: 16", "samples_per_step: 0"))
    result = run("validate", str(bad), host=toy_host)
    assert result.exit_code == 2
    assert "training.samples_per_step: " in result.output


def test_another_paradigm_s_training_field_is_ignored_with_a_warning(toy_host, run, write) -> None:
    text = MINIMAL + "training:\n  samples_per_step: 4\n"
    result = run("validate", str(write("dqn.yaml", text)), host=toy_host)
    assert result.exit_code == 0, result.output
    assert "warning: training.samples_per_step: ignored, DQN does not read it" in result.output
    manifest = TrainingManifest.get_validated(
        {"algorithm": {"name": "DQN"}, "environment": "CartPole-v1",
         "training": {"samples_per_step": 4}},
        registry=toy_host.registry,
    )  # fmt: skip
    assert "samples_per_step" not in manifest.to_dict()["training"]


def test_a_misspelled_algorithm_is_the_only_error_for_its_training_fields(run, write) -> None:
    text = "algorithm: {name: DQNN}\nenvironment: CartPole-v1\ntraining: {eps_start: 0.5}\n"
    result = run("validate", str(write("m.yaml", text)))
    assert result.exit_code == 2
    assert (
        "1 error" in result.output and "algorithm.name: unknown algorithm 'DQNN'" in result.output
    )


def test_a_field_no_plugin_reads_is_still_an_error(run, write) -> None:
    result = run("validate", str(write("m.yaml", MINIMAL + "training:\n  sample_per_step: 4\n")))
    assert result.exit_code == 2
    assert "training.sample_per_step: unknown field" in result.output


def test_plugins_lists_the_paradigm(toy_host, run) -> None:
    result = run("plugins", host=toy_host)
    assert result.exit_code == 0
    assert "paradigm:regression" in result.output


def test_an_algorithm_of_a_missing_paradigm_loads_and_validate_names_it(
    make_host, run, write
) -> None:
    class Lost:
        @hookimpl
        def agile_register_algorithms(self, register: RegisterAlgorithm) -> None:
            register(name="Lost", spec=FitterSpec, family="regresion", implementation="x:Y")

    host = make_host(("lost", Lost()), ("toy-paradigm", ToyParadigmPlugin()))
    assert not host.failed  # like an algorithm whose environment builder is not installed
    result = run("validate", str(write("m.yaml", "algorithm: {name: Lost}\nenvironment: x\n")),
                 host=host)  # fmt: skip
    assert result.exit_code == 2
    assert (
        "algorithm.name: Lost trains by paradigm 'regresion', which no plugin registers "
        "(did you mean 'regression'?)"
    ) in result.output
    assert run("schema", host=host).exit_code == 0  # the schema still describes it


def test_first_party_paradigms_are_a_plugin_too() -> None:
    registry = build_host().registry
    owners = {"off_policy": "rl", "on_policy": "rl", "multi_agent_off_policy": "rl",
              "multi_agent_on_policy": "rl", "offline": "offline", "bandit": "bandits",
              "llm": "llm"}  # fmt: skip
    for family, plugin in owners.items():
        assert registry.paradigm(family).plugin == plugin
    assert registry.paradigm("off_policy").plugin == "rl"


@pytest.mark.parametrize(
    ("registration", "error"),
    [
        (
            {"implementation": "no_colon"},
            "paradigm 'broken': 'no_colon' is not a 'module:callable'",
        ),
        (
            {"implementation": "m:f", "training": dict},
            "'broken' comes with <class 'dict'>, not a subclass",
        ),
    ],
)
def test_a_malformed_paradigm_is_refused(make_host, registration: dict, error: str) -> None:
    class Broken:
        @hookimpl
        def agile_register_paradigms(self, register) -> None:
            register(name="broken", **registration)

    host = make_host(("broken", Broken()))
    info = next(info for info in host.plugins if info.name == "broken")
    assert info.status == "failed" and error in str(info.error)
    assert "broken" not in host.registry.paradigms
