"""The manifest sections of LLM fine-tuning: the algorithms, the ``llm`` environment, the
network section (a pretrained model and its LoRA adapters) and the training fields.

Light: pydantic and agile_cli only, so ``agile validate`` imports no LLM library. Nothing
here opens a dataset, a reward file or a model: validation checks the shape of what a
manifest names, training checks that it exists.

How a run counts
----------------
A *step* is one prompt (one sample of the training split) a member trains on, so
``training.max_steps`` is each member's sample budget, as for every agile algorithm. An
*iteration* reads ``algorithm.batch_size`` prompts and updates the member once (or
``update_epochs`` times). One *generation* is ``training.evo_steps`` iterations (default 5);
after it every member is scored on the held-out split, and the population is selected and
mutated. Members are LoRA adapters over one shared, frozen base model: only hyperparameters
mutate (``rl_hp``); there is no architecture, parameter-noise or activation mutation.

Defaults
--------
The reference format has two sets of defaults: those its specs declare and those its
algorithms' constructors apply when a field is left out. Agile keeps one set:

- ``batch_size`` 16 prompts per iteration for every algorithm;
- ``beta`` (KL penalty or DPO temperature): GRPO, GSPO and CISPO 0.001; LLMPPO and
  LLMREINFORCE 0.01; DPO 0.1; SFT has none (writing one is an error);
- ``max_grad_norm`` 0.1 for GRPO, GSPO, CISPO, DPO and SFT; 1.0 for LLMPPO and LLMREINFORCE;
- ``lr`` 5e-6 for GRPO, GSPO, CISPO, LLMREINFORCE and DPO: the value the reference's shipped
  manifests use (its constructors' 5e-7 barely moves a LoRA adapter, its specs' 1e-4 is too
  high for RL fine-tuning); SFT 5e-5; LLMPPO ``lr_actor`` 5e-6 and ``lr_critic`` 5e-5 (the
  value head starts from scratch);
- ``group_size`` 8 completions per prompt (required in the reference), ``temperature`` 0.9,
  ``max_output_tokens`` 1024;
- ``gradient_checkpointing`` on, ``seed`` 42, five iterations per generation.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import string
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from agile_cli import (
    AlgorithmSpec,
    EnvironmentSpec,
    FieldError,
    Spec,
    StarterValue,
    TrainingSpec,
    limits,
)
from agile_cli.helpers import located_error

EnvType = Literal["reasoning", "preference", "sft", "multiturn"]

#: Roles a prompt template's turn may have.
ROLES = ("system", "user", "assistant")
#: Endings of the local dataset files the ``llm`` environment reads.
DATA_FILES = (".parquet", ".pq", ".jsonl", ".json", ".csv")
#: Endings that name a file of a kind the environment does not read.
_OTHER_FILES = (".txt", ".tsv", ".arrow", ".xlsx", ".xls", ".yaml", ".yml", ".pkl", ".zip", ".gz")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
_TURN_KEY = re.compile(r"^[a-z]+_\d+$")


# --------------------------------------------------------------------------------------------
# network


class LoraSpec(Spec):
    """``network.lora_config``: the LoRA adapters every population member trains."""

    lora_r: int = Field(default=16, ge=1, description="Rank of each low-rank update.")
    lora_alpha: int = Field(
        default=32,
        ge=1,
        description="Scale numerator of the update (its scale is lora_alpha / lora_r).",
    )
    target_modules: str | list[str] = Field(
        default="all-linear",
        description="Module names to adapt, or 'all-linear' for every linear layer but the head.",
    )
    target_parameters: list[str] | None = Field(
        default=None,
        description=(
            "Parameter paths of packed (mixture-of-experts) weights to adapt directly; "
            "needs lora_dropout 0."
        ),
    )
    task_type: str = Field(default="CAUSAL_LM", min_length=1, description="PEFT task type.")
    lora_dropout: float = Field(
        default=0.05, ge=0, le=1, description="Dropout on the input of each LoRA update."
    )

    @model_validator(mode="after")
    def _parameters_without_dropout(self) -> LoraSpec:
        if self.target_parameters is not None and self.lora_dropout != 0:
            raise located_error(
                "lora_dropout",
                f"{self.lora_dropout} with target_parameters: adapted parameters take no dropout",
                "set lora_dropout: 0",
            )
        return self

    def peft_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``peft.LoraConfig``."""
        kwargs: dict[str, Any] = {
            "r": self.lora_r,
            "lora_alpha": self.lora_alpha,
            "target_modules": self.target_modules,
            "lora_dropout": self.lora_dropout,
            "task_type": self.task_type,
        }
        if self.target_parameters is not None:
            kwargs["target_parameters"] = self.target_parameters
        return kwargs


class FinetuningNetworkSpec(Spec):
    """The network section of LLM algorithms: the pretrained model and its adapters.

    Written, it takes precedence over the algorithm section's ``pretrained_model_name_or_path``,
    ``max_model_len`` and ``lora_config``.
    """

    pretrained_model_name_or_path: str | None = Field(
        default=None,
        min_length=1,
        description=(
            "Hugging Face model id or local directory of the base model; overrides "
            "algorithm.pretrained_model_name_or_path. One of the two is required."
        ),
    )
    max_context_length: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Tokens of prompt and completion together at most; null: algorithm.max_model_len."
        ),
    )
    lora_config: LoraSpec | None = Field(
        default=None,
        description=(
            "The adapters' LoRA settings; replaces algorithm.lora_config. null: "
            "algorithm.lora_config, else the defaults."
        ),
    )
    adapter_path: str | None = Field(
        default=None,
        min_length=1,
        description=(
            "A LoRA adapter in PEFT's folder format (e.g. an earlier run's elite/) that every "
            "member starts from; its own adapter_config.json then replaces lora_config (an "
            "agile addition)."
        ),
    )

    starter_values: ClassVar[Mapping[str, StarterValue]] = {
        "pretrained_model_name_or_path": StarterValue(
            "Qwen/Qwen2.5-0.5B-Instruct",
            "any causal LM (`agile llm tiny-model models/tiny-llm` makes a tiny one)",
            placeholder=True,
        ),
    }


# --------------------------------------------------------------------------------------------
# training


class LLMTraining(TrainingSpec):
    """``training`` fields of LLM fine-tuning. A step is one prompt a member trains on
    (``max_steps`` is each member's budget); ``evo_steps`` counts iterations of
    ``algorithm.batch_size`` prompts; a generation is ``evo_steps`` iterations, after which every
    member is scored on the held-out split and the population is selected and mutated."""

    evaluation_interval: int = Field(
        default=10,
        ge=1,
        le=limits.ITERATIONS,
        description=(
            "Accepted for compatibility: agile scores every member at the end of each "
            "generation (every evo_steps iterations), so selection ranks fresh fitness; a "
            "different value is reported and not used."
        ),
    )
    num_epochs: int | None = Field(
        default=None,
        ge=1,
        le=limits.ITERATIONS,
        description=(
            "A member stops after reading the training split this many times (max_steps still "
            "applies); null: no limit but max_steps."
        ),
    )
    max_wall_seconds: float | None = Field(
        default=None, gt=0, description="Multi-turn training only: ignored by agile (reported)."
    )
    eval_rows: int | None = Field(
        default=256,
        ge=1,
        description=(
            "Held-out rows each evaluation scores (the first ones of the test split, the same "
            "every time; an agile addition); null: the whole test split."
        ),
    )

    starter_values: ClassVar[Mapping[str, StarterValue]] = {
        "max_steps": StarterValue(3_200, "a first run's budget of prompts (200 iterations of 16)"),
    }

    def generation_steps(self, algorithm: Any) -> int:
        """``evo_steps`` iterations of the algorithm's ``batch_size`` prompts, in prompts."""
        assert self.evo_steps is not None, "resolved during validation"
        return self.evo_steps * int(algorithm.batch_size)


# --------------------------------------------------------------------------------------------
# environment


class LLMEnvSpec(EnvironmentSpec):
    """The ``llm`` environment: prompts from a dataset, rewards from your function.

    ``name`` is the run's label; written alone it also names the dataset (the reference spells
    the dataset ``name``). With both, ``dataset`` is the data.
    """

    name: str = Field(
        default="llm",
        min_length=1,
        description="Label of the run; default: the dataset. Written alone, it is the dataset.",
    )
    env_type: EnvType | None = Field(
        default=None,
        description=(
            "reasoning (GRPO, GSPO, CISPO, LLMPPO, LLMREINFORCE), preference (DPO) or sft (SFT); "
            "null: the algorithm's. multiturn: episodes of a conversation with an environment "
            "(env_name: a GEM game, or entrypoint: your own), for the reward-based algorithms."
        ),
    )
    dataset: str | None = Field(
        default=None,
        description=(
            "A local .parquet, .pq, .jsonl, .json or .csv file, or a Hugging Face dataset id "
            "('owner/name'); split into training and held-out parts by train_test_split."
        ),
    )
    columns: dict[str, str] | None = Field(
        default=None, description="Renames of the dataset's columns: source name -> name used here."
    )
    prompt_template: dict[str, str] | None = Field(
        default=None,
        description=(
            "Chat turns in order, keyed role_N (system_0, user_1, assistant_2, ...); each value "
            "may hold {column} placeholders filled from the row. Required for reasoning."
        ),
    )
    apply_chat_template: bool | None = Field(
        default=None,
        description=(
            "Render prompts through the tokenizer's chat template as chat turns. null: yes for "
            "reasoning and with a prompt_template; no for sft and preference rows of a plain "
            "prompt column, which are read as written (with the tokenizer's own special "
            "tokens) and followed by the response, as AgileRL reads them."
        ),
    )
    max_reward: float | None = Field(
        default=None,
        description="The reward of a correct answer: the share reaching it is reported.",
    )
    train_test_split: float = Field(
        default=0.9,
        description=(
            "Fraction of the rows used for training, strictly between 0 and 1; the rest is the "
            "held-out split members are scored on."
        ),
    )
    reward_file_path: str | None = Field(
        default=None, description="Python file holding the reward function (reasoning only)."
    )
    reward_fn_name: str | None = Field(
        default=None,
        description="Name of the reward function in reward_file_path: (completion, answer, "
        "prompt) -> float.",
    )
    response_column: str = Field(
        default="response", min_length=1, description="SFT: the column holding the target response."
    )
    reward_timeout: float = Field(
        default=30.0,
        gt=0,
        le=86_400,
        description="Seconds one call of the reward function may take; a longer call stops "
        "the run, naming the function and the completion it was scoring.",
    )
    env_name: str | None = Field(
        default=None,
        description="Multi-turn: a GEM environment id, e.g. game:GuessTheNumber-v0-easy.",
    )
    entrypoint: str | None = Field(
        default=None, description="Multi-turn: FILE.py:FUNCTION returning your environment."
    )
    env_config: dict[str, Any] | None = Field(
        default=None, description="Multi-turn: keyword arguments of entrypoint."
    )
    max_turns: int | None = Field(
        default=None, ge=1, description="Multi-turn: turns per episode at most."
    )
    strict_chat_template_boundary: bool = Field(
        default=True,
        description="Multi-turn: fail (true) or warn (false) when the chat template cannot "
        "mark where a turn ends.",
    )

    starter_values: ClassVar[Mapping[str, StarterValue]] = {
        "name": StarterValue("llm"),
        "dataset": StarterValue(
            "data/train.jsonl", "your .jsonl/.parquet/.csv file or a Hub id", placeholder=True
        ),
    }

    @model_validator(mode="before")
    @classmethod
    def _name_and_dataset(cls, data: Any) -> Any:
        """``name`` alone is the dataset too; ``dataset`` alone labels the run."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        named = data.get("dataset") is None and isinstance(data.get("name"), str)
        if named and data.get("env_name") is None and data.get("entrypoint") is None:
            data["dataset"] = data["name"]
        if "name" not in data:
            label = data.get("dataset") or data.get("env_name") or data.get("entrypoint")
            if isinstance(label, str) and label:
                data["name"] = label
        return data

    @field_validator("dataset")
    @classmethod
    def _dataset_shape(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if value.lower().endswith(DATA_FILES):
            return value
        wanted = (
            "a local .parquet, .pq, .jsonl, .json or .csv file, or a Hugging Face dataset id "
            "like 'owner/name'"
        )
        pathlike = value.startswith(("/", "./", "../", "~")) or "\\" in value
        if pathlike or value.lower().endswith(_OTHER_FILES) or not _HUB_ID.match(value):
            raise ValueError(f"{value!r} is not {wanted}")
        return value

    @field_validator("prompt_template")
    @classmethod
    def _turns(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return value
        if not value:
            raise ValueError("has no turns; write at least one, e.g. user_0: '{question}'")
        for key, text in value.items():
            role = key.split("_", 1)[0]
            if not _TURN_KEY.match(key) or role not in ROLES:
                raise located_error(
                    key,
                    f"turn key {key!r} is not role_N with a role of {', '.join(ROLES)}",
                    "name turns like system_0, user_1, assistant_2",
                )
            try:
                fields = [name for _, name, _, _ in string.Formatter().parse(text) if name]
            except ValueError as exc:
                raise located_error(
                    key, f"is not a template: {exc}", "write {column} placeholders; {{ for a brace"
                ) from None
            for name in fields:
                if not name.isidentifier():
                    raise located_error(
                        key,
                        f"placeholder {{{name}}} is not a column name",
                        "write {column}; double a literal brace as {{ or }}",
                    )
        return value

    @field_validator("train_test_split")
    @classmethod
    def _both_parts(cls, value: float) -> float:
        if not 0 < value < 1:
            raise ValueError(
                f"{value} must be strictly between 0 and 1: training needs a train part and "
                "scoring a held-out part"
            )
        return value


# --------------------------------------------------------------------------------------------
# algorithms


def _gpu_present() -> bool:
    """Whether this machine has an NVIDIA GPU and driver (without importing torch)."""
    return os.path.exists("/proc/driver/nvidia") or shutil.which("nvidia-smi") is not None


def _lacking(module: str) -> str:
    """``'; this machine lacks vllm (not installed) and a CUDA GPU (none found)'``: the
    pieces that a feature would need and this machine does not have, or ``''``."""
    absent = [f"{module} (not installed)"] if not _installed(module) else []
    if not _gpu_present():
        absent.append("a CUDA GPU (none found)")
    return f"; this machine lacks {' and '.join(absent)}" if absent else ""


#: ``vllm_config`` settings the vLLM engine takes, and their values when not given.
VLLM_ENGINE_OPTIONS: dict[str, Any] = {
    "tensor_parallel_size": 1,
    "gpu_memory_utilization": 0.3,
    "max_num_seqs": None,
    "enforce_eager": None,
}

#: AgileRL's quantisation presets, as :func:`_preset` spells them.
QUANTIZATION_PRESETS = frozenset({"none", "int8", "nf4", "4bit", "4-bit", "bnb-4bit", "bnb_4bit"})


def _preset(value: str | dict[str, Any]) -> str | None:
    """A quantisation preset without case or spaces; None for a mapping of settings."""
    return None if isinstance(value, dict) else "".join(value.split()).lower()


def _installed(module: str) -> bool:
    """Whether a top-level module can be imported (found, not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


#: Fields accepted for compatibility and ignored: (field, reason), warned about when the
#: value is not the field's default.
_IGNORED_ALGORITHM_FIELDS: tuple[tuple[str, str], ...] = (
    ("cosine_lr_schedule_config", "agile keeps the learning rate constant"),
    ("use_liger_loss", "agile does not use Liger kernels"),
    ("activation_offload", "agile does not offload activations"),
    ("use_sequence_packing", "agile does not pack sequences"),
    ("reduce_memory_peak", "agile does not split the reference pass"),
    ("chunk_rows", "agile does not chunk the log-probability pass"),
    ("mini_batch_size", "agile splits batches by micro_batch_size_per_gpu only"),
    ("lora_target_scope", "agile adapts the modules of lora_config.target_modules"),
    (
        "use_separate_reference_adapter",
        "agile's reference policy is always the base model with the adapters disabled",
    ),
    ("calc_position_embeddings", "agile always lets the model compute position embeddings"),
    ("loss_norm", "agile averages the loss per micro-batch"),
    ("vllm_config", "use_vllm is false"),
    ("vllm_importance_sampling_correction", "agile scores vLLM's samples with the training model"),
    ("vllm_importance_sampling_cap", "agile scores vLLM's samples with the training model"),
    ("turn_level_clip", "agile trains LLMPPO on single completions only"),
    ("turn_ratio_pooling", "agile takes importance ratios per token or per episode"),
    ("action_granularity", "agile's actions are tokens"),
)
#: Algorithm fields that only a multi-turn environment reads.
_MULTITURN_ALGORITHM_FIELDS = ("advantage_granularity", "turn_advantage_trajectory_fallback")
_IGNORED_ENVIRONMENT_FIELDS = (
    "env_name",
    "entrypoint",
    "env_config",
    "max_turns",
    "strict_chat_template_boundary",
)


#: What ``agile init`` writes for a reasoning algorithm's environment.
_REASONING_STARTER = {
    "prompt_template": StarterValue(
        {"user_0": "{question}"}, "turns filled from your columns", placeholder=True
    ),
    "reward_file_path": StarterValue("reward.py", "your Python reward file", placeholder=True),
    "reward_fn_name": StarterValue("reward", "the function in it", placeholder=True),
}


class LLMSpec(AlgorithmSpec):
    """What every LLM fine-tuning algorithm shares: the base model, its adapters and the
    optimiser. Subclasses set ``env_type``, the environment type their data must be."""

    reference_gap: ClassVar[str | None] = (
        "agile writes language-model manifests in the reference's August 2026 form only; 2.58's "
        "is another one"
    )

    batch_size: int = Field(
        default=16,
        ge=1,
        le=limits.BATCH,
        description=f"Prompts (or pairs, or examples) per iteration. At most {limits.BATCH:,}.",
    )
    max_grad_norm: float = Field(
        default=0.1, ge=0, description="Clip the adapters' gradient to this global norm."
    )
    update_epochs: int = Field(
        default=1,
        ge=1,
        le=limits.EPOCHS,
        description="Optimiser passes over each iteration's batch.",
    )
    seed: int = Field(default=42, description="Seed of sampling, dataset shuffling and the split.")
    gradient_checkpointing: bool = Field(
        default=True, description="Recompute activations in the backward pass to save memory."
    )
    attn_implementation: str | None = Field(
        default=None,
        description="Attention kernel passed to transformers (e.g. 'sdpa', 'eager'); null: "
        "the model's default.",
    )
    micro_batch_size_per_gpu: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Sequences per forward/backward pass; gradients accumulate over the batch. "
            "null: the whole batch at once."
        ),
    )
    pretrained_model_name_or_path: str | None = Field(
        default=None,
        min_length=1,
        description="The base model, if the network section does not name one.",
    )
    max_model_len: int = Field(
        default=1024,
        ge=1,
        description="Tokens of prompt and completion together at most, if the network section "
        "gives no max_context_length.",
    )
    lora_config: LoraSpec | None = Field(
        default=None,
        description="The adapters' LoRA settings, used only when there is no network section; "
        "write them under network.lora_config.",
    )
    quantization: str | dict[str, Any] | None = Field(
        default=None,
        description="A quantised base: int8, nf4 (also 4bit, 4-bit, bnb-4bit) or bitsandbytes "
        "settings; loaded by bitsandbytes on a CUDA GPU, the adapters in full precision.",
    )
    reduce_memory_peak: bool = Field(
        default=False, description="Accepted for compatibility; ignored."
    )
    use_separate_reference_adapter: bool = Field(
        default=False,
        description="Accepted for compatibility; the reference policy is always the base model "
        "with the adapters disabled.",
    )
    calc_position_embeddings: bool = Field(
        default=True, description="Accepted for compatibility; ignored."
    )
    use_liger_loss: bool = Field(default=False, description="Accepted for compatibility; ignored.")
    activation_offload: bool = Field(
        default=False, description="Accepted for compatibility; ignored."
    )
    lora_target_scope: str | None = Field(
        default=None,
        description="Accepted for compatibility; ignored (use lora_config.target_modules).",
    )
    chunk_rows: int | None = Field(
        default=None, ge=1, description="Accepted for compatibility; ignored."
    )
    mini_batch_size: int | None = Field(
        default=None, ge=1, description="Accepted for compatibility; ignored."
    )

    env_type: ClassVar[str] = "reasoning"
    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "batch_size", "max_grad_norm", "update_epochs",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ()
    default_evo_steps: ClassVar[int] = 5
    mutation_kinds: ClassVar[frozenset[str]] = frozenset({"rl_hp"})
    #: Whether agile trains this algorithm on multi-turn episodes (env_type: multiturn).
    trains_multiturn: ClassVar[bool] = True
    #: Whether its loss weighs each completion (each episode) by one advantage, so that
    #: turn-level advantages have no place in it.
    one_advantage_per_episode: ClassVar[bool] = False

    @classmethod
    def starter_sections(cls) -> dict[str, dict[str, StarterValue]]:
        """A reasoning algorithm's starter names a prompt template and a reward function."""
        if cls.env_type != "reasoning":
            return {}
        return {"environment": dict(_REASONING_STARTER)}

    # -- what training reads ------------------------------------------------------------------

    def model_path(self, manifest: Any) -> str:
        """The model to fine-tune: the network section's, else the algorithm's."""
        network = manifest.network
        path = network.pretrained_model_name_or_path or self.pretrained_model_name_or_path
        assert path is not None, "validation requires one"
        return str(path)

    def context_length(self, manifest: Any) -> int:
        """Tokens of prompt and completion together at most."""
        return int(manifest.network.max_context_length or self.max_model_len)

    def lora(self, manifest: Any) -> LoraSpec:
        """The adapters' LoRA settings (defaults when none are written).

        ``network.lora_config``, else the algorithm section's, else the defaults. (The
        reference drops the algorithm's whenever a network section exists; agile uses it when
        the network section has none, so that a run folder's resolved manifest, whose network
        section always exists, means the same.)
        """
        return manifest.network.lora_config or self.lora_config or LoraSpec()

    def step_unit(self, manifest: Any) -> str | None:
        """Episodes, for a multi-turn environment (else the paradigm's prompts)."""
        return "episodes" if self.environment_type(manifest) == "multiturn" else None

    def environment_type(self, manifest: Any) -> str:
        """The environment type: the one written, else the algorithm's."""
        return getattr(manifest.environment, "env_type", None) or self.env_type

    # -- validation ---------------------------------------------------------------------------

    def check_manifest(self, manifest: Any) -> list[FieldError]:
        return [
            *self._model_errors(manifest),
            *self._environment_errors(manifest),
            *self._quantization_errors(),
        ]

    def _model_errors(self, manifest: Any) -> list[FieldError]:
        network = manifest.network
        if getattr(network, "pretrained_model_name_or_path", None) or (
            self.pretrained_model_name_or_path
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

    def _environment_errors(self, manifest: Any) -> list[FieldError]:
        environment = manifest.environment
        written = getattr(environment, "env_type", None)
        if written == "multiturn":
            return self._multiturn_errors(manifest)
        if written is not None and written != self.env_type:
            return [
                FieldError(
                    "environment.env_type",
                    f"{written} data does not suit {manifest.algorithm_name}, which trains on "
                    f"{self.env_type} data",
                    f"set env_type: {self.env_type} or leave it out",
                )
            ]
        errors: list[FieldError] = []
        for field in ["dataset"]:
            if getattr(environment, field, None) is None:
                errors.append(
                    FieldError(
                        f"environment.{field}",
                        f"required for {self.env_type} training ({manifest.algorithm_name})",
                        _REQUIRED_HINTS[field],
                    )
                )
        if self.env_type != "reasoning" and getattr(environment, "reward_file_path", None):
            errors.append(
                FieldError(
                    "environment.reward_file_path",
                    f"{manifest.algorithm_name} learns from {self.env_type} data, not rewards",
                    "remove reward_file_path (and reward_fn_name)",
                )
            )
        return errors

    def _multiturn_errors(self, manifest: Any) -> list[FieldError]:
        """AgileRL's rules for a multi-turn environment: reward-based algorithms only, exactly
        one of ``env_name`` and ``entrypoint``, ``env_config`` only with ``entrypoint``."""
        environment = manifest.environment
        if self.env_type != "reasoning":
            return [
                FieldError(
                    "environment.env_type",
                    f"{manifest.algorithm_name} learns from {self.env_type} data, not from a "
                    "multi-turn environment (GRPO, GSPO, CISPO, LLMREINFORCE and LLMPPO do)",
                    f"set env_type: {self.env_type} or leave it out",
                )
            ]
        name, entrypoint = environment.env_name, environment.entrypoint
        if (name is None) == (entrypoint is None):
            which = "not both" if name is not None else "and has neither"
            return [
                FieldError(
                    "environment.env_name",
                    f"a multi-turn environment takes one of env_name and entrypoint, {which}",
                    "name a GEM game (env_name: game:GuessTheNumber-v0-easy) or your own "
                    "factory (entrypoint: my_env.py:make)",
                )
            ]
        if environment.env_config is not None and entrypoint is None:
            return [
                FieldError(
                    "environment.env_config",
                    "keyword arguments for entrypoint, which is not given",
                    "remove env_config, or name the factory it configures with entrypoint",
                )
            ]
        return []

    def _quantization_errors(self) -> list[FieldError]:
        value = self.quantization
        if value is None or isinstance(value, dict) or _preset(value) in QUANTIZATION_PRESETS:
            return []
        return [
            FieldError(
                "algorithm.quantization",
                f"unknown preset {value!r}",
                "use none, int8, nf4 (also 4bit, 4-bit, bnb-4bit), or a mapping of "
                "bitsandbytes settings",
            )
        ]

    def local_training_errors(self, manifest: Any) -> list[FieldError]:
        """What agile does not train on this machine though AgileRL's format allows it: vLLM
        generation (Arena generates with vLLM on its GPUs), a quantised base without
        bitsandbytes or a CUDA GPU, and the multi-turn settings agile's trainer refuses."""
        errors = []
        if getattr(self, "use_vllm", False) and (lacking := _lacking("vllm")):
            errors.append(
                FieldError(
                    "algorithm.use_vllm",
                    f"vLLM generation needs the vllm package and a CUDA GPU{lacking}",
                    "train here with --set algorithm.use_vllm=false (Hugging Face transformers "
                    "generates), or on Arena with --backend arena",
                )
            )
        if self.quantization is not None and _preset(self.quantization) != "none":
            lacking = _lacking("bitsandbytes")
            if lacking:
                errors.append(
                    FieldError(
                        "algorithm.quantization",
                        f"a quantised base loads through bitsandbytes on a CUDA GPU{lacking}",
                        "train here with --set algorithm.quantization=null (Arena has no "
                        "quantization field either)",
                    )
                )
        if getattr(manifest.environment, "env_type", None) == "multiturn":
            errors += self._multiturn_training_errors(manifest)
        return errors

    def _multiturn_training_errors(self, manifest: Any) -> list[FieldError]:
        """The multi-turn settings agile's trainer refuses: LLMPPO (its critic learns from
        single completions here), a ratio per turn, and turn-level advantages where the loss
        takes one advantage per episode."""
        name = manifest.algorithm_name
        if not self.trains_multiturn:
            return [
                FieldError(
                    "environment.env_type",
                    f"agile trains {name}'s value head on single completions, not on multi-turn "
                    "episodes",
                    "train multi-turn with GRPO, GSPO, CISPO or LLMREINFORCE, or run this "
                    "manifest on Arena with --backend arena",
                )
            ]
        errors = []
        level = getattr(self, "importance_sampling_level", None)
        if level == "turn":
            errors.append(
                FieldError(
                    "algorithm.importance_sampling_level",
                    "turn: agile takes one importance ratio per token or per episode in a "
                    "multi-turn environment, not one per turn",
                    "set importance_sampling_level: token, or trajectory (one per episode)",
                )
            )
        per_episode = self.one_advantage_per_episode or level in {"sequence", "trajectory"}
        if getattr(self, "advantage_granularity", "auto") == "turn" and per_episode:
            errors.append(
                FieldError(
                    "algorithm.advantage_granularity",
                    f"turn: {name} with these settings weighs each episode by one advantage "
                    "(its return's), so turn-level advantages have no place in its loss",
                    "set advantage_granularity: auto (or trajectory), or use GRPO with "
                    "importance_sampling_level: token",
                )
            )
        return errors

    def manifest_warnings(self, manifest: Any) -> list[str]:
        return [
            *self._local_reward_warnings(manifest),
            *self._ignored_algorithm_fields(manifest),
            *self._ignored_environment_fields(manifest),
            *self._training_warnings(manifest),
        ]

    def _local_reward_warnings(self, manifest: Any) -> list[str]:
        """Reasoning fields left out: an Arena job may leave them to the registered dataset
        and ``--reward-file``; local training refuses to start without them."""
        if self.env_type != "reasoning" or manifest.environment.env_type == "multiturn":
            return []  # a multi-turn environment rewards the turns itself
        missing = [
            field
            for field in LOCAL_REASONING_FIELDS
            if getattr(manifest.environment, field, None) is None
        ]
        return [
            f"environment.{field}: not given; training locally needs it "
            f"({_REQUIRED_HINTS[field]}), Arena takes it from the registered dataset"
            + (" and --reward-file" if field != "prompt_template" else "")
            for field in missing
        ]

    def _ignored_algorithm_fields(self, manifest: Any) -> list[str]:
        warnings: list[str] = []
        fields = type(self).model_fields
        ignored = list(_IGNORED_ALGORITHM_FIELDS)
        if getattr(manifest.environment, "env_type", None) != "multiturn":
            ignored += [(name, "only a multi-turn environment reads it")
                        for name in _MULTITURN_ALGORITHM_FIELDS]  # fmt: skip
        for name, reason in ignored:
            if name in fields and getattr(self, name) != fields[name].default:
                if name == "vllm_config" and getattr(self, "use_vllm", False):
                    continue  # the engine's settings
                warnings.append(f"algorithm.{name}: ignored, {reason}")
        if getattr(self, "use_vllm", False):
            unused = sorted(
                set(getattr(self, "vllm_config", None) or {}) - set(VLLM_ENGINE_OPTIONS)
            )
            warnings += [f"algorithm.vllm_config.{key}: ignored, agile's vLLM engine does not "
                         f"use it" for key in unused]  # fmt: skip
        network = manifest.network
        if self.lora_config is not None:
            if getattr(network, "lora_config", None) is not None:
                warnings.append("algorithm.lora_config: ignored, network.lora_config replaces it")
            else:
                warnings.append(
                    "algorithm.lora_config: used because network.lora_config is not given; "
                    "write it there"
                )
        written = getattr(network, "pretrained_model_name_or_path", None)
        ours = self.pretrained_model_name_or_path
        if written and ours and written != ours:
            warnings.append(
                "algorithm.pretrained_model_name_or_path: ignored, "
                f"network.pretrained_model_name_or_path ({written}) overrides it"
            )
        context = getattr(network, "max_context_length", None)
        overridden = "max_model_len" in self.model_fields_set and context is not None
        if overridden and context != self.max_model_len:
            warnings.append(
                f"algorithm.max_model_len: ignored, network.max_context_length ({context}) "
                "overrides it"
            )
        return warnings

    def _ignored_environment_fields(self, manifest: Any) -> list[str]:
        environment = manifest.environment
        fields = type(environment).model_fields
        warnings = []
        multiturn = getattr(environment, "env_type", None) == "multiturn"
        for name in () if multiturn else _IGNORED_ENVIRONMENT_FIELDS:
            if name in fields and getattr(environment, name) != fields[name].default:
                warnings.append(f"environment.{name}: ignored, only env_type: multiturn reads it")
        if self.env_type != "sft" and "response_column" in environment.model_fields_set:
            warnings.append(
                f"environment.response_column: ignored, only SFT reads it "
                f"({manifest.algorithm_name} does not)"
            )
        return warnings

    def _training_warnings(self, manifest: Any) -> list[str]:
        training = manifest.training
        warnings = []
        interval = getattr(training, "evaluation_interval", None)
        if "evaluation_interval" in training.model_fields_set and interval != training.evo_steps:
            warnings.append(
                f"training.evaluation_interval: ignored ({interval}), agile scores every member "
                f"at the end of each generation (every evo_steps = {training.evo_steps} "
                "iterations) so that selection ranks fresh fitness"
            )
        if getattr(training, "max_wall_seconds", None) is not None:
            warnings.append(
                "training.max_wall_seconds: ignored, agile stops multi-turn training at "
                "max_steps episodes per member (a stop by the clock could not be resumed or "
                "repeated exactly)"
            )
        if training.eval_steps is not None:
            warnings.append(
                "training.eval_steps: ignored, members are scored on the whole held-out split"
            )
        if training.eval_loop != 1:
            warnings.append(
                "training.eval_loop: ignored, members are scored once on the held-out split"
            )
        return warnings


#: What a reasoning manifest needs to train locally (an Arena job may leave them out).
LOCAL_REASONING_FIELDS = ("reward_file_path", "reward_fn_name", "prompt_template")

_REQUIRED_HINTS = {
    "dataset": "name a local .parquet/.jsonl/.json/.csv file or a Hugging Face dataset id",
    "reward_file_path": "name the Python file holding your reward function, e.g. reward.py",
    "reward_fn_name": "name the function in reward_file_path that scores a completion",
    "prompt_template": "write the chat turns, e.g. user_0: 'Solve {question}'",
}


def _has_network_section(manifest: Any) -> bool:
    """Whether the manifest wrote a (non-empty) network section."""
    return bool(manifest.network.model_fields_set)


class _GenerationSpec(LLMSpec):
    """Fields of the algorithms that sample completions and learn from their rewards."""

    temperature: float = Field(
        default=0.9, gt=0, description="Sampling temperature of completions."
    )
    max_output_tokens: int | None = Field(
        default=1024,
        ge=1,
        description="Tokens of one completion at most; null: up to the context length.",
    )
    min_output_tokens: int | None = Field(
        default=None,
        ge=0,
        description="Tokens of one completion at least (end-of-text suppressed).",
    )
    clip_coef: float = Field(
        default=0.2, ge=0, le=1, description="Clip of the probability ratio to [1 - c, 1 + c]."
    )
    use_vllm: bool = Field(
        default=False,
        description="Sample completions with vLLM (needs the vllm package and a CUDA GPU): one "
        "engine serves every member's adapter; else Hugging Face transformers generates.",
    )
    vllm_config: dict[str, Any] | None = Field(
        default=None,
        description="vLLM's engine settings with use_vllm: tensor_parallel_size, "
        "gpu_memory_utilization (0.3), max_num_seqs, enforce_eager; sleep_mode is not used.",
    )
    vllm_importance_sampling_correction: bool = Field(
        default=True,
        description="Accepted for compatibility; ignored (agile computes the sampled tokens' "
        "log-probabilities with the training model).",
    )
    vllm_importance_sampling_cap: float = Field(
        default=2.0,
        ge=0,
        description="Accepted for compatibility; ignored (as vllm_importance_sampling_correction).",
    )
    cosine_lr_schedule_config: dict[str, Any] | None = Field(
        default=None,
        description="Accepted for compatibility; ignored (the learning rate is constant).",
    )
    use_sequence_packing: bool = Field(
        default=False, description="Accepted for compatibility; ignored."
    )


class _GroupSpec(_GenerationSpec):
    """Fields of the group-relative methods (GRPO, GSPO, CISPO): several completions per
    prompt, each completion's advantage its reward standardised within its group."""

    lr: float = Field(default=5e-6, ge=0, description="AdamW learning rate of the adapters.")
    beta: float = Field(
        default=0.001, ge=0, le=1, description="Weight of the KL penalty towards the base model."
    )
    group_size: int = Field(
        default=8, ge=1, le=limits.BATCH, description="Completions sampled per prompt (one group)."
    )
    adv_norm: Literal["mean_std", "mean_only"] = Field(
        default="mean_std",
        description="Group advantage: reward minus the group mean, divided by the group's "
        "standard deviation (mean_std) or not (mean_only).",
    )
    whiten_advantages: bool = Field(
        default=False, description="Standardise the advantages across the whole batch too."
    )
    adv_clip_range: float | None = Field(
        default=None, gt=0, description="Clip advantages to [-x, x]; null: no clipping."
    )
    filter_zero_adv: bool = Field(
        default=False, description="Leave out of the loss completions whose advantage is 0."
    )
    importance_sampling_level: Literal["token", "sequence", "turn", "trajectory"] | None = Field(
        default=None,
        description=(
            "Probability ratio per token, or per completion (sequence or trajectory; in "
            "single-turn training a turn is the whole completion too); null: the method's own "
            "(token; GSPO: sequence)."
        ),
    )
    advantage_granularity: Literal["auto", "trajectory", "turn"] = Field(
        default="auto", description="Multi-turn only; ignored (reported when not auto)."
    )
    turn_advantage_trajectory_fallback: bool = Field(
        default=True, description="Multi-turn only; ignored."
    )
    loss_norm: Literal["micro_batch", "accumulation_window"] = Field(
        default="micro_batch",
        description="Loss normalisation: agile averages per micro-batch (accumulation_window is "
        "accepted and ignored).",
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr", "beta", "batch_size", "group_size", "temperature", "max_grad_norm",
        "update_epochs", "clip_coef",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "beta")


class GRPOSpec(_GroupSpec):
    """Group Relative Policy Optimization (GRPO; Shao et al., 2024, "DeepSeekMath",
    arXiv:2402.03300): a clipped policy-gradient objective whose baseline is the mean reward of
    a group of completions of the same prompt, with a KL penalty towards the base model and no
    value network."""


class GSPOSpec(_GroupSpec):
    """Group Sequence Policy Optimization (GSPO; Zheng et al., 2025, arXiv:2507.18071): GRPO's
    group advantages with the importance ratio and its clipping taken per sequence (the
    length-normalised ratio of the whole completion) rather than per token."""

    one_advantage_per_episode: ClassVar[bool] = True


class CISPOSpec(_GroupSpec):
    """Clipped IS-weight Policy Optimization (CISPO; MiniMax-M1, 2025, arXiv:2506.13585): GRPO's
    group advantages with the importance-sampling weight clipped and detached instead of the
    token update, so every token keeps a gradient."""

    one_advantage_per_episode: ClassVar[bool] = True

    clip_coef: float | list[float] = Field(  # type: ignore[assignment]  # CISPO's takes bounds too
        default=0.2,
        description="Clip of the importance weight: c for [1 - c, 1 + c], or [low, high], the "
        "weight's bounds themselves (e.g. [0.8, 2.0]).",
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr", "beta", "batch_size", "group_size", "temperature", "max_grad_norm",
        "update_epochs",
    )  # fmt: skip

    @field_validator("clip_coef")
    @classmethod
    def _clip_shape(cls, value: float | list[float]) -> float | list[float]:
        values = value if isinstance(value, list) else [value]
        if isinstance(value, list) and len(value) != 2:
            raise ValueError(f"a list must be [low, high], got {len(value)} values")
        if any(item < 0 for item in values):
            raise ValueError(f"{value} has a negative bound; clip bounds are at least 0")
        if isinstance(value, list) and value[0] > value[1]:
            raise ValueError(f"{value}: low is above high; write [low, high]")
        return value


class LLMREINFORCESpec(_GenerationSpec):
    """REINFORCE for language models (Williams, 1992; applied to RL from human feedback by
    Ahmadian et al., 2024, "Back to Basics", arXiv:2402.14740): the policy gradient of each
    completion's (discounted) reward, with a clipped ratio and a KL penalty towards the base
    model; one completion per prompt."""

    one_advantage_per_episode: ClassVar[bool] = True

    lr: float = Field(default=5e-6, ge=0, description="AdamW learning rate of the adapters.")
    beta: float = Field(
        default=0.01, ge=0, le=1, description="Weight of the KL penalty towards the base model."
    )
    max_grad_norm: float = Field(
        default=1.0, ge=0, description="Clip the adapters' gradient to this global norm."
    )
    gamma: float = Field(default=0.99, ge=0, le=1, description="Discount of rewards over tokens.")
    importance_sampling_level: Literal["token", "sequence", "turn", "trajectory"] = Field(
        default="token",
        description="Probability ratio per token, or per completion (sequence or trajectory; in "
        "single-turn training a turn is the whole completion too).",
    )
    action_granularity: Literal["turn", "token", "auto"] = Field(
        default="auto", description="Multi-turn only; ignored (reported when not auto)."
    )
    advantage_granularity: Literal["turn", "token", "auto"] = Field(
        default="auto", description="Multi-turn only; ignored (reported when not auto)."
    )
    turn_ratio_pooling: Literal["sum", "mean"] = Field(
        default="sum", description="Multi-turn only; ignored."
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr", "beta", "clip_coef", "gamma", "temperature", "batch_size", "max_grad_norm",
        "update_epochs",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "beta")


class LLMPPOSpec(_GenerationSpec):
    """Proximal Policy Optimization for language models (Schulman et al., 2017, as in RL from
    human feedback, Ouyang et al., 2022, "InstructGPT", arXiv:2203.02155): a clipped objective
    with advantages from a learned value head (GAE over the completion's tokens) and a KL
    penalty towards the base model."""

    trains_multiturn: ClassVar[bool] = False  # its value head learns from single completions

    lr_actor: float = Field(
        default=5e-6, ge=0, description="AdamW learning rate of the policy adapter."
    )
    lr_critic: float = Field(
        default=5e-5, ge=0, description="AdamW learning rate of the value adapter and head."
    )
    beta: float = Field(
        default=0.01, ge=0, le=1, description="Weight of the KL penalty towards the base model."
    )
    max_grad_norm: float = Field(
        default=1.0, ge=0, description="Clip the adapters' gradient to this global norm."
    )
    vf_coef: float = Field(default=0.5, ge=0, description="Weight of the value loss.")
    gamma: float = Field(default=0.99, ge=0, le=1, description="Discount of rewards over tokens.")
    gae_lambda: float = Field(
        default=0.95, ge=0, le=1, description="GAE's lambda: bias-variance trade-off of advantages."
    )
    whiten_advantages: bool = Field(
        default=True, description="Standardise advantages across the batch."
    )
    importance_sampling_level: Literal["auto", "token", "sequence", "turn", "trajectory"] = Field(
        default="auto",
        description="Probability ratio per token (auto, token), or per completion (sequence or "
        "trajectory; in single-turn training a turn is the whole completion too).",
    )
    action_granularity: Literal["turn", "token", "auto"] = Field(
        default="auto", description="Multi-turn only; ignored (reported when not auto)."
    )
    advantage_granularity: Literal["turn", "token", "auto"] = Field(
        default="auto", description="Multi-turn only; ignored (reported when not auto)."
    )
    turn_level_clip: bool = Field(default=True, description="Multi-turn only; ignored.")
    turn_ratio_pooling: Literal["sum", "mean"] = Field(
        default="sum", description="Multi-turn only; ignored."
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr_actor", "lr_critic", "beta", "vf_coef", "clip_coef", "gamma", "gae_lambda",
        "temperature", "batch_size", "max_grad_norm", "update_epochs",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr_actor", "beta")


class DPOSpec(LLMSpec):
    """Direct Preference Optimization (DPO; Rafailov et al., 2023, arXiv:2305.18290): a
    classification loss on pairs of chosen and rejected responses whose logit is ``beta`` times
    the difference of their log-ratios to the base model; no reward model, no sampling."""

    lr: float = Field(default=5e-6, ge=0, description="AdamW learning rate of the adapters.")
    beta: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="Temperature of the implicit reward (how far from the base model to move).",
    )
    nll_alpha: float = Field(
        default=0.0,
        ge=0,
        description="Weight of a negative log-likelihood term on the chosen responses "
        "(DPO + NLL); 0: plain DPO.",
    )

    env_type: ClassVar[str] = "preference"
    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr", "beta", "batch_size", "max_grad_norm", "update_epochs", "nll_alpha",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "beta")


class SFTSpec(LLMSpec):
    """Supervised fine-tuning: the negative log-likelihood of each example's response
    (``environment.response_column``) given its prompt."""

    lr: float = Field(default=5e-5, ge=0, description="AdamW learning rate of the adapters.")

    env_type: ClassVar[str] = "sft"
    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr", "batch_size", "max_grad_norm", "update_epochs",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr",)
