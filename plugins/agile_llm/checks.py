"""The rules of LLM manifests across fields and sections, what this machine cannot train, and
what is valid but probably not meant (the warnings). Read by the algorithm specs of
:mod:`agile_llm.spec` (each function takes one of them), light, as they are.
"""

from __future__ import annotations

from typing import Any

from agile_cli import FieldError
from agile_cli.helpers import located_error
from agile_llm import options

#: Algorithm fields that change how fast a run goes (kernels, memory, the vLLM engine), not
#: what it learns: accepted, and named once when written at another value than the default.
SPEED_SETTINGS = (
    "use_liger_loss",
    "use_liger_kernel",
    "use_mamba_kernels",
    "cast_logprobs_to_fp32",
    "calc_position_embeddings",
    "activation_offload",
    "moe_lora_recompute",
    "use_sequence_packing",
    "chunk_rows",
    "hf_generate_chunk_size",
    "vllm_lora_export_dir",
    "reduce_memory_peak",
    "profiling_config",
    "fuse_actor_critic_pass",
    "vllm_max_logprob_gap",
    "vllm_max_clip_fraction",
)
#: Fields agile does not train with yet, where written at another value than the default
#: (or, for ``old_logprobs_source``, than agile's own way): (section, field, what it would
#: need). ``agile train`` refuses them here.
NOT_TRAINED_YET = (
    ("algorithm", "old_logprobs_source", "the generating engine's log-probabilities"),
)
#: Values of those fields that say what agile does anyway.
AGILE_WAYS: dict[str, tuple[Any, ...]] = {"old_logprobs_source": ("trainer",)}
_NOT_YET_HINT = (
    "remove it (or write its default) to train here; `agile validate` accepts it, and "
    "--backend arena runs it on the reference's runtime"
)


# -- one algorithm section --------------------------------------------------------------------


def algorithm_rules(spec: Any) -> None:
    """The algorithm section's own rules (raised as the first error found)."""
    if spec.answer_continuation and not spec.constrain_answer_pattern:
        raise located_error(
            "answer_continuation",
            "continues into an answer under constrain_answer_pattern, which is not given",
        )
    budget, cap = spec.thinking_token_budget, spec.max_output()
    if budget is not None and (cap is None or budget >= cap):
        raise located_error(
            "thinking_token_budget",
            f"{budget} needs max_output_tokens above "
            f"it (got {cap}) so that a turn can still answer",
        )
    packing = spec.use_sequence_packing
    if packing and spec.env_type in ("preference", "sft"):
        raise located_error("use_sequence_packing", f"{type(spec).__name__[:-4]} pads its rows")
    if packing and spec.attn_implementation not in ("flash_attention_2", "flex_attention"):
        raise located_error(
            "use_sequence_packing", "needs attn_implementation flash_attention_2 or flex_attention"
        )
    if spec.env_type == "sft" and spec.activation_offload:
        raise located_error("activation_offload", "SFT does not offload activations")
    micro, mini = spec.micro_batch_size_per_gpu, spec.mini_batch_size
    if micro is not None and mini is not None and mini % micro:
        raise located_error(
            "mini_batch_size", f"{mini} is not a multiple of micro_batch_size_per_gpu ({micro})"
        )


# -- the manifest -----------------------------------------------------------------------------


def manifest_errors(spec: Any, manifest: Any) -> list[FieldError]:
    """Rules across sections; paths from the manifest's root."""
    return [
        *_model_errors(spec, manifest),
        *_environment_errors(spec, manifest),
        *_quantization_errors(spec),
        *_buffer_errors(spec, manifest),
        *_mutation_errors(spec, manifest),
    ]


def _model_errors(spec: Any, manifest: Any) -> list[FieldError]:
    if getattr(manifest.network, "pretrained_model_name_or_path", None) or (
        spec.pretrained_model_name_or_path
    ):
        return []
    return [
        FieldError(
            "network.pretrained_model_name_or_path",
            "no model to fine-tune",
            "name a Hugging Face model id or a local model directory, e.g. "
            "network.pretrained_model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct",
        )
    ]


def _environment_errors(spec: Any, manifest: Any) -> list[FieldError]:
    """The environment's kind suits the algorithm: a rollout for those that generate, a
    dataset of the algorithm's objective for SFT and DPO."""
    environment, name = manifest.environment, manifest.algorithm_name
    wanted = dict(type(spec).environment_tags)
    kind, objective = environment.env_type, environment.objective
    if kind is None or (kind == wanted["env_type"] and objective == wanted.get("objective")):
        return []
    if wanted["env_type"] == "rollout":
        return [
            FieldError(
                "environment.env_type",
                f"{name} generates its completions and "
                "learns from their rewards; a dataset environment has none",
                "write env_type: rollout with dataset rows and a rubric, or an "
                "environment (entrypoint, env_url)",
            )
        ]
    wants = wanted["objective"]
    path = "environment.objective" if kind == "dataset" else "environment.env_type"
    return [
        FieldError(
            path,
            f"{name} learns from {wants} rows (env_type: dataset, objective: "
            f"{wants}), not from {objective or kind}",
            f"write env_type: dataset and objective: {wants}, or leave both out",
        )
    ]


def _quantization_errors(spec: Any) -> list[FieldError]:
    value = spec.quantization
    if (
        value is None
        or isinstance(value, dict)
        or options.preset(value) in options.QUANTIZATION_PRESETS
    ):
        return []
    return [
        FieldError(
            "algorithm.quantization",
            f"unknown preset {value!r}",
            "use none, int8, nf4 (also 4bit, 4-bit, bnb-4bit), or a mapping of "
            "bitsandbytes settings",
        )
    ]


def _mutation_errors(spec: Any, manifest: Any) -> list[FieldError]:
    """A hyperparameter mutated where it does nothing (CISPO's clip_coef beside its bounds)."""
    mutation = manifest.mutation
    chosen = getattr(mutation, "rl_hp_selection", None) or {}
    if "clip_coef" in chosen and getattr(spec, "clip_bounds", None) is not None:
        return [
            FieldError(
                "mutation.rl_hp_selection.clip_coef",
                "has no effect: algorithm.clip_bounds ([low, high]) replaces clip_coef",
                "write clip_coef c (bounds 1 -/+ c) instead of the bounds, or do not mutate it",
            )
        ]
    return []


def _buffer_errors(spec: Any, manifest: Any) -> list[FieldError]:
    buffer, training = manifest.replay_buffer, manifest.training
    errors = []
    replay = getattr(buffer, "group_replay_max_age", 0)
    if replay and getattr(spec, "group_size", 1) < 2:
        errors.append(
            FieldError(
                "replay_buffer.group_replay_max_age",
                "swaps a completion into "
                "a tied group, and this algorithm has no groups of two or more",
                "use GRPO, GSPO or CISPO with group_size >= 2, or write 0",
            )
        )
    lag = getattr(buffer, "max_rollout_version_lag", None)
    if getattr(training, "reuse_prefix_cache_across_syncs", False) and not lag:
        errors.append(
            FieldError(
                "training.reuse_prefix_cache_across_syncs",
                "needs replay_buffer.max_rollout_version_lag >= 1 (kind: llm)",
            )
        )
    return errors


# -- what this machine cannot train -----------------------------------------------------------


def local_training_errors(spec: Any, manifest: Any) -> list[FieldError]:
    """What agile does not train on this machine though the format allows it, each with the
    nearest thing that runs here."""
    return [
        *_hardware_errors(spec, manifest),
        *_runtime_errors(manifest),
        *_not_yet_errors(spec, manifest),
        *_schedule_errors(spec),
        *_group_replay_errors(manifest),
        *_multiturn_errors(spec, manifest),
        *_epoch_errors(spec, manifest),
        *_constraint_errors(spec),
    ]


def _lacking(*modules: str) -> str:
    """``'; this machine lacks vllm (not installed) and a CUDA GPU (none found)'``, or ''."""
    absent = [f"{module} (not installed)" for module in modules if not options.installed(module)]
    if not options.gpu_present():
        absent.append("a CUDA GPU (none found)")
    return f"; this machine lacks {' and '.join(absent)}" if absent else ""


def _hardware_errors(spec: Any, manifest: Any) -> list[FieldError]:
    errors = []
    if getattr(spec, "use_vllm", None) and (lacking := _lacking("vllm")):
        errors.append(
            FieldError(
                "algorithm.use_vllm",
                f"vLLM generation needs the vllm package and a CUDA GPU{lacking}",
                "train here with --set "
                "algorithm.use_vllm=null (transformers generates), or on "
                "Arena with --backend arena",
            )
        )
    quantised = spec.quantization is not None and options.preset(spec.quantization) != "none"
    if quantised and (lacking := _lacking("bitsandbytes")):
        errors.append(
            FieldError(
                "algorithm.quantization",
                f"a quantised base loads through bitsandbytes on a CUDA GPU{lacking}",
                "train here with --set algorithm.quantization=null",
            )
        )
    if spec.fsdp is not None and spec.fsdp is not False:
        errors.append(
            FieldError(
                "algorithm.fsdp",
                "FSDP2 shards one model over several GPUs; "
                "agile trains each population on one device",
                "remove fsdp: LoRA adapters of a model that fits one device need no sharding",
            )
        )
    gpus = getattr(manifest.training, "training_gpus_per_agent", 1)
    if gpus > 1:
        errors.append(
            FieldError(
                "training.training_gpus_per_agent",
                f"{gpus} data-parallel GPUs per member; agile trains each member on one device",
                "remove it (1)",
            )
        )
    return errors


def _runtime_errors(manifest: Any) -> list[FieldError]:
    """What only the reference's Ray/Arena runtime runs (2.58's local trainer refuses it too)."""
    environment = manifest.environment
    errors = []
    if environment.env_image is not None:
        errors.append(
            FieldError(
                "environment.env_image",
                "a container source needs a container "
                "runtime (the reference runs it as a Pod on its Ray/Arena "
                "runtime); agile starts no containers",
                "serve the image "
                "yourself (e.g. docker run -p 8000:8000 IMAGE) and write "
                "env_url: http://127.0.0.1:8000 instead of env_image",
            )
        )
    for key in ("segment_prompt_tokens", "segment_max_images"):
        if getattr(environment, key) is not None:
            errors.append(
                FieldError(
                    f"environment.{key}",
                    "context restarts run on the reference's Ray/Arena runtime only",
                    f"remove {key}: an episode then trains as one row",
                )
            )
    return errors


def _group_replay_errors(manifest: Any) -> list[FieldError]:
    """Group replay replays into groups sampled asynchronously, as 2.58's does."""
    replay = getattr(manifest.replay_buffer, "group_replay_max_age", 0)
    if not replay or getattr(manifest.training, "rollout_mode", "colocated") == "async":
        return []
    return [
        FieldError(
            "replay_buffer.group_replay_max_age",
            "replays stored completions into groups sampled asynchronously, and "
            "training.rollout_mode is colocated",
            "set training.rollout_mode: async, or write 0",
        )
    ]


def _schedule_errors(spec: Any) -> list[FieldError]:
    schedule = getattr(spec, "cosine_lr_schedule_config", None)
    if schedule is None or schedule.num_epochs is None:
        return []
    return [
        FieldError(
            "algorithm.cosine_lr_schedule_config.num_epochs",
            "agile counts the schedule in updates (2.58's form), not in passes over the data",
            "write num_steps: the updates from the start of warm-up to the floor "
            "(passes x training rows / batch_size)",
        )
    ]


def _agile_ways(field: str, declared: Any, manifest: Any) -> tuple[Any, ...]:
    """The values of a field agile trains: its default, and those that say what agile does
    anyway (the sampling copy's log-probabilities, with asynchronous rollouts)."""
    ways = (declared.get_default(call_default_factory=True), *AGILE_WAYS.get(field, ()))
    if field == "old_logprobs_source" and manifest.training.rollout_mode == "async":
        ways = (*ways, "rollout")
    return ways


def _not_yet_errors(spec: Any, manifest: Any) -> list[FieldError]:
    sections = {
        "algorithm": spec,
        "environment": manifest.environment,
        "training": manifest.training,
    }
    errors = []
    for section, field, what in NOT_TRAINED_YET:
        owner = sections[section]
        declared = type(owner).model_fields.get(field)
        if declared is None or getattr(owner, field) in _agile_ways(field, declared, manifest):
            continue
        errors.append(
            FieldError(f"{section}.{field}", f"agile does not train {what} yet", _NOT_YET_HINT)
        )
    return errors


def _constraint_errors(spec: Any) -> list[FieldError]:
    """A reasoning budget or an answer's pattern holds transformers' generation, not vLLM's."""
    written = [key for key in ("thinking_token_budget", "constrain_answer_pattern")
               if getattr(spec, key, None) is not None]  # fmt: skip
    if not written or not options.generates_with_vllm(getattr(spec, "use_vllm", None)):
        return []
    return [
        FieldError(
            f"algorithm.{written[0]}",
            "agile holds transformers' generation to it, not vLLM's yet",
            "train with --set algorithm.use_vllm=false (transformers generates)",
        )
    ]


def _epoch_errors(spec: Any, manifest: Any) -> list[FieldError]:
    """Epochs count passes over dataset rows; an environment's episodes are a stream."""
    if spec.environment_type(manifest) != "multiturn":
        return []
    return [
        FieldError(
            f"training.{key}",
            "counts passes over a dataset's rows, and this environment's episodes never end",
            "write evo_steps (iterations per generation) and max_steps instead",
        )
        for key in ("evo_epochs", "num_epochs")
        if getattr(manifest.training, key, None) is not None
    ]


def _multiturn_errors(spec: Any, manifest: Any) -> list[FieldError]:
    """The settings agile's trainer refuses in an environment the model acts in: a ratio per
    turn, and turn-level advantages where the loss takes one advantage per episode."""
    if spec.environment_type(manifest) != "multiturn":
        return []
    name = manifest.algorithm_name
    errors = []
    level = getattr(spec, "importance_sampling_level", None)
    if level == "turn":
        errors.append(
            FieldError(
                "algorithm.importance_sampling_level",
                "turn: agile takes one "
                "importance ratio per token or per episode in a multi-turn "
                "environment, not one per turn",
                "set importance_sampling_level: token, or trajectory (one per episode)",
            )
        )
    per_episode = spec.one_advantage_per_episode or level in {"sequence", "trajectory"}
    if getattr(spec, "advantage_granularity", "auto") == "turn" and per_episode:
        errors.append(
            FieldError(
                "algorithm.advantage_granularity",
                f"turn: {name} with these "
                "settings weighs each episode by one advantage (its return's), "
                "so turn-level advantages have no place in its loss",
                "set "
                "advantage_granularity: auto (or trajectory), or use GRPO with "
                "importance_sampling_level: token",
            )
        )
    return errors


# -- warnings ---------------------------------------------------------------------------------


def manifest_warnings(spec: Any, manifest: Any) -> list[str]:
    """What is valid but probably not what the author meant."""
    return [
        *_rubric_warnings(spec, manifest),
        *_speed_warnings(spec),
        *_engine_warnings(spec),
        *_multiturn_warnings(spec, manifest),
        *_model_warnings(spec, manifest),
        *_training_warnings(manifest),
    ]


#: What a rollout over dataset rows needs to train locally (an Arena job may leave them out).
LOCAL_REASONING_FIELDS = ("rubric_file_path", "prompt_template")
_REQUIRED_HINTS = {
    "rubric_file_path": "name the Python file holding your rubric, e.g. reward.py",
    "prompt_template": "write the chat turns, e.g. user_0: 'Solve {question}'",
}


def _rubric_warnings(spec: Any, manifest: Any) -> list[str]:
    """A rollout over dataset rows without its rubric or template: an Arena job may leave them
    to the registered dataset and ``--reward-file``; local training refuses to start."""
    if spec.environment_type(manifest) != "reasoning":
        return []
    missing = [
        key for key in LOCAL_REASONING_FIELDS if getattr(manifest.environment, key, None) is None
    ]
    return [
        f"environment.{key}: not given; training locally needs it ({_REQUIRED_HINTS[key]}), "
        "Arena takes it from the registered dataset"
        + (" and --reward-file" if key != "prompt_template" else "")
        for key in missing
    ]


#: Fields read only in an environment the model acts in: (section, field).
MULTITURN_FIELDS = (
    ("algorithm", "advantage_granularity"),
    ("algorithm", "turn_advantage_trajectory_fallback"),
    ("algorithm", "action_granularity"),
    ("algorithm", "turn_ratio_pooling"),
    ("algorithm", "turn_level_clip"),
    ("algorithm", "turn_value_reduction"),
    ("environment", "strict_chat_template_boundary"),
)


def _multiturn_warnings(spec: Any, manifest: Any) -> list[str]:
    """Multi-turn settings written for an environment of single completions."""
    if spec.environment_type(manifest) == "multiturn":
        return []
    owners = {"algorithm": spec, "environment": manifest.environment}
    written = [
        f"{section}.{field}"
        for section, field in MULTITURN_FIELDS
        if field in owners[section].model_fields_set
    ]
    return [
        f"{path}: ignored, only an environment the model acts in over turns reads it"
        for path in written
    ]


def _engine_warnings(spec: Any) -> list[str]:
    """vLLM settings where vLLM was switched off, or that agile's engine does not use."""
    config, use_vllm = getattr(spec, "vllm_config", None), getattr(spec, "use_vllm", None)
    if config is None:
        return []
    if use_vllm is False:
        return [
            "algorithm.vllm_config: ignored, use_vllm is false (transformers generates; "
            "its stop_sequences still apply)"
        ]
    used = {*options.VLLM_ENGINE_OPTIONS, "stop_sequences"}
    unused = sorted(set(config.model_fields_set) - used) if use_vllm else []
    return [
        f"algorithm.vllm_config.{key}: ignored, agile's vLLM engine does not use it"
        for key in unused
    ]


def _speed_warnings(spec: Any) -> list[str]:
    fields = type(spec).model_fields
    changed = [
        name
        for name in SPEED_SETTINGS
        if name in fields and getattr(spec, name) != fields[name].default
    ]
    warnings = [
        f"algorithm.{name}: a speed or memory setting of the reference's GPU runtime; "
        "agile trains the same loss without it"
        for name in changed
    ]
    if spec.env_type == "sft" and spec.beta is not None:
        warnings.append("algorithm.beta: ignored, SFT has no reference policy to stay near")
    return warnings


def _model_warnings(spec: Any, manifest: Any) -> list[str]:
    network, warnings = manifest.network, []
    if spec.lora_config is not None and spec.lora_config != getattr(network, "lora_config", None):
        if getattr(network, "lora_config", None) is not None:
            warnings.append("algorithm.lora_config: ignored, network.lora_config replaces it")
        else:
            warnings.append(
                "algorithm.lora_config: used because network.lora_config is not "
                "given; write it there"
            )
    written = getattr(network, "pretrained_model_name_or_path", None)
    ours = spec.pretrained_model_name_or_path
    if written and ours and written != ours:
        warnings.append(
            f"algorithm.pretrained_model_name_or_path: ignored, "
            f"network.pretrained_model_name_or_path ({written}) overrides it"
        )
    context = getattr(network, "max_context_length", None)
    if "max_model_len" in spec.model_fields_set and context not in (None, spec.max_model_len):
        warnings.append(
            f"algorithm.max_model_len: ignored, network.max_context_length ({context}) overrides it"
        )
    return warnings


def _training_warnings(manifest: Any) -> list[str]:
    training, warnings = manifest.training, []
    teacher_forced = getattr(manifest.environment, "env_type", None) == "dataset"
    if teacher_forced and getattr(training, "eval_samples_per_task", 0):
        warnings.append(
            "training.eval_samples_per_task: ignored, a dataset environment is "
            "scored by its loss or preference accuracy, not by samples"
        )
    if teacher_forced and getattr(training, "rollout_mode", "colocated") == "async":
        warnings.append(
            "training.rollout_mode: ignored, a dataset environment samples "
            "nothing to overlap with learning"
        )
    interval = getattr(training, "evaluation_interval", None)
    every = (f"every {training.evo_epochs} passes over the training split"
             if getattr(training, "evo_epochs", None) is not None
             else f"every evo_steps = {training.evo_steps} iterations")  # fmt: skip
    if "evaluation_interval" in training.model_fields_set and interval != training.evo_steps:
        warnings.append(
            f"training.evaluation_interval: ignored ({interval}), agile scores every member at "
            f"the end of each generation ({every}) so that selection ranks fresh fitness"
        )
    if getattr(training, "max_wall_seconds", None) is not None:
        warnings.append(
            "training.max_wall_seconds: ignored, agile stops training at max_steps per member "
            "(a stop by the clock could not be resumed or repeated exactly)"
        )
    if training.eval_steps is not None:
        warnings.append("training.eval_steps: ignored, members are scored on the held-out split")
    if training.eval_loop != 1:
        warnings.append(
            "training.eval_loop: ignored, members are scored once on the held-out split"
        )
    return warnings
