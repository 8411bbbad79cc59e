"""LLM fine-tuning on Arena: what Arena cannot take, the payload it reads, the reward file.

Arena's LLM job (``arena-api.md`` §6) names a dataset registered on Arena in
``environment.name``, a Hugging Face model in the network section (a finetuning spec whose
model name and context length Arena copies into the algorithm section), and sends the
reasoning reward function as a file part of the submission. Its environment section keeps
the August form: ``env_type`` is ``reasoning``, ``preference`` or ``sft`` (the LLM
environment's ``regime``) and the rubric is ``reward_fn_name`` in ``reward_file_path``; an
environment the model acts in (``entrypoint``, ``env_url``, ``env_image``) has no place in
it. Arena drops algorithm and training fields it does not know (with a warning); agile
leaves them out itself and says which written ones were left out. Reads the manifest only
through its validated specs, so importing this module imports no LLM library and not the
LLM plugin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agile_cli import FieldError, Spec, TrainingManifest, UsageError

#: The ``llm`` environment builder's name.
BUILDER = "llm"
#: Algorithms trained on a reasoning dataset and a reward function.
REASONING = frozenset({"GRPO", "GSPO", "CISPO", "LLMPPO", "LLMREINFORCE"})
#: Every LLM algorithm Arena runs.
LLM_ALGORITHMS = REASONING | {"DPO", "SFT"}
#: Endings of local dataset files (what the ``llm`` environment reads locally).
DATA_FILES = (".parquet", ".pq", ".jsonl", ".json", ".csv")
#: The largest reward file sent with a submission.
MAX_REWARD_BYTES = 1024 * 1024

# The algorithm fields of Arena's LLM specs (§6.2); ``max_output_tokens`` is never sent.
_BASE = (
    "batch_size", "hp_config", "beta", "max_grad_norm", "update_epochs", "reduce_memory_peak",
    "use_separate_reference_adapter", "calc_position_embeddings", "gradient_checkpointing",
    "use_liger_loss", "seed",
)  # fmt: skip
_SAMPLING = (
    "clip_coef", "temperature", "min_output_tokens", "cosine_lr_schedule_config",
    "vllm_config", "use_vllm",
)  # fmt: skip
_GROUP = (*_BASE, *_SAMPLING, "group_size", "lr")
ALGORITHM_FIELDS: dict[str, tuple[str, ...]] = {
    "GRPO": _GROUP,
    "GSPO": _GROUP,
    "CISPO": _GROUP,
    "LLMPPO": (
        *_BASE, *_SAMPLING, "lr_actor", "lr_critic", "vf_coef", "gamma", "gae_lambda",
        "action_granularity",
    ),
    "LLMREINFORCE": (*_BASE, *_SAMPLING, "lr", "gamma", "action_granularity"),
    "DPO": (*_BASE, "lr"),
    "SFT": (*_BASE, "lr"),
}  # fmt: skip
#: The training fields of Arena's TrainingSpec (§6.2).
TRAINING_FIELDS = (
    "max_steps", "evo_steps", "pop_size", "eval_steps", "eval_loop", "hpo", "target_score",
    "learning_delay", "checkpoint_steps", "checkpoint_path", "overwrite_checkpoints",
    "evaluation_interval", "num_epochs", "episode_steps", "sum_scores", "reporting_interval",
    "experience_sharing",
)  # fmt: skip
#: Arena's ``vllm_config`` and ``cosine_lr_schedule_config`` fields (§6.2).
NESTED_FIELDS: dict[str, tuple[str, ...]] = {
    "vllm_config": (
        "tensor_parallel_size", "gpu_memory_utilization", "max_num_seqs", "enforce_eager",
        "sleep_mode", "dtype", "quantization", "stop_sequences", "presence_penalty",
        "frequency_penalty", "kv_cache_memory_bytes",
    ),
    "cosine_lr_schedule_config": ("num_epochs", "warmup_proportion"),
}  # fmt: skip
#: What an LLM job's environment section tells Arena (the reference's August LLMEnvSpec
#: fields), each with the LLM environment's field it is read from.
ENVIRONMENT_FIELDS = {
    "columns": "columns", "prompt_template": "prompt_template", "max_reward": "max_reward",
    "train_test_split": "train_test_split", "reward_fn_name": "rubric_name",
    "response_column": "response_column",
}  # fmt: skip
#: Environment fields the payload reads otherwise (the dataset's name, the kind, the rubric's
#: file), or that say nothing to a dataset job on Arena (its one environment and one turn).
_READ_ENVIRONMENT = frozenset({
    *ENVIRONMENT_FIELDS.values(), "name", "version", "env_type", "objective", "dataset",
    "dataset_path", "hf_dataset_id", "rubric_file_path", "num_envs", "max_turns",
    "strict_chat_template_boundary",
})  # fmt: skip
#: Environment fields agile reads that Arena's LLM environment lacks, with what Arena does.
AGILE_ENVIRONMENT_FIELDS = {
    "apply_chat_template": "Arena renders reasoning prompts by the chat template and reads sft "
    "and preference prompts as written",
    "reward_timeout": "Arena's environment has no such field",
}
#: What to do instead of an environment the model acts in, by its source.
_SOURCE_HINTS = {
    "entrypoint": "train it with --backend local, or name a dataset registered on Arena (with "
    "a prompt template and a rubric)",
    "env_url": "name a dataset registered on Arena (with a prompt template and a rubric)",
}
_LORA_FIELDS = ("lora_r", "lora_alpha", "target_modules", "task_type", "lora_dropout")
_MODEL_COPIES = ("pretrained_model_name_or_path", "max_model_len", "lora_config")

DATASET_HINT = (
    "register it on Arena and name it here: AgileRL's `arena datasets create NAME --category "
    "{category} --file data.csv --column-mapping JSON` uploads a CSV (--hf-dataset ID --hf-split "
    "train imports a Hub dataset; agile has no datasets command yet); then write "
    "environment.dataset: NAME"
)
LLM_PROJECT_HINT = "create one with `agile arena projects create NAME --llm-based`, then --project"


def is_llm(manifest: TrainingManifest) -> bool:
    """Whether the manifest is an LLM fine-tuning job."""
    return manifest.algorithm_name in LLM_ALGORITHMS


def eligibility_errors(manifest: TrainingManifest) -> list[FieldError]:
    """What Arena cannot take from an LLM manifest (no request is needed to tell)."""
    return [
        *_builder_errors(manifest),
        *_environment_errors(manifest),
        *_dataset_errors(manifest),
        *_network_errors(manifest),
        *_algorithm_errors(manifest),
    ]


def _builder_errors(manifest: TrainingManifest) -> list[FieldError]:
    if manifest.environment_builder == BUILDER:
        return []
    return [
        FieldError(
            "environment.builder",
            f"Arena trains {manifest.algorithm_name} only on the '{BUILDER}' environment",
            f"use builder: {BUILDER} (a dataset, a prompt template and a reward function)",
        )
    ]


def _environment_errors(manifest: TrainingManifest) -> list[FieldError]:
    """An environment the model acts in: Arena's LLM jobs train on registered datasets."""
    if environment_type(manifest) != "multiturn":
        return []
    source = getattr(manifest.environment, "source", None) or "entrypoint"
    value = getattr(manifest.environment, source, None)
    return [
        FieldError(
            f"environment.{source}",
            f"{value!r} is an environment the model acts in; Arena's LLM jobs train on a "
            "dataset registered on Arena (reasoning, preference or sft), not on an environment",
            _SOURCE_HINTS.get(source, _SOURCE_HINTS["env_url"]),
        )
    ]


def _dataset_errors(manifest: TrainingManifest) -> list[FieldError]:
    dataset = getattr(manifest.environment, "dataset", None)
    if not dataset or not _is_local_file(dataset):
        return []
    category = environment_type(manifest)
    return [
        FieldError(
            "environment.dataset",
            f"'{dataset}' is a local file; Arena cannot read files on this machine",
            DATASET_HINT.format(category=category),
        )
    ]


def _is_local_file(dataset: str) -> bool:
    return dataset.lower().endswith(DATA_FILES) or Path(dataset).expanduser().exists()


def _network_errors(manifest: TrainingManifest) -> list[FieldError]:
    errors = []
    if getattr(manifest.network, "adapter_path", None):
        errors.append(
            FieldError(
                "network.adapter_path",
                "a local LoRA adapter folder is an agile addition Arena cannot start from",
                "remove adapter_path to start from the base model on Arena, or train it with "
                "--backend local",
            )
        )
    model = _model(manifest)
    if model and _is_local_model(model):
        written = getattr(manifest.network, "pretrained_model_name_or_path", None)
        where = "network" if written else "algorithm"
        errors.append(
            FieldError(
                f"{where}.pretrained_model_name_or_path",
                f"'{model}' is a local model folder; Arena loads base models from the Hugging "
                "Face Hub",
                "name a Hub model id, e.g. Qwen/Qwen2.5-0.5B-Instruct, or train it with "
                "--backend local",
            )
        )
    return errors


def _is_local_model(model: str) -> bool:
    return model.startswith(("/", "./", "../", "~")) or Path(model).expanduser().is_dir()


def _model(manifest: TrainingManifest) -> str | None:
    network = getattr(manifest.network, "pretrained_model_name_or_path", None)
    return network or getattr(manifest.algorithm, "pretrained_model_name_or_path", None)


def _algorithm_errors(manifest: TrainingManifest) -> list[FieldError]:
    """Algorithm settings Arena's specs (§6) cannot express or refuse."""
    algorithm = manifest.algorithm
    errors = []
    bounds = getattr(algorithm, "clip_bounds", None)
    if bounds is not None:
        errors.append(
            FieldError(
                "algorithm.clip_bounds",
                f"{list(bounds)}: Arena takes one clip coefficient between 0 and 1, not "
                "[low, high]",
                "write one number, e.g. clip_coef: 0.2, or train it with --backend local",
            )
        )
    schedule = getattr(algorithm, "cosine_lr_schedule_config", None)
    steps = getattr(schedule, "num_steps", None)
    if steps is not None:
        errors.append(
            FieldError(
                "algorithm.cosine_lr_schedule_config.num_steps",
                f"{steps}: Arena's cosine schedule lasts num_epochs passes over the training "
                "split; it counts no updates",
                "write num_epochs: N instead, or train it with --backend local",
            )
        )
    return errors + _vllm_errors(algorithm)


def _vllm_errors(algorithm: Spec) -> list[FieldError]:
    """Arena's rule: ``use_vllm: true`` needs ``vllm_config`` (§6.1)."""
    if getattr(algorithm, "use_vllm", None) is not True:
        return []
    if getattr(algorithm, "vllm_config", None) is not None:
        return []
    return [
        FieldError(
            "algorithm.vllm_config",
            "is missing: Arena generates with vLLM (use_vllm: true) only given vllm_config",
            "write vllm_config: {} for Arena's engine defaults, or remove use_vllm",
        )
    ]


def environment_type(manifest: TrainingManifest) -> str:
    """Arena's ``env_type`` of the job: the environment's regime (``reasoning``,
    ``preference``, ``sft``, or ``multiturn``, which Arena cannot take), else the
    algorithm's."""
    regime = getattr(manifest.environment, "regime", None)
    return str(regime or getattr(manifest.algorithm, "env_type", "reasoning"))


def is_reasoning(manifest: TrainingManifest) -> bool:
    """Whether the job learns from a reward function (which then travels with it)."""
    return manifest.algorithm_name in REASONING and environment_type(manifest) == "reasoning"


# -- the payload ------------------------------------------------------------------------------


def llm_payload(data: dict[str, Any], manifest: TrainingManifest) -> dict[str, Any]:
    """The sections of an LLM job, from the manifest's plain data (``to_dict``)."""
    return {
        "algorithm": _algorithm(data["algorithm"], manifest),
        "environment": _environment(data["environment"], manifest),
        "training": _known(data["training"], TRAINING_FIELDS),
        "network": _network(manifest),
    }


def _known(section: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return {key: section[key] for key in fields if section.get(key) is not None}


def _algorithm(section: dict[str, Any], manifest: TrainingManifest) -> dict[str, Any]:
    """Arena's fields of the algorithm, its vLLM and schedule settings as Arena's models."""
    if "lr_critic" in section and section["lr_critic"] is None:  # null: the actor's rate
        section = {**section, "lr_critic": section.get("lr_actor")}
    algorithm = _known(section, ALGORITHM_FIELDS[manifest.algorithm_name])
    for key, fields in NESTED_FIELDS.items():
        settings = getattr(manifest.algorithm, key, None)
        if key in algorithm and isinstance(settings, Spec):
            algorithm[key] = _written(settings, fields)
    algorithm["pretrained_model_name_or_path"] = _model(manifest)
    algorithm["max_model_len"] = _context_length(manifest)
    return {"name": manifest.algorithm_name, **algorithm}


def _written(settings: Spec, fields: tuple[str, ...]) -> dict[str, Any]:
    """The settings written in ``fields`` (Arena fills in its own defaults for the rest)."""
    written = settings.model_dump(mode="json", exclude_unset=True, exclude_none=True)
    return {key: written[key] for key in fields if key in written}


def _context_length(manifest: TrainingManifest) -> int:
    written = getattr(manifest.network, "max_context_length", None)
    value: int = written or getattr(manifest.algorithm, "max_model_len", None) or 1024
    return int(value)


def _environment(section: dict[str, Any], manifest: TrainingManifest) -> dict[str, Any]:
    """The August form Arena reads: the dataset's name, the regime, the rubric's spellings."""
    environment: dict[str, Any] = {"name": _dataset_name(manifest)}
    if section.get("version") is not None:  # Arena's environment model has it
        environment["version"] = section["version"]
    environment["env_type"] = environment_type(manifest)
    for arena, agile in ENVIRONMENT_FIELDS.items():
        if section.get(agile) is not None:
            environment[arena] = section[agile]
    path = getattr(manifest.environment, "rubric_file_path", None)
    if path and is_reasoning(manifest):  # the file itself travels as the reward_file part
        environment["reward_file_path"] = Path(path).name
    return environment


def _dataset_name(manifest: TrainingManifest) -> str:
    """The registered dataset the job names: the environment's dataset, else its name."""
    environment = manifest.environment
    return str(getattr(environment, "named_dataset", None) or environment.name)


def _network(manifest: TrainingManifest) -> dict[str, Any]:
    network: dict[str, Any] = {
        "pretrained_model_name_or_path": _model(manifest),
        "max_context_length": _context_length(manifest),
    }
    lora = _lora(manifest)
    if lora:
        network["lora_config"] = _known(lora, _LORA_FIELDS)
    return network


def _lora(manifest: TrainingManifest) -> dict[str, Any]:
    """The LoRA settings training would use (the algorithm resolves them), as plain data."""
    lora_of = getattr(manifest.algorithm, "lora", None)
    lora = lora_of(manifest) if callable(lora_of) else None
    return lora.model_dump(mode="json") if lora is not None else {}


# -- what is left out -------------------------------------------------------------------------


def left_out(manifest: TrainingManifest) -> list[str]:
    """A warning for each written field the payload leaves out (Arena would drop it)."""
    training = manifest.training.model_fields_set - set(TRAINING_FIELDS)
    return [
        *_algorithm_left_out(manifest),
        *[f"training.{key}: agile only, not sent to Arena" for key in sorted(training)],
        *_environment_left_out(manifest),
        *_other_left_out(manifest),
    ]


def _algorithm_left_out(manifest: TrainingManifest) -> list[str]:
    known = {*ALGORITHM_FIELDS[manifest.algorithm_name], *_MODEL_COPIES}
    written = manifest.algorithm.model_fields_set
    warnings = [
        f"algorithm.{key}: not sent to Arena, which has no such field"
        for key in sorted(written - known - {"max_output_tokens"})
    ]
    if "max_output_tokens" in written:
        warnings.append("algorithm.max_output_tokens: never sent; Arena sets completion lengths")
    for key, fields in NESTED_FIELDS.items():
        settings = getattr(manifest.algorithm, key, None)
        unknown = settings.model_fields_set - {*fields, "num_steps"} if settings else set()
        warnings += [
            f"algorithm.{key}.{name}: Arena's {key} has no such field; not sent"
            for name in sorted(unknown)
        ]
    return warnings


def _environment_left_out(manifest: TrainingManifest) -> list[str]:
    written = manifest.environment.model_fields_set - _READ_ENVIRONMENT
    return [
        f"environment.{key}: agile only, not sent to Arena ({AGILE_ENVIRONMENT_FIELDS[key]})"
        if key in AGILE_ENVIRONMENT_FIELDS
        else f"environment.{key}: not sent to Arena, whose LLM environment has no such field"
        for key in sorted(written)
    ]


def _other_left_out(manifest: TrainingManifest) -> list[str]:
    """The LoRA settings and the replay buffer (``kind: llm``) Arena's job lacks."""
    warnings = []
    if _lora(manifest).get("target_parameters"):
        warnings.append("network.lora_config.target_parameters: Arena's LoRA has none; not sent")
    buffer = manifest.replay_buffer
    if buffer is not None and buffer.model_fields_set:
        warnings.append(
            "replay_buffer: not sent to Arena, whose LLM jobs have no queue of generated groups"
        )
    return warnings


# -- the reward file --------------------------------------------------------------------------


def reward_file(manifest: TrainingManifest) -> Path | None:
    """The reward file a reasoning job sends (relative paths: from the working directory)."""
    path = getattr(manifest.environment, "rubric_file_path", None)
    if not path or not is_reasoning(manifest):
        return None
    return checked_reward_file(Path(path), "environment.rubric_file_path")


def checked_reward_file(path: Path, where: str = "--reward-file") -> Path:
    """``path`` made absolute, after checking that it can be sent as a reward file.

    :param where: how the message names the source of the path.
    :raises UsageError: it is missing, not a ``.py`` file, or over :data:`MAX_REWARD_BYTES`.
    """
    target = (Path.cwd() / path.expanduser()).absolute()
    if not target.is_file():
        what = "is a folder" if target.is_dir() else "not found"
        raise UsageError(
            f"{where}: reward file {target} {what}",
            "name the Python file holding your reward function; a relative path starts at the "
            "working directory",
        )
    if target.suffix != ".py":
        raise UsageError(
            f"{where}: reward file {target} is not a .py file",
            "Arena imports the reward function from a Python module",
        )
    size = target.stat().st_size
    if size > MAX_REWARD_BYTES:
        raise UsageError(
            f"{where}: reward file {target} is {size:,} bytes, over the {MAX_REWARD_BYTES:,} "
            "sent with a submission",
            "keep the reward function in a small module; data belongs in the dataset",
        )
    return target


def project_warning(projects: list[dict[str, Any]], project: str) -> str | None:
    """A warning when ``project`` is listed with a type that is not an LLM project's."""
    row = next((row for row in projects if row.get("name") == project), None)
    kind = row.get("type") if row else None
    if not isinstance(kind, str) or not kind or "llm" in kind.lower():
        return None
    return (
        f"project '{project}' is a '{kind}' project and this is an LLM job; Arena may refuse "
        f"it ({LLM_PROJECT_HINT})"
    )
