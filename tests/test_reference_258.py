"""Manifests in agilerl 2.58's format, as its users write them and as it writes them back out:
agile reads them with the reference's meaning, and trains each one generation.

The corpus is ``tests/reference_258/``; ``benchmarks/check_reference_258.py`` checks that 2.58
itself validates every file of it (it needs a Python with ``agilerl==2.58.0``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agile_cli import ManifestError, TrainingManifest

ROOT = Path(__file__).resolve().parents[1]
CORPUS = sorted((ROOT / "tests" / "reference_258").glob("*.yaml"))


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def _validated(data: dict[str, Any]) -> TrainingManifest:
    return TrainingManifest.get_validated(data)


def _errors(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ManifestError) as caught:
        TrainingManifest.get_validated(data)
    return [(error.path, error.message) for error in caught.value.errors]


def test_the_corpus_covers_every_family_and_the_written_out_form() -> None:
    names = {_load(path)["algorithm"]["name"] for path in CORPUS}
    assert {"DQN", "Rainbow DQN", "PPO", "RecurrentPPO", "Recurrent PPO", "DDPG", "TD3",
            "MADDPG", "MATD3", "IPPO", "CQN", "NeuralUCB", "NeuralTS"} <= names  # fmt: skip
    assert len(CORPUS) >= 20
    assert len([path for path in CORPUS if path.name.startswith("payload_")]) >= 2


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_every_manifest_validates(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # data paths are relative to the repository, as 2.58 reads them
    manifest = _validated(_load(path))
    assert manifest.environment.env_type in ("gym", "offline", "bandit")


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_every_manifest_trains_one_generation(
    path: Path, run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    steps = min(_load(path)["training"]["evo_steps"], 256)  # one short generation
    folder = tmp_path / "run"
    budget = ["--set", f"training.max_steps={steps}", "--set", f"training.evo_steps={steps}",
              "--set", "training.eval_steps=64"]  # fmt: skip
    result = run("train", str(path), "--quiet", "--run-dir", str(folder), *budget)
    assert result.exit_code == 0, result.output
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["generation"] for line in lines] == [1]


# -- the meaning of the new spellings ------------------------------------------------------------


def _dqn(**environment: Any) -> dict[str, Any]:
    return {"algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1", **environment}}


def test_env_config_and_env_wrappers_are_config_and_wrappers() -> None:
    wrapper = "gymnasium.wrappers.TimeLimit"
    manifest = _validated(_dqn(env_config={"max_episode_steps": 50},
                               env_wrappers=[[wrapper, {"max_episode_steps": 40}]]))  # fmt: skip
    assert manifest.environment.config == {"max_episode_steps": 50}
    assert manifest.environment.wrappers == [(wrapper, {"max_episode_steps": 40})]
    assert ("environment.env_config", "given together with 'config', its other spelling") in (
        _errors(_dqn(config={}, env_config={}))
    )


def test_gymnasium_make_on_the_named_id_is_the_registered_environment() -> None:
    environment = _validated(_dqn(factory="gymnasium:make", entrypoint="CartPole-v1")).environment
    assert (environment.factory, environment.entrypoint) == (None, None)
    assert _validated(_dqn(entrypoint="CartPole-v1")).environment.entrypoint is None


def test_a_factory_builds_the_id_it_is_given(tmp_path: Path, run: Any, write: Any) -> None:
    maker = write("makers.py", "import gymnasium\n\ndef make(env_id, **kw):\n"
                  "    return gymnasium.make(env_id, **kw)\n")  # fmt: skip
    text = yaml.safe_dump({
        "algorithm": {"name": "DQN"},
        "environment": {"name": "CartPole-v1", "factory": "makers.py:make", "num_envs": 2,
                        "env_config": {"max_episode_steps": 20}, "path": str(maker.parent)},
        "training": {"max_steps": 64, "evo_steps": 64},
    })  # fmt: skip
    result = run("train", str(write("m.yaml", text)), "--quiet", "--run-dir", str(tmp_path / "r"))
    assert result.exit_code == 0, result.output


def test_an_entrypoint_id_other_than_the_name_needs_custom() -> None:
    data = _dqn(factory="gymnasium:make", entrypoint="Acrobot-v1")
    assert [path for path, _ in _errors(data)] == ["environment.entrypoint"]
    data["environment"]["custom"] = True
    assert _validated(data).environment.entrypoint == "Acrobot-v1"


def test_env_type_is_resolved_and_a_wrong_one_refused() -> None:
    assert _validated(_dqn()).environment.env_type == "gym"
    ((path, message),) = _errors(_dqn(env_type="offline"))
    assert path == "environment.env_type" and "'gym'" in message


@pytest.mark.parametrize("version", ["agilerl.com/v2", "v1"])
def test_an_api_version_other_than_the_reference_s_is_refused(version: str) -> None:
    assert [path for path, _ in _errors({"apiVersion": version, **_dqn()})] == ["apiVersion"]


def test_hpo_false_does_not_stop_evolution_as_in_the_reference() -> None:
    data = {**_dqn(), "training": {"hpo": False}, "mutation": {}, "tournament_selection": {}}
    assert _validated(data).evolves


def test_mutation_network_bounds_move_onto_the_network() -> None:
    data = {**_dqn(), "mutation": {"network": {"max_latent_dim": 96,
                                               "encoder": {"max_hidden_layers": 2}}}}  # fmt: skip
    network = _validated(data).network
    assert network.max_latent_dim == 96 and network.encoder_config.max_hidden_layers == 2


def test_mutation_network_bounds_that_are_not_mappings_are_field_errors() -> None:
    bounds = {"encoder": {"max_hidden_layers": 2}, "head_net": 5}
    data = {**_dqn(), "network": {"encoder_config": "mlp"}, "mutation": {"network": bounds}}
    paths = [path for path, _ in _errors(data)]
    assert paths == ["mutation.network.head_net", "network.encoder_config"]


def test_a_key_written_out_at_another_value_is_ignored_with_a_warning() -> None:
    quiet = _validated({**_dqn(), "training": {"eval_greedy": True}})
    loud = _validated({**_dqn(), "training": {"eval_greedy": False}})
    assert not [w for w in quiet.warnings if "eval_greedy" in w]
    assert [w for w in loud.warnings if w.startswith("training.eval_greedy: ignored")]


def test_max_seq_len_mutates_only_for_a_recurrent_policy() -> None:
    selection = {"rl_hp_selection": {"max_seq_len": {"min": 8, "max": 64}}}
    data = {"algorithm": {"name": "PPO"}, "environment": {"name": "CartPole-v1"},
            "mutation": selection}  # fmt: skip
    assert [path for path, _ in _errors(data)] == ["mutation.rl_hp_selection.max_seq_len"]
    data["algorithm"]["recurrent"] = True
    data["network"] = {"encoder_config": {"arch": "lstm", "hidden_state_size": 16}}
    assert "max_seq_len" in _validated(data).mutation.rl_hp_selection


def test_rollout_buffer_options_are_read_where_they_say_what_agile_does() -> None:
    ppo = {"algorithm": {"name": "PPO", "rollout_buffer_config": {"use_gae": True}},
           "environment": {"name": "CartPole-v1"}}  # fmt: skip
    assert _validated(ppo).algorithm.rollout_buffer_config == {"use_gae": True}
    ppo["algorithm"]["rollout_buffer_config"] = {"use_gae": False}
    assert [path for path, _ in _errors(ppo)] == ["algorithm.rollout_buffer_config"]


# -- the way back: agile validate --reference ---------------------------------------------------


def _nulls(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [k for k, v in value.items() if v is None] + [n for v in value.values()
                                                              for n in _nulls(v)]  # fmt: skip
    if isinstance(value, list):
        return [n for item in value for n in _nulls(item)]
    return []


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_the_reference_form_reads_back_to_the_same_manifest(
    path: Path, run: Any, write: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    result = run("validate", "--reference", str(path))
    assert result.exit_code == 0, result.output
    form = json.loads(result.stdout)
    assert next(iter(form)) == "apiVersion" and not _nulls(form)
    again = _validated(form).to_dict()
    noted = [line for line in result.stderr.splitlines() if "note:" in line]
    if not noted:  # a setting 2.58 cannot carry is left out, and said so
        assert again == _validated(_load(path)).to_dict()


def test_an_algorithm_2_58_lacks_has_no_reference_form(run: Any, write: Any) -> None:
    text = "algorithm: {name: SAC}\nenvironment: {name: Pendulum-v1}\n"
    result = run("validate", "--reference", str(write("sac.yaml", text)))
    assert result.exit_code == 2 and "agilerl 2.58 has no SAC" in result.stderr


def test_a_setting_2_58_cannot_carry_is_left_out_with_a_note(run: Any, write: Any) -> None:
    text = ("algorithm: {name: TD3, policy_noise: 0.3}\nenvironment: {name: Pendulum-v1}\n"
            "training: {max_steps: 1000}\n"
            "mutation: {dormant_threshold: null, preserve_function: false}\n")  # fmt: skip
    result = run("validate", "--reference", str(write("td3.yaml", text)))
    assert result.exit_code == 0, result.output
    written = json.loads(result.stdout)
    assert "policy_noise" not in written["algorithm"]
    assert "dormant_threshold" not in written["mutation"]
    assert "note: algorithm.policy_noise: 0.3 left out" in result.stderr
    # null turns off what 2.58 does by default: 2.58 will do it, and the note says so
    assert "note: mutation.dormant_threshold: null left out (agilerl 2.58 uses 0.01)" in (
        result.stderr
    )
    assert "note: mutation.preserve_function: False left out" in result.stderr


def test_cudagraphs_is_accepted_with_a_warning_that_it_is_not_used() -> None:
    quiet = _validated(_dqn())
    loud = _validated({**_dqn(), "algorithm": {"name": "DQN", "cudagraphs": True}})
    assert not [w for w in quiet.warnings if "cudagraphs" in w]
    assert [w for w in loud.warnings if w.startswith("algorithm.cudagraphs: not used")]


def test_the_2_58_default_threshold_applies_and_resets_are_on() -> None:
    assert _validated({**_dqn(), "mutation": {}}).mutation.dormant_threshold == 0.01
    written = _load(ROOT / "tests" / "reference_258" / "dqn_acrobot.yaml")
    assert _validated(written).mutation.dormant_threshold == 0.05


def test_an_entrypoint_reference_that_repeats_the_name_stays_a_reference() -> None:
    data = _dqn()
    data["environment"] = {"name": "gymnasium.envs.classic_control:CartPoleEnv",
                           "entrypoint": "gymnasium.envs.classic_control:CartPoleEnv"}  # fmt: skip
    environment = _validated(data).environment
    assert environment.entrypoint == "gymnasium.envs.classic_control:CartPoleEnv"


def test_a_factory_that_makes_no_environment_is_named(run: Any, write: Any) -> None:
    text = yaml.safe_dump({
        "algorithm": {"name": "DQN"},
        "environment": {"name": "CartPole-v1", "factory": "builtins:str", "num_envs": 2},
    })  # fmt: skip
    result = run("validate", "--check-env", str(write("m.yaml", text)))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "environment.factory: builtins:str returned a str" in result.output
