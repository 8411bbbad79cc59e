"""What the reference format writes and agile accepts: algorithm aliases, ``environment.version``,
the synonyms an unknown key's hint knows, and the docs' manifests the benchmark finds."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from pydantic import Field

from agile_cli import AlgorithmSpec, ManifestError, TrainingManifest, hookimpl
from agile_cli.training.run_folder import RunFolder

ROOT = Path(__file__).resolve().parents[1]
LSTM = {"encoder_config": {"arch": "lstm", "hidden_state_size": 16}}


def _manifest(algorithm: dict[str, Any], registry: Any = None, **sections: Any) -> Any:
    data = {"algorithm": algorithm, "environment": {"name": "CartPole-v1"}, **sections}
    return TrainingManifest.get_validated(data, registry=registry)


def _errors(data: dict[str, Any], registry: Any = None) -> list[tuple[str, str, str | None]]:
    with pytest.raises(ManifestError) as caught:
        TrainingManifest.get_validated(data, registry=registry)
    return [(error.path, error.message, error.hint) for error in caught.value.errors]


# -- algorithm aliases ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Recurrent PPO", "RecurrentPPO"])
def test_recurrent_ppo_names_mean_ppo_with_recurrent_true(name: str, tmp_path: Path) -> None:
    manifest = _manifest({"name": name}, network=LSTM)
    assert manifest.algorithm_name == "PPO" and manifest.algorithm.recurrent is True
    (warning,) = manifest.warnings
    assert warning.startswith(f"algorithm.name: '{name}' is read as PPO with recurrent: true")
    assert "write name: PPO, recurrent: true" in warning
    folder = RunFolder.create(manifest, tmp_path / "run")
    written = yaml.safe_load(folder.manifest.read_text())["algorithm"]
    assert written["name"] == "PPO" and written["recurrent"] is True
    again = TrainingManifest.get_validated(yaml.safe_load(folder.manifest.read_text()))
    assert again.algorithm_name == "PPO" and not again.warnings


def test_an_alias_with_its_implied_field_written_out_is_accepted() -> None:
    manifest = _manifest({"name": "Recurrent PPO", "recurrent": True}, network=LSTM)
    assert manifest.algorithm.recurrent is True and len(manifest.warnings) == 1


def test_an_alias_contradicted_by_its_field_is_refused() -> None:
    data = {"algorithm": {"name": "RecurrentPPO", "recurrent": False}, "environment": "CartPole-v1"}
    ((path, message, hint),) = _errors(data)
    assert path == "algorithm.recurrent"
    assert message == "false contradicts algorithm.name 'RecurrentPPO' (PPO with recurrent: true)"
    assert hint == "write name: PPO to keep recurrent: false, or remove recurrent"


def test_rainbow_dqn_with_a_space_is_rainbow_dqn() -> None:
    manifest = _manifest({"name": "Rainbow DQN", "num_atoms": 11})
    assert manifest.algorithm_name == "RainbowDQN" and manifest.algorithm.num_atoms == 11
    assert manifest.to_dict()["algorithm"]["name"] == "RainbowDQN"
    assert manifest.warnings == (
        "algorithm.name: 'Rainbow DQN' is read as RainbowDQN; write name: RainbowDQN "
        "(the run folder's manifest.yaml says so)",
    )


def test_a_misspelt_alias_suggests_the_canonical_name() -> None:
    data = {"algorithm": {"name": "Rainbw DQN"}, "environment": "CartPole-v1"}
    assert _errors(data) == [
        ("algorithm.name", "unknown algorithm 'Rainbw DQN'", "did you mean 'RainbowDQN'?")
    ]


class BarSpec(AlgorithmSpec):
    """A made-up algorithm for these tests."""

    learn_step: int = Field(4, ge=1, description="Steps between updates.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    fancy: bool = Field(False, description="A mode a spelling implies.")
    mutable_hyperparameters: ClassVar[tuple[str, ...]] = ("batch_size",)


def _bar_plugin(aliases: Any, name: str = "Bar") -> object:
    class BarPlugin:
        @hookimpl
        def agile_register_algorithms(self, register: Any) -> None:
            register(name=name, spec=BarSpec, family="on_policy", implementation="x:Bar",
                     aliases=aliases)  # fmt: skip

    return BarPlugin()


def test_a_third_party_plugin_registers_aliases(make_host) -> None:
    registry = make_host(("bar", _bar_plugin({"Fancy Bar": {"fancy": True}, "bar": {}}))).registry
    fancy = _manifest({"name": "Fancy Bar"}, registry=registry)
    assert fancy.algorithm_name == "Bar" and fancy.algorithm.fancy is True
    plain = _manifest({"name": "bar"}, registry=registry)
    assert plain.algorithm_name == "Bar" and plain.algorithm.fancy is False
    assert registry.algorithm_aliases["Fancy Bar"].plugin == "bar"


@pytest.mark.parametrize(
    ("aliases", "name", "said"),
    [
        ({"PPO": {}}, "Bar", "algorithm name 'PPO' is registered by both"),
        ({"Rainbow DQN": {}}, "Bar", "algorithm name 'Rainbow DQN' is registered by both"),
        ({}, "Recurrent PPO", "algorithm name 'Recurrent PPO' is registered by both"),
        ({"Bar2": {"speed": 3}}, "Bar", "implies 'speed', which is not a field of BarSpec"),
        ({"Bar2": True}, "Bar", "must map to the fields it implies"),
        ({"Bar": {}}, "Bar", "alias 'Bar' is not another name"),
    ],
)
def test_bad_or_taken_aliases_drop_the_plugin(make_host, aliases, name, said) -> None:
    host = make_host(("bar", _bar_plugin(aliases, name)))
    info = next(i for i in host.plugins if i.name == "bar")
    assert info.error is not None and said in info.error
    assert "Bar" not in host.registry.algorithms  # nothing half-registered
    assert host.registry.algorithm_aliases["Rainbow DQN"].canonical == "RainbowDQN"


# -- environment.version ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("algorithm", "environment"),
    [("PPO", "CartPole-v1"), ("IPPO", "mpe2.simple_spread_v3")],
)
def test_every_builder_accepts_an_arena_version(algorithm: str, environment: str) -> None:
    data = {"algorithm": {"name": algorithm}, "environment": {"name": environment}}
    data["environment"]["version"] = "v2"
    manifest = TrainingManifest.get_validated(data)
    assert manifest.environment.version == "v2"
    assert manifest.to_dict()["environment"]["version"] == "v2"
    assert any(w.startswith("environment.version: only Arena reads it") for w in manifest.warnings)
    del data["environment"]["version"]
    unversioned = TrainingManifest.get_validated(data)
    assert "version" not in unversioned.to_dict()["environment"]
    assert not unversioned.warnings


def test_a_version_written_as_a_number_is_read_as_the_text_arena_takes() -> None:
    manifest = _manifest({"name": "PPO"}, environment={"name": "CartPole-v1", "version": 3})
    assert manifest.environment.version == "3"


@pytest.mark.parametrize("version", [True, 1.5, [1]])
def test_a_version_must_be_text_or_a_whole_number(version: Any) -> None:
    data = {"algorithm": {"name": "PPO"}, "environment": {"name": "merge-env", "version": version}}
    ((path, _message, _hint),) = _errors(data)
    assert path == "environment.version"


# -- synonyms in "did you mean" --------------------------------------------------------------


@pytest.mark.parametrize(
    ("algorithm", "section", "key", "hint"),
    [
        ("PPO", "algorithm", "learning_rate", "did you mean 'lr'?"),
        ("DDPG", "algorithm", "learning_rate", "did you mean 'lr_actor' or 'lr_critic'?"),
        ("DQN", "algorithm", "discount", "did you mean 'gamma'?"),
        ("PPO", "algorithm", "n_epochs", "did you mean 'update_epochs'?"),
        ("PPO", "algorithm", "clip_range", "did you mean 'clip_coef'?"),
        ("DQN", "replay_buffer", "buffer_size", "did you mean 'max_size'?"),
        ("DQN", "training", "total_timesteps", "did you mean 'max_steps'?"),
        ("DQN", "algorithm", "learn_stp", "did you mean 'learn_step'?"),  # typos as before
    ],
)
def test_unknown_keys_suggest_what_they_mean(algorithm, section, key, hint) -> None:
    data: dict[str, Any] = {"algorithm": {"name": algorithm}, "environment": "Pendulum-v1"}
    data.setdefault(section, {})[key] = 1
    assert _errors(data) == [(f"{section}.{key}", "unknown field", hint)]


# -- the benchmark's docs manifests ----------------------------------------------------------


def _benchmark() -> Any:
    spec = importlib.util.spec_from_file_location(
        "reference_manifests", ROOT / "benchmarks" / "reference_manifests.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("reference_manifests", module)
    spec.loader.exec_module(module)
    return module


RST = """Intro

.. code-block:: yaml
   :caption: manifest.yaml

   algorithm:
     name: DQN

   environment:
     name: CartPole-v1
After the block.

.. collapse:: More

   .. code-block:: python

      print("not yaml")

   .. code-block:: yml

      training: {max_steps: 10}

Text
"""
MD = """# Title

```yaml
algorithm: {name: PPO}
environment: CartPole-v1
```

```python
x
```
"""


def test_benchmark_finds_the_yaml_blocks_of_docs(tmp_path: Path, capsys) -> None:
    benchmark = _benchmark()
    blocks = benchmark.yaml_blocks(RST)
    assert [yaml.safe_load(block) for block in blocks] == [
        {"algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1"}},
        {"training": {"max_steps": 10}},
    ]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.rst").write_text(RST)
    (tmp_path / "README.md").write_text(MD)
    assert benchmark.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "OK       README.md#block-1\n" in out and "OK       docs/page.rst#block-1\n" in out
    assert "#block-2" not in out  # a training section alone is not a manifest
    assert "2 manifests (0 files, 2 blocks in docs): 2 OK, 0 refused" in out
