"""`agile validate`: every shipped manifest passes, every mistake names its field."""

from __future__ import annotations

import json

import pytest

from agile_cli import ManifestError, TrainingManifest
from agile_cli.models import MutationProbabilities, MutationSpec, TrainingSpec

from .conftest import CONFIGS, MINIMAL


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.relative_to(p.parents[2]).as_posix())
def test_shipped_manifests_validate(run, path) -> None:
    result = run("validate", str(path))
    assert result.exit_code == 0, result.output
    assert ": ok (" in result.output


def test_brief_dqn_manifest_validates_with_its_values() -> None:
    brief = next(p for p in CONFIGS if p.name == "lunar_lander.yaml")
    manifest = TrainingManifest.get_validated(brief)
    assert manifest.algorithm_name == "DQN"
    assert manifest.algorithm.lr == pytest.approx(6.3e-4)
    assert manifest.environment.num_envs == 16
    assert manifest.training.pop_size == 4
    assert manifest.mutation.rl_hp_selection["lr"].min == pytest.approx(6.25e-5)
    assert manifest.evolves


def test_json_shows_every_default(run, write) -> None:
    result = run("validate", "--json", str(write("m.yaml", MINIMAL)))
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["algorithm"] == {
        "name": "DQN", "batch_size": 64, "normalize_images": True, "lr": 1e-4, "learn_step": 5,
        "gamma": 0.99, "tau": 3e-3, "double": True, "cudagraphs": False,
    }  # fmt: skip
    assert data["training"]["evo_steps"] == 10_000  # the algorithm's default, resolved
    assert data["training"]["eps_start"] == 1.0
    assert data["replay_buffer"]["max_size"] == 100_000  # off-policy: a buffer by default
    assert data["network"]["head_config"]["hidden_size"] == [64]
    assert data["environment"]["num_envs"] == 16
    assert "mutation" not in data and "tournament_selection" not in data


def test_json_output_round_trips_to_the_same_manifest(run, write) -> None:
    first = run("validate", "--json", str(CONFIGS[0])).output
    again = write("again.json", first)
    assert json.loads(run("validate", "--json", str(again)).output) == json.loads(first)


def test_evo_steps_default_is_capped_at_max_steps() -> None:
    data = {"algorithm": {"name": "PPO"}, "environment": {"name": "CartPole-v1"},
            "training": {"max_steps": 500}}  # fmt: skip
    assert TrainingManifest.get_validated(data).evo_steps == 500


def _errors(run, write, text: str) -> list[str]:
    result = run("validate", str(write("bad.yaml", text)))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return [line.strip() for line in result.output.splitlines()[1:]]


MISTAKES = [
    ("training:\n  evo_step: 5\n", "training.evo_step: unknown field (did you mean 'evo_steps'?)"),
    ("  num_env: 2\n",
     "environment.num_env: unknown field (did you mean 'num_envs'?)"),
    ("network:\n  head_config:\n    hidden_sise: [64]\n",
     "network.head_config.hidden_sise: unknown field (did you mean 'hidden_size'?)"),
    ("network:\n  latnt_dim: 3\n", "network.latnt_dim: unknown field (did you mean 'latent_dim'?)"),
    ("mutation:\n  probabilities:\n    no_mutt: 0.1\n",
     "mutation.probabilities.no_mutt: unknown field (did you mean 'no_mut'?)"),
    ("replay_buffer:\n  n_step_buffer_args:\n    nstep: 2\n",
     "replay_buffer.n_step_buffer_args.nstep: unknown field (did you mean 'n_step'?)"),
    ("trainng: {}\n", "trainng: unknown section (did you mean 'training'?)"),
    ("tournament_selection:\n  tournament_size: 1\n",
     "tournament_selection.tournament_size: input should be greater than or equal to 2 (got 1)"),
    ("mutation:\n  rl_hp_selection:\n    lr: {min: 0.1, max: 0.01}\n",
     "mutation.rl_hp_selection.lr.max: 0.01 is below min (0.1) (swap them)"),
    ("training:\n  max_steps: 100\n  evo_steps: 200\n",
     "training.evo_steps: 200 exceeds max_steps (100)"),
    ("training:\n  pop_size: 2\n  population_size: 2\n",
     "training.population_size: given together with 'pop_size', its other spelling "
     "(keep only one)"),
    ("training:\n  eps_start: 0.1\n  eps_end: 0.5\n",
     "training.eps_end: 0.5 is above eps_start (0.1)"),
    ("network:\n  encoder_config:\n    hidden_size: [4]\n",
     "network.encoder_config.hidden_size: 4 is outside [8, 500] "
     "(change it or widen min_mlp_nodes/max_mlp_nodes)"),
    ("network:\n  arch: cnn\n  encoder_config:\n    channel_size: [16]\n    kernel_size: [3, 3]\n",
     "network.encoder_config.kernel_size: channel_size, kernel_size and stride_size differ "
     "in length (give one entry per layer in each)"),
    ("training:\n  pop_size: many\n",
     "training.pop_size: expected an integer, got a string (got 'many')"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "expected"), MISTAKES, ids=[m[1].split(":")[0] for m in MISTAKES]
)
def test_each_mistake_names_its_field(run, write, extra: str, expected: str) -> None:
    assert expected in _errors(run, write, MINIMAL + extra)


def test_unknown_hyperparameter_in_selection_lists_valid_ones(run, write) -> None:
    text = MINIMAL + "mutation:\n  rl_hp_selection:\n    learning_rate: {min: 0.1, max: 1}\n"
    (line,) = _errors(run, write, text)
    assert line.startswith("mutation.rl_hp_selection.learning_rate: DQN has no mutable")
    assert "mutable: lr, batch_size, learn_step, gamma, tau" in line


def test_hyperparameter_range_must_hold_valid_values(run, write) -> None:
    text = MINIMAL + "mutation:\n  rl_hp_selection:\n    batch_size: {min: 0.5, max: 8}\n"
    (line,) = _errors(run, write, text)
    assert line.startswith("mutation.rl_hp_selection.batch_size.min: ")


def test_unknown_algorithm_suggests_the_right_case(run, write) -> None:
    lines = _errors(run, write, "algorithm:\n  name: dqn\nenvironment:\n  name: CartPole-v1\n")
    assert lines == ["algorithm.name: unknown algorithm 'dqn' (did you mean 'DQN'?)"]


def test_missing_sections_are_reported_together(run, write) -> None:
    lines = _errors(run, write, "training:\n  pop_size: 0\n")
    assert "algorithm: required section is missing (e.g. algorithm: {name: DQN})" in lines
    assert (
        "environment: required section is missing (e.g. environment: {name: CartPole-v1})" in lines
    )
    assert "training.pop_size: input should be greater than or equal to 1 (got 0)" in lines


def test_recurrent_with_simba_is_refused(run, write) -> None:
    text = "algorithm:\n  name: PPO\n  recurrent: true\nenvironment: {name: CartPole-v1}\n"
    lines = _errors(run, write, text + "network:\n  simba: true\n")
    assert lines == ["network.simba: cannot be combined with algorithm.recurrent: true"]


def test_replay_buffer_for_on_policy_is_a_warning(run, write) -> None:
    text = "algorithm: {name: PPO}\nenvironment: {name: CartPole-v1}\nreplay_buffer: {}\n"
    result = run("validate", str(write("m.yaml", text)))
    assert result.exit_code == 0
    assert (
        "warning: replay_buffer: ignored, PPO (on_policy) takes no replay_buffer section"
        in result.output
    )


def test_several_files_one_line_each_and_exit_two_if_any_is_bad(run, write) -> None:
    good = write("good.yaml", MINIMAL)
    bad = write("bad.yaml", MINIMAL + "training: {max_steps: 0}\n")
    result = run("validate", str(good), str(bad), str(bad.with_name("missing.yaml")))
    assert result.exit_code == 2
    summary = "DQN on CartPole-v1, pop 1, 1,000,000 env steps per member, no evolution"
    assert f"{good}: ok ({summary})" in result.output
    assert f"{bad}: invalid, 1 error" in result.output
    assert "missing.yaml: invalid, 1 error" in result.output


def test_check_env_reports_an_unknown_environment(run, write) -> None:
    path = write("m.yaml", MINIMAL.replace("CartPole-v1", "CartPoles-v1"))
    assert run("validate", str(path)).exit_code == 0  # validation alone needs no environment
    result = run("validate", "--check-env", str(path))
    assert result.exit_code == 2
    assert "'CartPoles-v1' is not a registered Gymnasium environment" in result.output
    assert "did you mean 'CartPole-v1'?" in result.output


def test_check_env_resolves_a_file_entrypoint(run, write) -> None:
    write(
        "my_env.py",
        "import gymnasium as gym\n\ndef make(**kw):\n    return gym.make('CartPole-v1')\n",
    )
    path = write(
        "m.yaml", MINIMAL.replace("CartPole-v1", "Mine") + "  entrypoint: my_env.py:make\n"
    )
    text = path.read_text().replace("Mine\n", f"Mine\n  path: {path.parent}\n")
    path.write_text(text)
    result = run("validate", "--check-env", str(path))
    assert result.exit_code == 0, result.output
    missing = write("n.yaml", text.replace("my_env.py:make", "my_env.py:nope"))
    result = run("validate", "--check-env", str(missing))
    assert result.exit_code == 2 and "has no attribute 'nope'" in result.output


def test_python_api_accepts_the_brief_spelling() -> None:
    training = TrainingSpec(max_steps=5_000_000, evo_steps=10_000, population_size=6)
    assert training.pop_size == 6 and training.population_size == 6
    mutation = MutationSpec(probabilities=MutationProbabilities(no_mut=0.5, arch_mut=0.3))
    assert mutation.probabilities.rl_hp_mut == 0.2


def test_get_validated_json_mode_and_errors() -> None:
    data = TrainingManifest.get_validated(
        {"algorithm": {"name": "PPO"}, "environment": {"name": "CartPole-v1"}}, mode="json"
    )
    assert data["algorithm"]["learn_step"] == 2048 and "replay_buffer" not in data
    with pytest.raises(ManifestError) as excinfo:
        TrainingManifest.get_validated({"algorithm": {"name": "PPO"}})
    assert [e.path for e in excinfo.value.errors] == ["environment"]


SURELY_MISTAKES = [
    ("training:\n  pop_size: 1000000\n",
     "training.pop_size: input should be less than or equal to 1024 (got 1000000)"),
    ("training:\n  max_steps: 1e18\n",
     "training.max_steps: input should be less than or equal to 1000000000000 "
     "(got 1000000000000000000)"),
    ("training:\n  eval_loop: 100000\n",
     "training.eval_loop: input should be less than or equal to 1000 (got 100000)"),
    ("  num_envs: 10000\n",
     "environment.num_envs: input should be less than or equal to 4096 (got 10000)"),
    ("network:\n  head_config: {hidden_size: [1000000], max_mlp_nodes: 1000000}\n",
     "network.head_config.max_mlp_nodes: input should be less than or equal to 65536 "
     "(got 1000000)"),
    ("network:\n  latent_dim: 100000\n  max_latent_dim: 100000\n",
     "network.max_latent_dim: input should be less than or equal to 65536 (got 100000)"),
    ("network:\n  head_config: {max_hidden_layers: 1000}\n",
     "network.head_config.max_hidden_layers: input should be less than or equal to 64 "
     "(got 1000)"),
    ("network:\n  arch: cnn\n  encoder_config: {channel_size: [100000], kernel_size: [3], "
     "stride_size: [1], max_channel_size: 100000}\n",
     "network.encoder_config.max_channel_size: input should be less than or equal to 8192 "
     "(got 100000)"),
    ("network:\n  arch: cnn\n  encoder_config: {channel_size: [16], kernel_size: [0], "
     "stride_size: [1]}\n",
     "network.encoder_config.kernel_size[0]: input should be greater than or equal to 1 (got 0)"),
    ("replay_buffer:\n  max_size: 1e10\n",
     "replay_buffer.max_size: input should be less than or equal to 1000000000 "
     "(got 10000000000)"),
    ("replay_buffer:\n  n_step_buffer_args: {n_step: 100000}\n",
     "replay_buffer.n_step_buffer_args.n_step: input should be less than or equal to 1000 "
     "(got 100000)"),
    ("  batch_size: 1e8\n",
     "algorithm.batch_size: input should be less than or equal to 1048576 (got 100000000)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "expected"), SURELY_MISTAKES, ids=[m[1].split(":")[0] for m in SURELY_MISTAKES]
)
def test_values_that_are_surely_mistakes_are_refused(run, write, extra, expected) -> None:
    text = MINIMAL + extra  # an indented key goes under environment, the last section
    if extra.startswith("  batch_size"):
        text = MINIMAL.replace("  name: DQN\n", "  name: DQN\n" + extra)
    assert expected in _errors(run, write, text)


def test_bounds_are_generous_for_large_real_runs() -> None:
    manifest = TrainingManifest.get_validated(
        {
            "algorithm": {"name": "PPO", "learn_step": 1_048_576, "batch_size": 65_536},
            "environment": {"name": "CartPole-v1", "num_envs": 4096},
            "training": {"max_steps": 1e10, "pop_size": 64, "eval_loop": 100},
            "network": {"latent_dim": 1024, "max_latent_dim": 4096,
                        "head_config": {"hidden_size": [4096, 4096], "max_mlp_nodes": 8192}},
        }
    )  # fmt: skip
    assert manifest.training.max_steps == 10_000_000_000


def _paths(data: dict) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        TrainingManifest.get_validated(data)
    return [error.path for error in caught.value.errors]


def test_one_pass_reports_unknown_keys_with_a_section_s_own_rules() -> None:
    data = {"algorithm": {"name": "PPO"}, "environment": {"name": "CartPole-v1"},
            "training": {"max_steps": 100, "evo_steps": 200, "pop_sise": 2}}  # fmt: skip
    assert _paths(data) == ["training.pop_sise", "training.evo_steps"]


def test_one_pass_reports_unknown_keys_with_the_rules_across_sections() -> None:
    data = {
        "algorithm": {"name": "PPO", "lrr": 0.1, "recurrent": True, "batch_sise": 8},
        "environment": {"name": "CartPole-v1", "nmu_envs": 3},
        "network": {"simba": True},
    }
    paths = ["algorithm.lrr", "algorithm.batch_sise", "environment.nmu_envs", "network.simba"]
    assert _paths(data) == paths
