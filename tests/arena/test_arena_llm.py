"""LLM fine-tuning on Arena: `agile train m.yaml --backend arena` against the stand-in server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agile_arena.client import ArenaClient

KEY = "arena_pat_test_key"
SUBMIT = "/api/cli/v1/experiments/jobs/submit"
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
DATASET = "openai/gsm8k"
REWARD = b"def score(completion, answer, question):\n    return float(answer in completion)\n"

GRPO = f"""\
algorithm:
  name: GRPO
  group_size: 4
  max_output_tokens: 64
environment:
  env_type: reasoning
  dataset: {DATASET}
  prompt_template:
    system_0: "Answer with a number."
    user_1: "{{question}}"
  reward_file_path: reward.py
  reward_fn_name: score
  max_reward: 1.0
training:
  max_steps: 64
  eval_rows: 8
network:
  pretrained_model_name_or_path: {MODEL}
  max_context_length: 256
  lora_config:
    lora_r: 8
    lora_alpha: 16
"""

DPO = f"""\
algorithm: {{name: DPO}}
environment: {{dataset: my-preferences}}
network: {{pretrained_model_name_or_path: {MODEL}}}
"""

SFT = f"""\
algorithm: {{name: SFT}}
environment: {{dataset: my-demonstrations, response_column: target}}
network: {{pretrained_model_name_or_path: {MODEL}, max_context_length: 128}}
"""


@pytest.fixture
def keyed(arena_env, monkeypatch, tmp_path):
    """The stand-in with an API key, an LLM project and the datasets; run from ``tmp_path``."""
    monkeypatch.setenv("ARENA_API_KEY", KEY)
    monkeypatch.chdir(tmp_path)
    arena_env.add_project("llm", type="LLM")
    arena_env.state.datasets.update({DATASET, "my-preferences", "my-demonstrations"})
    return arena_env


@pytest.fixture
def grpo(tmp_path) -> Path:
    """A GRPO manifest and its reward file, in the working directory."""
    (tmp_path / "reward.py").write_bytes(REWARD)
    manifest = tmp_path / "grpo.yaml"
    manifest.write_text(GRPO)
    return manifest


def _train(run, manifest: Path, *options: str):
    return run("train", str(manifest), "--backend", "arena", *options)


def _no_request_sent(server) -> None:
    assert [r for r in server.requests if r.path.startswith("/api/")] == []


def test_a_reasoning_job_sends_its_manifest_and_reward_file_as_a_form(run, keyed, grpo) -> None:
    result = _train(run, grpo, "--project", "llm", "--experiment-name", "grpo-run")
    assert result.exit_code == 0, result.output
    assert "submitted experiment 'grpo-run' to project 'llm'" in result.output
    (request,) = keyed.requests_to("POST", SUBMIT)
    assert request.headers["content-type"].startswith("multipart/form-data")
    assert request.json is None
    upload = request.files["reward_file"]
    assert (upload.filename, upload.data, upload.content_type) == (
        "reward.py",
        REWARD,
        "text/x-python",
    )
    form = request.form
    assert (form["project"], form["resource_id"], form["num_nodes"]) == ("llm", "arena-medium", "2")
    assert form["experiment_name"] == "grpo-run" and "completion" not in form
    manifest = json.loads(form["manifest"])
    assert manifest["environment"] == {
        "name": DATASET,
        "env_type": "reasoning",
        "prompt_template": {"system_0": "Answer with a number.", "user_1": "{question}"},
        "max_reward": 1.0,
        "train_test_split": 0.9,
        "reward_fn_name": "score",
        "response_column": "response",
        "reward_file_path": "reward.py",
    }
    assert manifest["network"] == {
        "pretrained_model_name_or_path": MODEL,
        "max_context_length": 256,
        "lora_config": {
            "lora_r": 8,
            "lora_alpha": 16,
            "target_modules": "all-linear",
            "task_type": "CAUSAL_LM",
            "lora_dropout": 0.05,
        },
    }


def test_the_reasoning_payload_holds_only_what_arena_reads(run, keyed, grpo) -> None:
    result = _train(run, grpo, "--project", "llm")
    assert result.exit_code == 0, result.output
    (request,) = keyed.requests_to("POST", SUBMIT)
    manifest = json.loads(request.form["manifest"])
    algorithm = manifest["algorithm"]
    assert next(iter(algorithm)) == "name" and algorithm["name"] == "GRPO"
    assert algorithm["group_size"] == 4
    assert algorithm["pretrained_model_name_or_path"] == MODEL
    assert algorithm["max_model_len"] == 256
    for agile_only in ("max_output_tokens", "micro_batch_size_per_gpu", "adv_norm", "lora_config"):
        assert agile_only not in algorithm
    assert "eval_rows" not in manifest["training"] and manifest["training"]["max_steps"] == 64
    assert "adapter_path" not in manifest["network"]
    assert "algorithm.max_output_tokens: never sent" in result.output
    assert "training.eval_rows: agile only, not sent to Arena" in result.output
    assert "warning: project" not in result.output


@pytest.mark.parametrize(
    ("text", "algorithm", "environment"),
    [
        (
            DPO,
            "DPO",
            {
                "name": "my-preferences",
                "env_type": "preference",
                "train_test_split": 0.9,
                "response_column": "response",
            },
        ),
        (
            SFT,
            "SFT",
            {
                "name": "my-demonstrations",
                "env_type": "sft",
                "train_test_split": 0.9,
                "response_column": "target",
            },
        ),
    ],
)
def test_preference_and_sft_jobs_submit_json_without_a_file(
    run, keyed, write, text, algorithm, environment
) -> None:
    result = _train(run, write("m.yaml", text), "--project", "llm")
    assert result.exit_code == 0, result.output
    (request,) = keyed.requests_to("POST", SUBMIT)
    assert request.headers["content-type"].startswith("application/json")
    assert request.files == {} and request.form == {}
    manifest = request.json["manifest"]
    assert manifest["algorithm"]["name"] == algorithm
    assert manifest["environment"] == environment
    assert manifest["network"]["pretrained_model_name_or_path"] == MODEL
    assert request.json["project"] == "llm"


def test_a_job_in_a_simulation_project_is_sent_with_a_warning(run, keyed, grpo) -> None:
    result = _train(run, grpo, "--project", "demo")
    assert result.exit_code == 0, result.output
    assert "warning: project 'demo' is a 'Classic RL' project" in result.output
    assert "--llm-based" in result.output
    assert keyed.count("POST", SUBMIT) == 1


def test_an_adapter_path_is_refused_before_any_request(run, keyed, grpo) -> None:
    grpo.write_text(GRPO.replace("  max_context_length: 256\n", "  adapter_path: runs/elite\n"))
    result = _train(run, grpo, "--project", "llm")
    assert result.exit_code == 2
    assert "network.adapter_path: a local LoRA adapter folder" in result.output
    assert "remove adapter_path" in result.output and "Traceback" not in result.output
    _no_request_sent(keyed)


@pytest.mark.parametrize("dataset", ["data/train.jsonl", "prompts.parquet", "owner/local"])
def test_a_local_dataset_is_refused_before_any_request(run, keyed, grpo, tmp_path, dataset) -> None:
    (tmp_path / "owner" / "local").mkdir(parents=True)  # a folder that is there, no suffix
    grpo.write_text(GRPO.replace(f"dataset: {DATASET}", f"dataset: {dataset}"))
    result = _train(run, grpo, "--project", "llm")
    assert result.exit_code == 2, result.output
    assert f"environment.dataset: '{dataset}' is a local file" in result.output
    assert "arena datasets create NAME --category reasoning" in result.output
    _no_request_sent(keyed)


def test_a_local_model_folder_is_refused_before_any_request(run, keyed, grpo, tmp_path) -> None:
    (tmp_path / "models" / "tiny-llm").mkdir(parents=True)
    grpo.write_text(GRPO.replace(MODEL, "models/tiny-llm"))
    result = _train(run, grpo, "--project", "llm")
    assert result.exit_code == 2, result.output
    assert "network.pretrained_model_name_or_path: 'models/tiny-llm' is a local model" in (
        result.output
    )
    _no_request_sent(keyed)


def test_a_missing_reward_file_names_the_path_tried(run, keyed, grpo, tmp_path) -> None:
    (tmp_path / "reward.py").unlink()
    result = _train(run, grpo, "--project", "llm")
    assert result.exit_code == 2
    assert f"reward file {tmp_path / 'reward.py'} not found" in result.output
    assert "Traceback" not in result.output
    _no_request_sent(keyed)


def test_a_reward_file_that_is_not_python_is_refused(run, keyed, grpo, tmp_path) -> None:
    (tmp_path / "reward.txt").write_bytes(REWARD)
    grpo.write_text(GRPO.replace("reward_file_path: reward.py", "reward_file_path: reward.txt"))
    result = _train(run, grpo, "--project", "llm")
    assert result.exit_code == 2
    assert f"reward file {tmp_path / 'reward.txt'} is not a .py file" in result.output
    _no_request_sent(keyed)


def test_a_huge_reward_file_is_refused(run, keyed, grpo, tmp_path) -> None:
    (tmp_path / "reward.py").write_bytes(REWARD + b"#" * (1024 * 1024))
    result = _train(run, grpo, "--project", "llm")
    assert result.exit_code == 2
    assert "over the 1,048,576 sent with a submission" in result.output
    _no_request_sent(keyed)


def test_a_resent_form_submits_once_with_the_same_file(run, keyed, grpo) -> None:
    keyed.inject("drop", path=SUBMIT, after_processing=True)
    result = _train(run, grpo, "--project", "llm")  # unnamed: resent, deduplicated by its key
    assert result.exit_code == 0, result.output
    assert [e.project for e in keyed.state.experiments].count("llm") == 1
    sends = keyed.requests_to("POST", SUBMIT)
    assert len(sends) == 2
    assert [r.files["reward_file"].data for r in sends] == [REWARD, REWARD]
    assert len({r.headers.get("idempotency-key") for r in sends}) == 1


def test_the_client_sends_reward_bytes_and_a_completion(keyed) -> None:
    manifest = {"algorithm": {"name": "GRPO"}, "environment": {"name": DATASET}}
    with ArenaClient(api_key=KEY) as client:
        result = client.submit_experiment(
            manifest, project="llm", reward_file=REWARD, completion="42"
        )
    assert result["accepted"] is True
    (request,) = keyed.requests_to("POST", SUBMIT)
    assert request.files["reward_file"].filename == "reward.py"
    assert request.form["completion"] == "42" and "resource_id" not in request.form
    assert json.loads(request.form["manifest"]) == manifest


def test_experiments_submit_sends_the_reward_file_given(run, keyed, grpo, tmp_path) -> None:
    other = tmp_path / "rewards" / "strict.py"
    other.parent.mkdir()
    other.write_bytes(b"def score(c, a, q):\n    return 0.0\n")
    result = run(
        "arena", "experiments", "submit", str(grpo), "--project", "llm",
        "--reward-file", "rewards/strict.py", "--completion", "42",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (request,) = keyed.requests_to("POST", SUBMIT)
    assert request.files["reward_file"].filename == "strict.py"
    assert request.files["reward_file"].data == other.read_bytes()
    assert request.form["completion"] == "42"
    assert json.loads(request.form["manifest"])["environment"]["reward_file_path"] == "strict.py"


def test_experiments_submit_names_a_missing_reward_file(run, keyed, grpo, tmp_path) -> None:
    result = run(
        "arena", "experiments", "submit", str(grpo), "--project", "llm", "--reward-file", "gone.py"
    )
    assert result.exit_code == 2
    assert f"--reward-file: reward file {tmp_path / 'gone.py'} not found" in result.output
    assert "Traceback" not in result.output
    _no_request_sent(keyed)


def test_a_reward_file_for_a_job_without_rewards_is_refused(run, keyed, write, grpo) -> None:
    manifest = write("dpo.yaml", DPO)
    result = run(
        "arena", "experiments", "submit", str(manifest), "--project", "llm",
        "--reward-file", "reward.py",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--reward-file: DPO on this environment learns from no reward function" in (
        result.output
    )
    _no_request_sent(keyed)


def test_written_fields_arena_lacks_are_left_out_with_a_warning(run, keyed, grpo) -> None:
    text = GRPO.replace("  group_size: 4\n", "  group_size: 4\n  micro_batch_size_per_gpu: 2\n")
    text = text.replace("    lora_alpha: 16\n", "    lora_alpha: 16\n    lora_dropout: 0\n")
    text = text.replace("environment:\n", "environment:\n  apply_chat_template: true\n", 1)
    grpo.write_text(text + "    target_parameters: [mlp.experts.gate_up_proj]\n")
    result = _train(run, grpo, "--project", "llm")
    assert result.exit_code == 0, result.output
    assert "algorithm.micro_batch_size_per_gpu: not sent to Arena" in result.output
    assert "environment.apply_chat_template: agile only, not sent to Arena" in result.output
    assert "network.lora_config.target_parameters: Arena's LoRA has none" in result.output
    (request,) = keyed.requests_to("POST", SUBMIT)
    manifest = json.loads(request.form["manifest"])
    assert "micro_batch_size_per_gpu" not in manifest["algorithm"]
    assert "target_parameters" not in manifest["network"]["lora_config"]
    assert manifest["network"]["lora_config"]["lora_dropout"] == 0


def test_an_environment_version_is_sent_with_the_dataset() -> None:
    import yaml

    from agile_arena.backend import arena_manifest
    from agile_cli import TrainingManifest

    data = yaml.safe_load(GRPO)
    data["environment"]["version"] = "v3"
    sent = arena_manifest(TrainingManifest.get_validated(data))["environment"]
    assert (sent["name"], sent["version"]) == (DATASET, "v3")
    del data["environment"]["version"]
    assert "version" not in arena_manifest(TrainingManifest.get_validated(data))["environment"]


# -- agilerl 2.58's form, read into the August form Arena takes ---------------------------------


def _payload(data: dict[str, Any]) -> dict[str, Any]:
    from agile_arena.backend import arena_manifest
    from agile_cli import TrainingManifest

    return arena_manifest(TrainingManifest.get_validated(data))


def _left_out(data: dict[str, Any]) -> list[str]:
    from agile_arena import llm
    from agile_cli import TrainingManifest

    return llm.left_out(TrainingManifest.get_validated(data))


def _grpo(**algorithm: Any) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(GRPO)
    data["algorithm"].update(algorithm)
    return data


def test_the_2_58_form_sends_what_the_august_form_sends() -> None:
    current = GRPO.replace("env_type: reasoning", "env_type: rollout")
    current = current.replace("reward_file_path:", "rubric_file_path:")
    current = current.replace("reward_fn_name:", "rubric_name:")
    sent = _payload(yaml.safe_load(current))
    assert sent == _payload(yaml.safe_load(GRPO))
    environment = sent["environment"]
    assert (environment["env_type"], environment["reward_fn_name"]) == ("reasoning", "score")
    assert environment["reward_file_path"] == "reward.py"
    assert not {"rubric_name", "rubric_file_path", "objective", "max_turns"} & set(environment)


@pytest.mark.parametrize(
    ("algorithm", "objective", "dataset"),
    [("DPO", "preference", "my-preferences"), ("SFT", "sft", "my-demonstrations")],
)
def test_a_2_58_dataset_environment_is_sent_as_its_objective(
    algorithm: str, objective: str, dataset: str
) -> None:
    data = {
        "algorithm": {"name": algorithm},
        "environment": {"env_type": "dataset", "objective": objective, "dataset": dataset},
        "network": {"pretrained_model_name_or_path": MODEL},
    }
    environment = _payload(data)["environment"]
    assert (environment["name"], environment["env_type"]) == (dataset, objective)
    assert "reward_fn_name" not in environment and "objective" not in environment


def test_a_rollout_without_a_rubric_name_sends_the_default_one() -> None:
    data = yaml.safe_load(GRPO)
    del data["environment"]["reward_fn_name"]
    assert _payload(data)["environment"]["reward_fn_name"] == "reward_fn"


@pytest.mark.parametrize(
    ("environment", "field"),
    [
        ({"env_type": "multiturn", "env_name": "game:GuessTheNumber-v0-easy"}, "entrypoint"),
        ({"env_type": "rollout", "env_url": "http://127.0.0.1:8000"}, "env_url"),
        ({"env_image": "ghcr.io/acme/env:1"}, "env_image"),
    ],
)
def test_an_environment_the_model_acts_in_is_refused_before_any_request(
    run, keyed, write, environment: dict[str, Any], field: str
) -> None:
    data = {
        "algorithm": {"name": "GRPO", "group_size": 2},
        "environment": {**environment, "max_turns": 3},
        "network": {"pretrained_model_name_or_path": MODEL},
    }
    result = _train(run, write("m.yaml", yaml.safe_dump(data)), "--project", "llm")
    assert result.exit_code == 2, result.output
    assert f"environment.{field}: " in result.output
    assert "Arena's LLM jobs train on a dataset registered on Arena" in result.output
    assert "Traceback" not in result.output
    _no_request_sent(keyed)


@pytest.mark.parametrize(
    ("algorithm", "path", "message"),
    [
        ({"name": "CISPO", "clip_coef": [0.8, 2.0]}, "algorithm.clip_bounds", "[0.8, 2.0]: Arena"),
        (
            {"cosine_lr_schedule_config": {"num_steps": 100}},
            "algorithm.cosine_lr_schedule_config.num_steps",
            "100: Arena's cosine schedule lasts num_epochs",
        ),
        ({"use_vllm": True}, "algorithm.vllm_config", "is missing: Arena generates with vLLM"),
    ],
)
def test_algorithm_settings_arena_cannot_express_are_refused_before_any_request(
    run, keyed, grpo, algorithm: dict[str, Any], path: str, message: str
) -> None:
    grpo.write_text(yaml.safe_dump(_grpo(**algorithm)))
    result = _train(run, grpo, "--project", "llm")
    assert result.exit_code == 2, result.output
    assert f"{path}: {message}" in result.output
    _no_request_sent(keyed)


def test_vllm_and_schedule_settings_send_only_what_is_written_and_arena_reads() -> None:
    data = _grpo(
        use_vllm=True,
        vllm_config={"gpu_memory_utilization": 0.5, "max_num_seqs": 4, "max_lora_rank": 32},
        cosine_lr_schedule_config={"num_epochs": 10, "min_lr_ratio": 0.0},
    )
    algorithm = _payload(data)["algorithm"]
    assert algorithm["use_vllm"] is True
    assert algorithm["vllm_config"] == {"gpu_memory_utilization": 0.5, "max_num_seqs": 4}
    assert algorithm["cosine_lr_schedule_config"] == {"num_epochs": 10}
    warnings = _left_out(data)
    assert "algorithm.vllm_config.max_lora_rank: Arena's vllm_config has no such field" in (
        " ".join(warnings)
    )
    assert any(w.startswith("algorithm.cosine_lr_schedule_config.min_lr_ratio:") for w in warnings)


def test_unset_2_58_switches_are_left_to_arena() -> None:
    algorithm = _payload(yaml.safe_load(GRPO))["algorithm"]
    for unset in ("use_vllm", "vllm_config", "cosine_lr_schedule_config", "clip_bounds"):
        assert unset not in algorithm
    assert "use_separate_reference_adapter" not in algorithm


def test_a_null_critic_rate_is_sent_as_the_actors() -> None:
    data = yaml.safe_load(GRPO)
    data["algorithm"] = {"name": "LLMPPO", "lr_actor": 1e-6, "lr_critic": None}
    algorithm = _payload(data)["algorithm"]
    assert (algorithm["lr_actor"], algorithm["lr_critic"]) == (1e-6, 1e-6)


def test_the_llm_replay_buffer_is_not_sent(run, keyed, grpo) -> None:
    assert "replay_buffer" not in _payload(yaml.safe_load(GRPO))
    grpo.write_text(GRPO + "replay_buffer: {max_size: 500}\n")
    result = _train(run, grpo, "--project", "llm")
    assert result.exit_code == 0, result.output
    assert "replay_buffer: not sent to Arena" in result.output
    (request,) = keyed.requests_to("POST", SUBMIT)
    assert "replay_buffer" not in json.loads(request.form["manifest"])


def test_written_2_58_environment_fields_arena_lacks_are_warned_about() -> None:
    data = yaml.safe_load(GRPO)
    data["environment"].update(min_reward=-1.0, chat_template_kwargs={"enable_thinking": False})
    sent = _payload(data)["environment"]
    assert "min_reward" not in sent and "chat_template_kwargs" not in sent
    warnings = _left_out(data)
    for field in ("chat_template_kwargs", "min_reward"):
        assert f"environment.{field}: not sent to Arena, whose LLM environment has no such " in (
            " ".join(warnings)
        )
    assert not [w for w in warnings if "max_turns" in w or "rubric" in w or "name" in w]
