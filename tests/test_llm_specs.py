"""The manifest sections of LLM fine-tuning (agile_llm.spec): what validates, what is refused
with which message, the defaults, the warnings, and that validating stays light."""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agile_cli import ManifestError, TrainingManifest
from agile_cli.host.registry import load_object
from agile_llm import options, spec
from agile_llm.plugin import ALGORITHMS

ROOT = Path(__file__).resolve().parents[1]

HEAVY = ("torch", "transformers", "peft", "datasets", "vllm", "bitsandbytes")

ZERO_MUTATIONS = {
    "mutation_sd": 0.1,
    "probabilities": {
        "no_mut": 0.2,
        "arch_mut": 0,
        "new_layer": 0,
        "params_mut": 0,
        "act_mut": 0,
        "rl_hp_mut": 0.8,
    },
    "rl_hp_selection": {"lr": {"min": 1e-7, "max": 1e-4}},
}
TEMPLATE = {
    "system_0": "Answer briefly. Put the result in <answer></answer>.",
    "user_1": "What is {a} plus {b}?",
    "assistant_2": "Let me add them.",
}
REASONING_ENV = {
    "env_type": "reasoning",
    "dataset": "someone/sums-of-two",
    "columns": {"x": "a", "y": "b"},
    "reward_file_path": "rewards/sums.py",
    "reward_fn_name": "exact_answer",
    "prompt_template": TEMPLATE,
    "max_reward": 1.0,
    "train_test_split": 0.75,
}
NETWORK = {
    "pretrained_model_name_or_path": "someone/tiny-chat-model",
    "max_context_length": 384,
    "lora_config": {"lora_r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]},
}
TRAINING = {"max_steps": 2000, "evo_steps": 4, "pop_size": 3}


def _manifest(algorithm: dict[str, Any], environment: dict[str, Any] | None = None, **more: Any):
    data: dict[str, Any] = {
        "algorithm": algorithm,
        "environment": copy.deepcopy(REASONING_ENV if environment is None else environment),
        "network": copy.deepcopy(NETWORK),
        "training": dict(TRAINING),
        "mutation": copy.deepcopy(ZERO_MUTATIONS),
        "tournament_selection": {"tournament_size": 2, "elitism": True},
    }
    if algorithm.get("name") == "LLMPPO":
        data["mutation"]["rl_hp_selection"] = {"lr_actor": {"min": 1e-7, "max": 1e-4}}
    for key, value in more.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def _errors(data: dict[str, Any]) -> list[Any]:
    with pytest.raises(ManifestError) as caught:
        TrainingManifest.get_validated(data)
    return caught.value.errors


def _error(data: dict[str, Any], path: str) -> Any:
    errors = _errors(data)
    found = [error for error in errors if error.path == path]
    assert found, [f"{e.path}: {e.message}" for e in errors]
    return found[0]


# Our own manifests, shaped like the reference's shipped ones (one per kind).
SHAPES = {
    "grpo": _manifest(
        {
            "name": "GRPO",
            "batch_size": 4,
            "beta": 0.002,
            "lr": 1e-5,
            "group_size": 4,
            "clip_coef": 0.25,
            "max_grad_norm": 0.2,
            "temperature": 0.8,
            "use_vllm": False,
            "calc_position_embeddings": True,
            "reduce_memory_peak": False,
        }
    ),
    "gspo": _manifest({"name": "GSPO", "batch_size": 2, "group_size": 6, "lr": 4e-6}),
    "cispo": _manifest(
        {
            "name": "CISPO",
            "batch_size": 2,
            "group_size": 4,
            "clip_coef": [0.8, 2.0],
            "adv_norm": "mean_only",
            "filter_zero_adv": True,
            "max_output_tokens": 256,
        }
    ),
    "llmppo": _manifest(
        {
            "name": "LLMPPO",
            "batch_size": 4,
            "lr_actor": 3e-6,
            "lr_critic": 3e-5,
            "gamma": 1,
            "gae_lambda": 1,
            "vf_coef": 0.4,
            "temperature": 0.7,
        }
    ),
    "llmreinforce": _manifest(
        {"name": "LLMREINFORCE", "batch_size": 4, "gamma": 1.0, "beta": 0, "lr": 2e-5}
    ),
    "dpo": _manifest(
        {
            "name": "DPO",
            "batch_size": 8,
            "beta": 0.05,
            "lr": 3e-6,
            "use_separate_reference_adapter": False,
        },
        {"dataset": "pairs/chosen-rejected"},
        training={"max_steps": 5000, "evo_steps": 10, "pop_size": 2, "num_epochs": 2},
    ),
    "sft": _manifest(
        {"name": "SFT", "batch_size": 8, "lr": 2e-5, "gradient_checkpointing": True},
        {"dataset": "data/instructions.parquet", "response_column": "chosen"},
        training={"max_steps": 5000, "evo_steps": 10, "pop_size": 2, "num_epochs": 1},
    ),
    # The reference spells the dataset `name`; the model may be named in the algorithm.
    "name_only_dataset": _manifest(
        {"name": "GRPO", "pretrained_model_name_or_path": "someone/model"},
        {key: value for key, value in REASONING_ENV.items() if key != "dataset"}
        | {"name": "someone/sums-of-two"},
        network=None,
    ),
    "dpo_environment_as_a_name": _manifest({"name": "DPO"})
    | {"environment": "pairs/chosen-rejected"},
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_reference_shaped_manifests_validate(shape: str) -> None:
    manifest = TrainingManifest.get_validated(copy.deepcopy(SHAPES[shape]))
    assert manifest.family == "llm"
    assert isinstance(manifest.algorithm, spec.LLMSpec)
    assert isinstance(manifest.environment, spec.LLMEnvSpec)
    assert isinstance(manifest.network, spec.FinetuningNetworkSpec)
    assert manifest.algorithm.model_path(manifest)
    assert manifest.environment.dataset


def test_cli_validates_an_llm_manifest(run, write) -> None:
    path = write("grpo.yaml", yaml.safe_dump(SHAPES["grpo"]))
    result = run("validate", str(path))
    assert result.exit_code == 0, result.output
    assert "ok (GRPO" in result.output


def test_validate_imports_no_llm_library(write) -> None:
    path = write("grpo.yaml", yaml.safe_dump(SHAPES["grpo"]))
    probe = (
        "import sys\n"
        "from agile_cli.cli import main\n"
        "try:\n    main(['validate', sys.argv[1]])\n"
        "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        f"print('HEAVY:', ','.join(sorted(loaded & {set(HEAVY)!r})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(path)], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "HEAVY:", result.stdout + result.stderr


# -- defaults --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "GRPO",
            {
                "batch_size": 16,
                "beta": 0.001,
                "lr": 5e-6,
                "max_grad_norm": 0.1,
                "group_size": 8,
                "temperature": 0.9,
                "top_k": 50,
                "max_output_tokens": None,
                "adv_norm": "mean_only",
                "loss_norm": "accumulation_window",
                "kl_clamp": 10.0,
            },
        ),
        ("GSPO", {"beta": 0.001, "lr": 5e-6, "max_grad_norm": 0.1, "group_size": 8}),
        ("CISPO", {"beta": 0.001, "lr": 5e-6, "clip_coef": 0.2, "group_size": 8}),
        (
            "LLMREINFORCE",
            {"beta": 0.001, "lr": 5e-6, "max_grad_norm": 1.0, "temperature": 1.0, "gamma": 1.0},
        ),
        (
            "LLMPPO",
            {
                "beta": 0.001,
                "temperature": 1.0,
                "lr_actor": 5e-6,
                "lr_critic": 5e-5,
                "max_grad_norm": 1.0,
                "vf_coef": 0.5,
            },
        ),
        ("DPO", {"beta": 0.1, "lr": 5e-6, "max_grad_norm": 0.1, "nll_alpha": 0.0}),
        ("SFT", {"lr": 5e-5, "max_grad_norm": 0.1, "batch_size": 16}),
    ],
)
def test_defaults(name: str, expected: dict[str, Any]) -> None:
    made = load_object(ALGORITHMS[name][0])()
    for field, value in expected.items():
        assert getattr(made, field) == (value if value is None or isinstance(value, str)
                                        else pytest.approx(value)), field  # fmt: skip
    assert made.seed == 42
    assert made.gradient_checkpointing is True
    assert made.update_epochs == 1
    assert type(made).default_evo_steps == 20  # agilerl 2.58's
    assert type(made).mutation_kinds == frozenset({"rl_hp"})
    assert set(type(made).default_mutable) <= set(type(made).mutable_hyperparameters)
    assert set(type(made).mutable_hyperparameters) <= set(type(made).model_fields)


def test_env_types_and_default_mutables() -> None:
    assert spec.GRPOSpec.env_type == spec.LLMPPOSpec.env_type == "reasoning"
    assert spec.DPOSpec.env_type == "preference"
    assert spec.SFTSpec.env_type == "sft"
    assert spec.GRPOSpec.default_mutable == ("lr", "beta")
    assert spec.SFTSpec.default_mutable == ("lr",)
    assert spec.LLMPPOSpec.default_mutable == ("lr_actor", "beta")
    assert "clip_coef" in spec.CISPOSpec.mutable_hyperparameters  # a number in 2.58's form
    assert "nll_alpha" in spec.DPOSpec.mutable_hyperparameters


def test_resolved_evo_steps_and_training_defaults() -> None:
    data = _manifest({"name": "GRPO"}, training={"max_steps": 1000})
    manifest = TrainingManifest.get_validated(data)
    assert manifest.training.evo_steps == 20
    assert manifest.training.evaluation_interval == 10
    assert manifest.training.num_epochs is None
    assert manifest.algorithm.context_length(manifest) == 384


def test_defaults_paragraph_exists() -> None:
    assert "Defaults\n--------" in (spec.__doc__ or "")


# -- refusals --------------------------------------------------------------------------------


def _here(data: dict[str, Any]) -> dict[str, Any]:
    """What keeps this machine from training a manifest that is valid: path -> error."""
    manifest = TrainingManifest.get_validated(data)
    return {e.path: e for e in manifest.algorithm.local_training_errors(manifest)}


def test_use_vllm_is_valid_and_refused_here_naming_what_is_missing(monkeypatch) -> None:
    monkeypatch.setattr(options, "installed", lambda module: False)
    monkeypatch.setattr(options, "gpu_present", lambda: False)
    error = _here(_manifest({"name": "GSPO", "use_vllm": True}))["algorithm.use_vllm"]
    assert "vLLM generation needs the vllm package and a CUDA GPU" in error.message
    assert "vllm (not installed)" in error.message and "CUDA GPU (none found)" in error.message
    assert "--set algorithm.use_vllm=null" in error.hint and "--backend arena" in error.hint


def test_use_vllm_trains_here_where_vllm_and_a_gpu_are(monkeypatch) -> None:
    monkeypatch.setattr(options, "installed", lambda module: True)
    monkeypatch.setattr(options, "gpu_present", lambda: True)
    assert _here(_manifest({"name": "GRPO", "use_vllm": True})) == {}
    monkeypatch.setattr(options, "gpu_present", lambda: False)
    error = _here(_manifest({"name": "GRPO", "use_vllm": True}))["algorithm.use_vllm"]
    assert "lacks a CUDA GPU (none found)" in error.message


def test_vllm_config_without_use_vllm_is_a_warning() -> None:
    data = _manifest({"name": "GRPO", "use_vllm": False, "vllm_config": {"max_num_seqs": 8}})
    manifest = TrainingManifest.get_validated(data)
    assert any(w.startswith("algorithm.vllm_config: ignored") for w in manifest.warnings)


def test_quantization_presets_are_valid_and_refused_without_bitsandbytes_and_a_gpu(
    monkeypatch,
) -> None:
    monkeypatch.setattr(options, "installed", lambda module: False)
    monkeypatch.setattr(options, "gpu_present", lambda: False)
    for preset in ("nf4", "INT8", "4 bit", "bnb-4bit", {"load_in_4bit": True}):
        error = _here(_manifest({"name": "CISPO", "quantization": preset}))
        assert "bitsandbytes (not installed)" in error["algorithm.quantization"].message
    for off in (None, "none", "None"):
        assert _here(_manifest({"name": "GRPO", "quantization": off})) == {}
    error = _error(_manifest({"name": "GRPO", "quantization": "3bit"}), "algorithm.quantization")
    assert error.message == "unknown preset '3bit'" and "nf4" in error.hint
    monkeypatch.setattr(options, "installed", lambda module: True)
    monkeypatch.setattr(options, "gpu_present", lambda: True)
    assert _here(_manifest({"name": "CISPO", "quantization": "nf4"})) == {}  # trained here


def test_a_multiturn_environment_follows_agilerls_rules() -> None:
    game = {"env_type": "multiturn", "env_name": "game:GuessTheNumber-v0", "max_turns": 5}
    manifest = TrainingManifest.get_validated(_manifest({"name": "GRPO"}, game))
    assert not manifest.warnings  # its fields are used, and it needs no dataset or reward file
    assert not _here(_manifest({"name": "GRPO"}, game))  # agile trains it here
    assert not _here(_manifest({"name": "LLMPPO"}, game))  # and LLMPPO's over episodes
    both = {**game, "entrypoint": "my_env.py:make"}
    error = _error(_manifest({"name": "GRPO"}, both), "environment.env_name")
    assert "one of env_name and entrypoint, not both" in error.message
    neither = {"env_type": "multiturn"}
    error = _error(_manifest({"name": "GRPO"}, neither), "environment.dataset")
    assert "exactly one source, got none" in error.message
    configured = {**game, "env_config": {"level": 2}}  # gem.make's keyword arguments
    made = TrainingManifest.get_validated(_manifest({"name": "GRPO"}, configured)).environment
    assert (made.entrypoint, made.factory, made.env_config) == (
        "game:GuessTheNumber-v0", "gem:make", {"level": 2})  # fmt: skip
    error = _error(_manifest({"name": "DPO"}, game), "environment.env_type")
    assert "DPO learns from preference rows" in error.message


def test_validate_says_what_this_machine_will_not_train_and_train_refuses_at_once(
    run, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(options, "gpu_present", lambda: False)
    data = _manifest({"name": "GRPO", "use_vllm": True})
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml.safe_dump(data))
    checked = run("validate", str(path))
    assert checked.exit_code == 0, checked.output
    assert "not on this machine: algorithm.use_vllm: vLLM generation needs" in checked.output
    trained = run("train", str(path), "--run-dir", str(tmp_path / "run"))
    assert trained.exit_code == 2 and "training on this machine: 1 error" in trained.output
    assert "--set algorithm.use_vllm=null" in trained.output and "Traceback" not in trained.output
    assert not (tmp_path / "run").exists()  # refused before anything was made or loaded
    deep = run("validate", str(path), "--check-env")
    assert deep.exit_code == 2 and "algorithm.use_vllm" in deep.output


def test_architecture_mutation_is_refused() -> None:
    data = _manifest({"name": "GRPO"})
    data["mutation"]["probabilities"]["arch_mut"] = 0.2
    error = _error(data, "mutation.probabilities.arch_mut")
    assert "rl_hp" in error.message


def test_unknown_environment_key_suggests_the_right_one() -> None:
    environment = dict(REASONING_ENV)
    environment["reward_fn_nme"] = environment.pop("reward_fn_name")
    errors = _errors(_manifest({"name": "GRPO"}, environment))
    typo = next(e for e in errors if e.path == "environment.reward_fn_nme")
    assert typo.message == "unknown field" and "did you mean 'reward_fn_name'" in typo.hint


def test_dpo_on_reasoning_data_is_refused() -> None:
    error = _error(_manifest({"name": "DPO"}), "environment.env_type")
    assert "preference" in error.message and "objective: preference" in error.hint


def test_reasoning_without_reward_function_warns_that_local_training_needs_it() -> None:
    # An Arena job may leave the reward to --reward-file and the template to the registered
    # dataset; training locally refuses to start without them (tests/test_llm_training.py).
    environment = {k: v for k, v in REASONING_ENV.items() if k != "reward_file_path"}
    manifest = TrainingManifest.get_validated(_manifest({"name": "GRPO"}, environment))
    assert any(w.startswith("environment.rubric_file_path: not given; training locally needs")
               for w in manifest.warnings)  # fmt: skip
    unnamed = {k: v for k, v in REASONING_ENV.items() if k != "reward_fn_name"}
    manifest = TrainingManifest.get_validated(_manifest({"name": "GRPO"}, unnamed))
    assert manifest.environment.rubric_name == "reward_fn"  # 2.58's default


def test_preference_data_takes_no_reward_file() -> None:
    environment = {"dataset": "pairs/x", "reward_file_path": "reward.py"}
    error = _error(_manifest({"name": "DPO"}, environment), "environment.rubric_file_path")
    assert "remove rubric_file_path" in error.hint


def test_sft_ignores_beta_and_dpo_takes_no_sampling_fields() -> None:
    sft = _manifest({"name": "SFT", "beta": 0.1}, {"dataset": "data/x.jsonl"})
    warnings = TrainingManifest.get_validated(sft).warnings
    assert "algorithm.beta: ignored, SFT has no reference policy to stay near" in warnings
    dpo = _manifest({"name": "DPO", "use_sequence_packing": True}, {"dataset": "pairs/x"})
    assert "DPO pads its rows" in _error(dpo, "algorithm.use_sequence_packing").message
    dpo = _manifest({"name": "DPO", "temperature": 0.5}, {"dataset": "pairs/x"})
    assert "unknown field" in _error(dpo, "algorithm.temperature").message


def test_a_model_is_required() -> None:
    data = _manifest({"name": "GRPO"}, network={"max_context_length": 256})
    error = _error(data, "network.pretrained_model_name_or_path")
    assert "no model" in error.message


@pytest.mark.parametrize("clip", [[0.2], [0.1, 0.2, 0.3], [-0.1, 0.2], [2.0, 0.8]])
def test_cispo_clip_coef_shape(clip: list[float]) -> None:
    errors = _errors(_manifest({"name": "CISPO", "clip_coef": clip}))
    assert [e.path for e in errors if e.path.startswith("algorithm.clip_bounds")], errors


def test_cispo_august_bounds_are_clip_bounds_and_not_mutated() -> None:
    manifest = TrainingManifest.get_validated(_manifest({"name": "CISPO", "clip_coef": [0.8, 2]}))
    assert (manifest.algorithm.clip_bounds, manifest.algorithm.clip_coef) == ((0.8, 2.0), 0.2)
    data = _manifest({"name": "CISPO", "clip_coef": [0.8, 2]})
    data["mutation"]["rl_hp_selection"] = {"clip_coef": {"min": 0.1, "max": 0.3}}
    assert "clip_bounds" in _error(data, "mutation.rl_hp_selection.clip_coef").message


def test_grpo_clip_coef_is_a_number() -> None:
    _error(_manifest({"name": "GRPO", "clip_coef": [0.2, 0.3]}), "algorithm.clip_coef")


@pytest.mark.parametrize("bad", ["./notes/data.txt", "has spaces/in it", "/abs/file.tsv", "a b"])
def test_dataset_shape_is_checked(bad: str) -> None:
    environment = dict(REASONING_ENV, dataset=bad)
    _error(_manifest({"name": "GRPO"}, environment), "environment.dataset")


@pytest.mark.parametrize(
    "good",
    [
        "gsm8k",
        "owner/name",
        "owner/name-2.1",
        "./local/data.parquet",
        "/x/y.csv",
        "a.pq",
        "data/rows/digits",
        "./rows",
    ],  # the last two: folders of data files
)
def test_dataset_files_and_hub_ids_are_accepted(good: str) -> None:
    environment = dict(REASONING_ENV, dataset=good)
    manifest = TrainingManifest.get_validated(_manifest({"name": "GRPO"}, environment))
    assert manifest.environment.dataset == good


@pytest.mark.parametrize("split", [0, 0.0, 1, 1.0, 1.5])
def test_train_test_split_needs_both_parts(split: float) -> None:
    environment = dict(REASONING_ENV, train_test_split=split)
    error = _error(_manifest({"name": "GRPO"}, environment), "environment.train_test_split")
    assert "strictly between 0 and 1" in error.message


@pytest.mark.parametrize(
    "template",
    [{"narrator_0": "hi"}, {"user": "hi"}, {"user_1": "{unclosed"}, {"user_1": "{a b}"}, {}],
)
def test_prompt_template_is_checked(template: dict[str, str]) -> None:
    environment = dict(REASONING_ENV, prompt_template=template)
    errors = _errors(_manifest({"name": "GRPO"}, environment))
    assert any(e.path.startswith("environment.prompt_template") for e in errors), errors


def test_name_and_dataset() -> None:
    both = dict(REASONING_ENV, name="my-run")
    manifest = TrainingManifest.get_validated(_manifest({"name": "GRPO"}, both))
    assert (manifest.environment.name, manifest.environment.dataset) == (
        "my-run",
        "someone/sums-of-two",
    )
    manifest = TrainingManifest.get_validated(_manifest({"name": "GRPO"}))
    assert manifest.environment.name == "someone/sums-of-two"


# -- network and LoRA ------------------------------------------------------------------------


def test_network_lora_config_is_used() -> None:
    manifest = TrainingManifest.get_validated(_manifest({"name": "GRPO"}))
    lora = manifest.algorithm.lora(manifest)
    assert (lora.lora_r, lora.lora_alpha, lora.target_modules) == (8, 16, ["q_proj", "v_proj"])
    assert lora.peft_kwargs()["r"] == 8 and "target_parameters" not in lora.peft_kwargs()


def test_network_lora_config_replaces_the_algorithm_one_and_absent_falls_back() -> None:
    algorithm = {"name": "GRPO", "lora_config": {"lora_r": 4}}
    manifest = TrainingManifest.get_validated(_manifest(algorithm))
    assert manifest.algorithm.lora(manifest).lora_r == 8  # the network section's
    assert any(w.startswith("algorithm.lora_config: ignored") for w in manifest.warnings)
    network = {"pretrained_model_name_or_path": "someone/model"}
    manifest = TrainingManifest.get_validated(_manifest(algorithm, network=network))
    assert manifest.algorithm.lora(manifest).lora_r == 4
    again = TrainingManifest.get_validated(manifest.to_dict())  # as a run folder holds it
    assert again.algorithm.lora(again).lora_r == 4


def test_algorithm_lora_is_used_without_a_network_section() -> None:
    algorithm = {
        "name": "GRPO",
        "pretrained_model_name_or_path": "m/x",
        "lora_config": {"lora_r": 4},
    }
    manifest = TrainingManifest.get_validated(_manifest(algorithm, network=None))
    assert manifest.algorithm.lora(manifest).lora_r == 4
    assert manifest.algorithm.model_path(manifest) == "m/x"
    assert manifest.algorithm.context_length(manifest) == 1024
    bad = {**algorithm, "lora_config": {"lora_r": 0}}
    _error(_manifest(bad, network=None), "algorithm.lora_config.lora_r")


def test_target_parameters_want_no_dropout() -> None:
    network = copy.deepcopy(NETWORK)
    network["lora_config"]["target_parameters"] = ["experts.gate_up_proj"]
    error = _error(_manifest({"name": "GRPO"}, network=network), "network.lora_config.lora_dropout")
    assert "lora_dropout: 0" in error.hint
    network["lora_config"]["lora_dropout"] = 0
    manifest = TrainingManifest.get_validated(_manifest({"name": "GRPO"}, network=network))
    assert manifest.algorithm.lora(manifest).peft_kwargs()["target_parameters"] == [
        "experts.gate_up_proj"
    ]


def test_network_model_overrides_the_algorithm_one() -> None:
    data = _manifest({"name": "GRPO", "pretrained_model_name_or_path": "other/model"})
    manifest = TrainingManifest.get_validated(data)
    assert manifest.algorithm.model_path(manifest) == "someone/tiny-chat-model"
    assert any("pretrained_model_name_or_path: ignored" in w for w in manifest.warnings)


# -- warnings --------------------------------------------------------------------------------


def test_ignored_fields_are_reported() -> None:
    algorithm = {
        "name": "GRPO",
        "use_liger_loss": False,
        "activation_offload": True,
        "chunk_rows": 64,
        "calc_position_embeddings": False,
        "advantage_granularity": "turn",
    }
    environment = dict(REASONING_ENV, strict_chat_template_boundary=False)
    training = dict(TRAINING, evaluation_interval=7, max_wall_seconds=100.0, eval_loop=2)
    manifest = TrainingManifest.get_validated(_manifest(algorithm, environment, training=training))
    warned = {w.split(":")[0] for w in manifest.warnings}
    assert {
        "algorithm.use_liger_loss",
        "algorithm.activation_offload",
        "algorithm.chunk_rows",
        "algorithm.calc_position_embeddings",
        "algorithm.advantage_granularity",
        "environment.strict_chat_template_boundary",
        "training.evaluation_interval",
        "training.max_wall_seconds",
        "training.eval_loop",
    } <= warned
    interval = next(w for w in manifest.warnings if w.startswith("training.evaluation_interval"))
    assert "every generation" in interval or "each generation" in interval


def test_honoured_fields_are_not_reported() -> None:
    algorithm = {
        "name": "GRPO",
        "batch_size": 4,
        "lr": 1e-5,
        "beta": 0.01,
        "max_grad_norm": 0.5,
        "update_epochs": 2,
        "seed": 3,
        "gradient_checkpointing": False,
        "attn_implementation": "sdpa",
        "micro_batch_size_per_gpu": 2,
        "group_size": 4,
        "clip_coef": 0.3,
        "temperature": 1.0,
        "max_output_tokens": 64,
        "min_output_tokens": 1,
        "adv_norm": "mean_only",
        "whiten_advantages": True,
        "adv_clip_range": 5.0,
        "filter_zero_adv": True,
        "importance_sampling_level": "trajectory",
    }
    training = dict(TRAINING, evaluation_interval=4, num_epochs=3)
    manifest = TrainingManifest.get_validated(_manifest(algorithm, training=training))
    assert manifest.warnings == ()


def test_training_keys_of_other_paradigms_are_reported_once(run, write) -> None:
    data = _manifest({"name": "GRPO"}, training=dict(TRAINING, eps_start=0.5, learning_delay=2))
    result = run("validate", str(write("m.yaml", yaml.safe_dump(data))))
    assert result.exit_code == 0, result.output
    assert result.output.count("training.eps_start: ignored") == 1
    assert result.output.count("training.learning_delay: ignored") == 1


def test_rl_hp_selection_names() -> None:
    data = _manifest({"name": "LLMPPO"})
    data["mutation"]["rl_hp_selection"] = {"lr_actor": {"min": 1e-7, "max": 1e-4}}
    TrainingManifest.get_validated(data)
    data["mutation"]["rl_hp_selection"] = {"lr": {"min": 1e-7, "max": 1e-4}}  # 2.58's alias
    assert set(TrainingManifest.get_validated(data).mutation.rl_hp_selection) == {"lr_actor"}
    data["mutation"]["rl_hp_selection"]["lr_actor"] = {"min": 1e-7, "max": 1e-4}
    assert "its other spelling" in _error(data, "mutation.rl_hp_selection.lr").message
    data["mutation"]["rl_hp_selection"] = {"lr_critc": {"min": 1e-7, "max": 1e-4}}
    _error(data, "mutation.rl_hp_selection.lr_critc")


# -- benchmarks/reference_manifests.py -------------------------------------------------------


def test_reference_manifests_script(tmp_path, capsys) -> None:
    location = ROOT / "benchmarks" / "reference_manifests.py"
    loader = importlib.util.spec_from_file_location("reference_manifests", location)
    assert loader is not None and loader.loader is not None
    script = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(script)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "sft.yaml").write_text(yaml.safe_dump(SHAPES["sft"]))
    elsewhere = _manifest({"name": "GRPO", "use_vllm": True})
    (tmp_path / "configs" / "vllm.yml").write_text(yaml.safe_dump(elsewhere))
    (tmp_path / "not_a_manifest.yaml").write_text("just: a mapping\n")
    (tmp_path / "dqn.yaml").write_text("algorithm: {name: DQN}\nenvironment: CartPole-v1\n")
    assert script.main([str(tmp_path), "--only", "llm"]) == 0
    out = capsys.readouterr().out
    assert "OK       configs/sft.yaml" in out
    assert "OK       configs/vllm.yml" in out  # valid: whether it trains here is train's say
    assert "not_a_manifest" not in out and "dqn.yaml" not in out
    assert "2 manifests (2 files, 0 blocks in docs): 2 OK, 0 refused" in out
    assert script.main([str(tmp_path), "--only", "rl"]) == 0
    assert "1 manifests (1 files, 0 blocks in docs): 1 OK, 0 refused" in capsys.readouterr().out
