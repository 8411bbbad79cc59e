"""The manifest sections of LLM fine-tuning: the algorithms, the network section (a pretrained
model and its LoRA adapters), the training fields and the ``llm`` replay buffer. The
environment section is :mod:`agile_llm.envspec`'s.

Light: pydantic and agile_cli only, so ``agile validate`` imports no LLM library. Nothing
here opens a dataset, a rubric file or a model: validation checks the shape of what a
manifest names, training checks that it exists. The rules across sections, and what this
machine cannot train, are :mod:`agile_llm.checks`'.

How a run counts
----------------
A *step* is one prompt (one sample of the training split) a member trains on, so
``training.max_steps`` is each member's sample budget, as for every agile algorithm. An
*iteration* reads ``algorithm.batch_size`` prompts and updates the member once (or
``update_epochs`` times). One *generation* is ``training.evo_steps`` iterations (default 20,
as in agilerl 2.58); after it every member is scored on the held-out split, and the
population is selected and mutated. Members are LoRA adapters over one shared, frozen base
model: only hyperparameters mutate (``rl_hp``).

Defaults
--------
Agile keeps one set of defaults, agilerl 2.58's (the release its users run), for manifests of
both forms, except the learning rates: ``lr`` 5e-6 for GRPO, GSPO, CISPO, LLMREINFORCE and
DPO, and LLMPPO's ``lr_actor`` (2.58's default is 5e-7; the reference's own shipped manifests
use 5e-6), SFT 5e-5, LLMPPO's ``lr_critic`` 5e-5. So:
``batch_size`` 16; ``beta`` 0.001 (DPO 0.1; SFT has no reference and ignores one);
``max_grad_norm`` 0.1 (LLMPPO, LLMREINFORCE 1.0); ``group_size`` 8; ``temperature`` 0.9
(LLMPPO, LLMREINFORCE 1.0), ``top_k`` 50, no output cap but the context; GRPO's ``adv_norm``
``mean_only`` and ``loss_norm`` ``accumulation_window``, its off-policy masks and KL clamp;
``gradient_checkpointing`` on, ``seed`` 42. DPO's ``nll_alpha`` is 0 (2.58: 1.0), measured
better on the digits example (docs/differences.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AliasChoices, Field, WithJsonSchema, field_validator, model_validator

from agile_cli import (
    AlgorithmSpec,
    FieldError,
    Spec,
    StarterValue,
    TrainingSpec,
    limits,
)
from agile_cli.helpers import located_error, reject_both_spellings
from agile_llm.envspec import LLMEnvSpec
from agile_llm.options import (
    FSDP_KEYS,
    PROFILING_KEYS,
    QUANTIZATION_PRESETS,
    VLLM_ENGINE_OPTIONS,
    CosineScheduleSpec,
    VLLMConfigSpec,
    check_keys,
    gpu_present,
    installed,
    preset,
)

# Registered as agile_llm.spec:LLMEnvSpec (defined in envspec); the helpers, in options.
__all__ = ["QUANTIZATION_PRESETS", "VLLM_ENGINE_OPTIONS", "LLMEnvSpec", "gpu_present",
           "installed", "preset"]  # fmt: skip


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


class CheckpointExportSpec(Spec):
    """``training.checkpoint_export``: when to write a merged model beside the adapters."""

    format: Literal["adapter", "merged"] = Field(
        default="adapter", description="adapter: LoRA weights only; merged: also the base model "
        "with the elite's adapter merged in, as a Hugging Face model folder.",
    )  # fmt: skip
    trigger: Literal["final", "best", "on_demand", "every"] = Field(
        default="final", description="final: at the end of the run; best: the same in agile "
        "(its last elite is the best member, scored again); every: at every save of the elite "
        "(each generation); on_demand: never during training (agile llm merge RUN does it).",
    )  # fmt: skip


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

    evo_epochs: int | None = Field(
        default=None, ge=1, description="Passes over the training split per generation, "
        "instead of evo_steps (needs num_epochs).",
    )  # fmt: skip
    eval_samples_per_task: int = Field(
        default=0, ge=0, description="Completions (episodes) sampled per held-out task when "
        "scoring, as in training: their mean reward is the fitness; 0: one greedy each.",
    )  # fmt: skip
    eval_greedy: bool = Field(
        default=True, description="Score held-out tasks with greedy completions (false needs "
        "eval_samples_per_task >= 1: the mean reward of that many samples).",
    )  # fmt: skip
    eval_max_concurrent_episodes: int | None = Field(
        default=None, ge=1, description="Held-out episodes run at once (the reference's Ray "
        "runtime; agile scores them in batches of batch_size).",
    )  # fmt: skip
    checkpoint_optimizer: bool = Field(
        default=True, description="Checkpoints keep each member's optimiser state (agile's "
        "always do, so that a resume continues exactly).",
    )  # fmt: skip
    checkpoint_export: CheckpointExportSpec | None = Field(
        default=None, description="Also write the elite merged into the base model as a "
        "Hugging Face model folder; null: adapters only.",
    )  # fmt: skip
    rollout_mode: Literal["colocated", "async"] = Field(
        default="colocated", description="colocated: generate, then learn, in turn; async: "
        "generation runs alongside learning, its staleness bounded by "
        "replay_buffer.max_rollout_version_lag.",
    )  # fmt: skip
    rollout_batch_size: int | None = Field(
        default=None, ge=1, description="Async: groups generated per cycle (1 when unset)."
    )
    rollout_engines_per_agent: int | Literal["auto"] = Field(
        default=0, description="The reference's generation engines per member, one GPU each "
        "(async needs >= 1 or auto there; agile's async generator is a thread).",
    )  # fmt: skip
    training_gpus_per_agent: int = Field(
        default=1, ge=1, description="Data-parallel GPUs per member (agile trains on one device)."
    )
    weight_sync_backend: Literal["filesystem", "nccl"] | None = Field(
        default=None, description="How the reference's engines get new adapters (agile's "
        "generator shares them in memory).",
    )  # fmt: skip
    weight_sync_interval: int | None = Field(
        default=None, ge=1, description="Async: updates between the generator's adapter syncs "
        "(1 when unset).",
    )  # fmt: skip
    reuse_prefix_cache_across_syncs: bool = Field(
        default=False, description="vLLM's prefix cache across syncs (needs "
        "max_rollout_version_lag >= 1).",
    )  # fmt: skip
    rollout_version_stamp: Literal["publish", "oldest_turn"] | None = Field(
        default=None, description="Async: the version a group is aged by (oldest_turn when "
        "unset).",
    )  # fmt: skip
    experience_sharing: bool | None = Field(
        default=None, description="Accepted for compatibility (not with async rollouts)."
    )

    starter_values: ClassVar[Mapping[str, StarterValue]] = {
        "max_steps": StarterValue(3_200, "a first run's budget of prompts (200 iterations of 16)"),
    }

    @model_validator(mode="after")
    def _rollout_rules(self) -> LLMTraining:
        if self.evo_epochs is not None and self.num_epochs is None:
            raise located_error(
                "evo_epochs",
                "counts passes of an epoch-driven run, and num_epochs is not given",
                "write num_epochs, or use evo_steps",
            )
        if not self.eval_greedy and self.eval_samples_per_task == 0:
            raise located_error(
                "eval_greedy",
                "false scores sampled completions, and eval_samples_per_task is 0",
                "set eval_samples_per_task >= 1",
            )
        if self.rollout_mode == "async" and self.experience_sharing:
            raise located_error("experience_sharing", "is not available with async rollouts")
        return self

    def generation_steps(self, algorithm: Any) -> int:
        """``evo_steps`` iterations of the algorithm's ``batch_size`` prompts, in prompts; with
        ``evo_epochs``, the whole budget: the runner ends a generation after that many passes
        over the training split, whose size only the loaded data knows."""
        if self.evo_epochs is not None:
            return self.max_steps
        assert self.evo_steps is not None, "resolved during validation"
        return self.evo_steps * int(algorithm.batch_size)

    def generation_label(self, algorithm: Any) -> str:
        if self.evo_epochs is not None:
            passes = "pass" if self.evo_epochs == 1 else "passes"
            return f"{self.evo_epochs} {passes} over the training split"
        return super().generation_label(algorithm)


# --------------------------------------------------------------------------------------------
# replay buffer


class LLMReplayBufferSpec(Spec):
    """``replay_buffer`` of LLM fine-tuning: ``kind: llm`` is the queue of generated groups
    that asynchronous rollouts (``training.rollout_mode: async``) train from."""

    kind: Literal["llm", "classic"] = Field(
        default="llm", description="llm: the queue of generated groups (classic: accepted, unused)."
    )
    name: str | None = Field(default=None, description="Label of the buffer in logs.")
    max_size: int = Field(
        default=10_000,
        ge=1,
        validation_alias=AliasChoices("max_size", "memory_size"),
        description="Groups queued at most; the oldest is dropped past it.",
    )
    max_rollout_version_lag: int | None = Field(
        default=None, ge=0, description="Updates a group may fall behind the learner before it "
        "is dropped as too stale; null: none dropped.",
    )  # fmt: skip
    drop_uninformative_groups: bool = Field(
        default=False, description="Drop groups whose completions all got the same reward "
        "(they carry no advantage).",
    )  # fmt: skip
    group_replay_max_age: int = Field(
        default=0, ge=0, description="Updates a stored completion stays eligible to replace one "
        "of a tied group of its task (0: no group replay; GRPO-family, group_size >= 2).",
    )  # fmt: skip

    @model_validator(mode="before")
    @classmethod
    def _one_size(cls, data: Any) -> Any:
        reject_both_spellings(data, ("max_size", "memory_size"))
        return data


# --------------------------------------------------------------------------------------------
# algorithms


#: What ``agile init`` writes for a reasoning algorithm's environment.
_REASONING_STARTER = {
    "prompt_template": StarterValue(
        {"user_0": "{question}"}, "turns filled from your columns", placeholder=True
    ),
    "rubric_file_path": StarterValue("reward.py", "your Python reward file", placeholder=True),
    "rubric_name": StarterValue("reward", "the function in it", placeholder=True),
}


class LLMSpec(AlgorithmSpec):
    """What every LLM fine-tuning algorithm shares: the base model, its adapters and the
    optimiser. Subclasses set ``env_type``, the environment regime they train on."""

    reference_gap: ClassVar[str | None] = (
        "agile reads language-model manifests in 2.58's form, and does not write them in it yet"
    )

    batch_size: int = Field(
        default=16,
        ge=1,
        le=limits.BATCH,
        description=f"Prompts (or pairs, or examples) per iteration. At most {limits.BATCH:,}.",
    )
    beta: float | None = Field(
        default=None, ge=0, le=1, description="Weight of the KL penalty towards the base model "
        "(DPO: the implicit reward's temperature); SFT has no reference and ignores it.",
    )  # fmt: skip
    max_grad_norm: float = Field(
        default=0.1, ge=0, description="Clip the adapters' gradient to this global norm."
    )
    update_epochs: int = Field(
        default=1, ge=1, le=limits.EPOCHS, description="Optimiser passes over each batch."
    )
    seed: int = Field(default=42, description="Seed of sampling, dataset shuffling and the split.")
    gradient_checkpointing: bool = Field(
        default=True, description="Recompute activations in the backward pass to save memory."
    )
    attn_implementation: str | None = Field(
        default=None, description="Attention kernel passed to transformers (e.g. 'sdpa', "
        "'eager'); null: the model's default.",
    )  # fmt: skip
    micro_batch_size_per_gpu: int | None = Field(
        default=None, ge=1, description="Sequences per forward/backward pass; gradients "
        "accumulate over the batch. null: the whole batch at once.",
    )  # fmt: skip
    mini_batch_size: int | None = Field(
        default=None, ge=1, description="Sequences per optimiser step (a multiple of "
        "micro_batch_size_per_gpu); null: one step per batch.",
    )  # fmt: skip
    pretrained_model_name_or_path: str | None = Field(
        default=None, min_length=1, description="The base model, if the network section does "
        "not name one.",
    )  # fmt: skip
    max_model_len: int = Field(
        default=1024, ge=1, description="Tokens of prompt and completion together at most, if "
        "the network section gives no max_context_length.",
    )  # fmt: skip
    lora_config: LoraSpec | None = Field(
        default=None, description="The adapters' LoRA settings, used only when the network "
        "section gives none; write them under network.lora_config.",
    )  # fmt: skip
    quantization: str | dict[str, Any] | None = Field(
        default=None, description="A quantised base: int8, nf4 (also 4bit, 4-bit, bnb-4bit) or "
        "bitsandbytes settings; loaded by bitsandbytes on a CUDA GPU.",
    )  # fmt: skip
    thinking_token_budget: int | None = Field(
        default=None, ge=0, description="Tokens a completion may spend reasoning before it must "
        "answer (below max_output_tokens).",
    )  # fmt: skip
    constrain_answer_pattern: str | None = Field(
        default=None, validation_alias=AliasChoices("constrain_answer_pattern", "answer_pattern"),
        description="A regular expression each turn's answer must match (vLLM structured "
        "output; no ^ or $ anchors).",
    )  # fmt: skip
    answer_continuation: bool = Field(
        default=False, description="After the thinking budget, continue into an answer under "
        "constrain_answer_pattern.",
    )  # fmt: skip
    fsdp: bool | dict[str, Any] | None = Field(
        default=None, description="FSDP2 sharding over several GPUs (true or {} for its "
        "defaults; tp and ep for tensor and expert parallelism).",
    )  # fmt: skip
    use_separate_reference_adapter: bool | None = Field(
        default=None, description="Hold the reference policy in a frozen copy of the starting "
        "adapter (null: yes where there is a reference policy; agile's reference is the base "
        "model with the adapters off, which is the same function for fresh adapters).",
    )  # fmt: skip
    # Settings of kernels, memory and the vLLM engine: they change how fast, not what is learnt.
    use_liger_loss: bool = Field(default=True, description="Liger's fused loss kernel (GPU).")
    use_liger_kernel: bool | None = Field(default=None, description="Liger's layer kernels (GPU).")
    use_mamba_kernels: bool | None = Field(default=None, description="Fused Mamba kernels (GPU).")
    cast_logprobs_to_fp32: bool = Field(default=True, description="Log-probabilities in fp32.")
    calc_position_embeddings: bool = Field(default=True, description="Accepted; the model's own.")
    activation_offload: bool = Field(default=False, description="Offload activations (GPU).")
    moe_lora_recompute: bool | None = Field(default=None, description="MoE LoRA recompute (GPU).")
    use_sequence_packing: bool = Field(default=False, description="Pack short sequences (GPU).")
    lora_target_scope: str | None = Field(
        default=None, description="Adapt only the target modules under this module path (e.g. "
        "language_model, or layers.11); null: every one target_modules names.",
    )  # fmt: skip
    chunk_rows: int | None = Field(default=None, ge=1, description="Rows per loss chunk.")
    hf_generate_chunk_size: int | None = Field(
        default=None, ge=1, description="Sequences per transformers generate call."
    )
    vllm_engine_args: dict[str, Any] = Field(
        default_factory=dict, description="Arguments passed to the vLLM engine as they are."
    )
    vllm_lora_export_dir: str | None = Field(default=None, description="Where vLLM reads adapters.")
    reduce_memory_peak: bool = Field(default=False, description="The August form; no effect.")

    env_type: ClassVar[str] = "reasoning"
    #: What the reference fills into an environment section that names no kind.
    environment_tags: ClassVar[Mapping[str, Any]] = {"env_type": "rollout"}
    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "batch_size", "max_grad_norm", "update_epochs",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ()
    default_evo_steps: ClassVar[int] = 20
    mutation_kinds: ClassVar[frozenset[str]] = frozenset({"rl_hp"})
    #: Whether its loss weighs each completion (each episode) by one advantage.
    one_advantage_per_episode: ClassVar[bool] = False

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        reject_both_spellings(data, ("constrain_answer_pattern", "answer_pattern"))
        return data

    @field_validator("fsdp")
    @classmethod
    def _fsdp_keys(cls, value: Any) -> Any:
        return check_keys(value, FSDP_KEYS, "fsdp")

    @field_validator("constrain_answer_pattern")
    @classmethod
    def _grammar(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if value.startswith("^") or (value.endswith("$") and not value.endswith("\\$")):
            raise ValueError(f"{value!r} is anchored; a structured-output grammar matches the "
                             "whole answer, so drop the ^ or $")  # fmt: skip
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"is not a regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> LLMSpec:
        from agile_llm.checks import algorithm_rules

        algorithm_rules(self)
        return self

    @classmethod
    def starter_sections(cls) -> dict[str, dict[str, StarterValue]]:
        """A reasoning algorithm's starter names a prompt template and a rubric."""
        if cls.env_type != "reasoning":
            return {}
        return {"environment": dict(_REASONING_STARTER)}

    # -- what training reads ------------------------------------------------------------------

    def max_output(self) -> int | None:
        """Tokens of one completion at most; None where nothing is generated."""
        return None

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
        """The adapters' LoRA settings: ``network.lora_config``, else the algorithm section's,
        else the defaults (a run folder's resolved manifest, whose network section always
        exists, then means the same)."""
        return manifest.network.lora_config or self.lora_config or LoraSpec()

    def step_unit(self, manifest: Any) -> str | None:
        """Episodes, for an environment the model acts in (else the paradigm's prompts)."""
        return "episodes" if self.environment_type(manifest) == "multiturn" else None

    def environment_type(self, manifest: Any) -> str:
        """The regime: reasoning, multiturn, sft or preference."""
        return getattr(manifest.environment, "regime", None) or self.env_type

    # -- validation ---------------------------------------------------------------------------

    def check_manifest(self, manifest: Any) -> list[FieldError]:
        from agile_llm.checks import manifest_errors

        return manifest_errors(self, manifest)

    def local_training_errors(self, manifest: Any) -> list[FieldError]:
        from agile_llm.checks import local_training_errors

        return local_training_errors(self, manifest)

    def manifest_warnings(self, manifest: Any) -> list[str]:
        from agile_llm.checks import manifest_warnings

        return manifest_warnings(self, manifest)


class _GenerationSpec(LLMSpec):
    """Fields of the algorithms that sample completions and learn from their rewards."""

    temperature: float = Field(default=0.9, gt=0, description="Sampling temperature.")
    top_p: float = Field(default=1.0, ge=0, le=1, description="Nucleus sampling's mass.")
    top_k: int = Field(default=50, ge=0, description="Sample among this many tokens (0: all).")
    min_p: float = Field(
        default=0.0, ge=0, le=1, description="Drop tokens below this share of the likeliest's."
    )
    repetition_penalty: float = Field(
        default=1.0, ge=0, description="Divide repeated tokens' logits by this (1: none)."
    )
    max_output_tokens: int | None = Field(
        default=None, ge=1, description="Tokens of one completion (one turn) at most; null: up "
        "to the context length.",
    )  # fmt: skip
    min_output_tokens: int | None = Field(
        default=None, ge=0, description="Tokens of one completion at least (end suppressed)."
    )
    max_row_tokens: int | None = Field(
        default=None, ge=1, description="Tokens of one training row (an episode's prompt and "
        "turns) at most; null: the context length.",
    )  # fmt: skip
    beta: float | None = Field(
        default=0.001, ge=0, le=1, description="Weight of the KL penalty towards the base model."
    )
    clip_coef: float = Field(
        default=0.2, ge=0, le=1, description="Clip of the probability ratio to [1 - c, 1 + c]."
    )
    cosine_lr_schedule_config: CosineScheduleSpec | None = Field(
        default=None, description="Warm up, then decay the learning rate along a cosine; null: "
        "constant.",
    )  # fmt: skip
    use_vllm: bool | None = Field(
        default=None, description="Generate with vLLM (the August form's switch). null: vLLM "
        "where the machine has it and a CUDA GPU, else transformers, which samples the same "
        "distribution; 2.58 always uses vLLM.",
    )  # fmt: skip
    vllm_config: VLLMConfigSpec | None = Field(
        default=None, description="The vLLM engine's settings, where vLLM generates."
    )
    vllm_importance_sampling_correction: bool = Field(
        default=True, description="Correct for vLLM's sampling log-probabilities (agile scores "
        "samples with the training model).",
    )  # fmt: skip
    vllm_importance_sampling_cap: float = Field(default=2.0, ge=0, description="Its cap.")
    vllm_max_logprob_gap: float = Field(default=0.1, ge=0, description="vLLM drift alarm.")
    vllm_max_clip_fraction: float = Field(default=0.02, ge=0, le=1, description="vLLM drift alarm.")

    def max_output(self) -> int | None:
        return self.max_output_tokens


class _GroupSpec(_GenerationSpec):
    """Fields of the group-relative methods (GRPO, GSPO, CISPO): several completions per
    prompt, each completion's advantage its reward against its group's."""

    lr: float = Field(default=5e-6, ge=0, description="AdamW learning rate of the adapters.")
    group_size: int = Field(
        default=8, ge=1, le=limits.BATCH, description="Completions sampled per prompt (one group)."
    )
    adv_norm: Literal["mean_std", "mean_only"] = Field(
        default="mean_only", description="A completion's advantage: its reward minus the group "
        "mean (mean_only), also divided by the group's standard deviation (mean_std).",
    )  # fmt: skip
    whiten_advantages: bool = Field(
        default=False, description="Standardise the advantages across the whole batch too."
    )
    adv_clip_range: float | None = Field(
        default=None, gt=0, description="Clip advantages to [-x, x]; null: no clipping."
    )
    filter_zero_adv: bool = Field(
        default=False, description="Leave out of the loss groups whose completions all scored "
        "the same (no advantage).",
    )  # fmt: skip
    adv_filter_eps: float = Field(
        default=0.0, ge=0, description="With filter_zero_adv, also groups whose largest "
        "absolute advantage is below this.",
    )  # fmt: skip
    use_kl_advantage_shaping: bool = Field(
        default=False, description="Fold the KL penalty into the advantage instead of the loss."
    )
    importance_sampling_level: Literal["token", "sequence", "turn", "trajectory"] | None = Field(
        default=None, description="Probability ratio per token, or per completion (sequence or "
        "trajectory); null: the method's own (token; GSPO: sequence).",
    )  # fmt: skip
    advantage_granularity: Literal["auto", "trajectory", "turn"] = Field(
        default="auto", description="Multi-turn: one advantage per episode or per turn."
    )
    turn_advantage_trajectory_fallback: bool = Field(
        default=True, description="Multi-turn: the episode's advantage where turns have none."
    )
    loss_norm: Literal["micro_batch", "accumulation_window", "episode"] = Field(
        default="accumulation_window", description="What the loss averages over: every token "
        "of the batch (accumulation_window), each micro-batch's tokens, or each episode's "
        "tokens, episodes weighing the same (episode).",
    )  # fmt: skip
    old_logprobs_source: Literal["trainer", "rollout"] | None = Field(
        default=None, description="The old policy of the ratio: the trainer's log-probabilities "
        "(agile's) or the generating engine's.",
    )  # fmt: skip
    off_policy_token_mask_bounds: tuple[float, float] | None = Field(
        default=(0.5, 5.0), description="Tokens whose ratio to the sampling policy leaves "
        "[low, high] get no gradient; null: none masked.",
    )  # fmt: skip
    off_policy_sequence_mask_threshold: float | None = Field(
        default=0.03, ge=0, description="Negative-advantage completions whose mean log-ratio of "
        "sampling to current policy exceeds this get no gradient; null: none masked.",
    )  # fmt: skip
    use_bias_correction_kl: bool = Field(
        default=True, description="Weigh each token's KL by its ratio to the sampling policy."
    )
    kl_clamp: float | None = Field(
        default=10.0, gt=0, description="Clamp each token's KL estimate to this; null: none."
    )
    loss_type: Literal["grpo", "gspo", "cispo"] = Field(
        default="grpo", description="The policy loss (GSPO and CISPO fix their own)."
    )
    profiling_config: dict[str, Any] | None = Field(
        default=None, description="GPU learn profiling (accepted; agile profiles nothing)."
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr", "beta", "batch_size", "group_size", "temperature", "max_grad_norm",
        "update_epochs", "clip_coef", "top_p", "top_k", "min_p", "repetition_penalty",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "beta")

    @field_validator("profiling_config")
    @classmethod
    def _profiling_keys(cls, value: Any) -> Any:
        return check_keys(value, PROFILING_KEYS, "profiling_config")


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

    loss_type: Literal["gspo"] = Field(default="gspo", description="GSPO's sequence loss.")


#: CISPO's ``clip_coef`` in the JSON schema: a number, or the August form's [low, high].
_CLIP_SCHEMA = {"anyOf": [
    {"type": "number", "minimum": 0, "maximum": 1},
    {"type": "array", "items": {"type": "number", "minimum": 0}, "minItems": 2, "maxItems": 2},
]}  # fmt: skip


class CISPOSpec(_GroupSpec):
    """Clipped IS-weight Policy Optimization (CISPO; MiniMax-M1, 2025, arXiv:2506.13585): GRPO's
    group advantages with the importance-sampling weight clipped and detached instead of the
    token update, so every token keeps a gradient."""

    one_advantage_per_episode: ClassVar[bool] = True

    loss_type: Literal["cispo"] = Field(default="cispo", description="CISPO's loss.")
    clip_coef: Annotated[float, WithJsonSchema(_CLIP_SCHEMA)] = Field(
        default=0.2, ge=0, le=1, description="Clip of the importance weight to [1 - c, 1 + c]; "
        "the August form's [low, high] is read as clip_bounds.",
    )  # fmt: skip
    clip_bounds: tuple[float, float] | None = Field(
        default=None, description="The importance weight's own bounds [low, high] (e.g. [0.8, "
        "2.0]), in place of 1 -/+ clip_coef: the August form's list-valued clip_coef.",
    )  # fmt: skip

    @model_validator(mode="before")
    @classmethod
    def _august_bounds(cls, data: Any) -> Any:
        """The August form's ``clip_coef: [low, high]`` is ``clip_bounds``."""
        if isinstance(data, Mapping) and isinstance(data.get("clip_coef"), list | tuple):
            reject_both_spellings(data, ("clip_bounds", "clip_coef"))
            data = {**data, "clip_bounds": data["clip_coef"]}
            del data["clip_coef"]
        return data

    @field_validator("clip_bounds")
    @classmethod
    def _bounds_order(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None and not 0 <= value[0] <= value[1]:
            raise ValueError(f"{list(value)} must be [low, high] with 0 <= low <= high")
        return value


_TurnPooling = Literal["sum", "mean"]
_Granularity = Literal["turn", "token", "auto"]


class LLMREINFORCESpec(_GenerationSpec):
    """REINFORCE for language models (Williams, 1992; applied to RL from human feedback by
    Ahmadian et al., 2024, "Back to Basics", arXiv:2402.14740): the policy gradient of each
    completion's (discounted) reward, with a clipped ratio and a KL penalty towards the base
    model; one completion per prompt."""

    one_advantage_per_episode: ClassVar[bool] = True

    lr: float = Field(default=5e-6, ge=0, description="AdamW learning rate of the adapters.")
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature.")
    max_grad_norm: float = Field(
        default=1.0, ge=0, description="Clip the adapters' gradient to this global norm."
    )
    gamma: float = Field(default=1.0, ge=0, le=1, description="Discount of rewards over turns.")
    importance_sampling_level: Literal["token", "sequence", "turn", "trajectory"] = Field(
        default="token", description="Probability ratio per token, or per completion (sequence "
        "or trajectory).",
    )  # fmt: skip
    action_granularity: _Granularity = Field(default="auto", description="The August form.")
    advantage_granularity: _Granularity = Field(default="auto", description="Multi-turn: "
                                                "advantages per turn or per token.")  # fmt: skip
    turn_ratio_pooling: _TurnPooling = Field(default="sum", description="Multi-turn: pooling of "
                                             "a turn's token ratios.")  # fmt: skip

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr", "beta", "clip_coef", "gamma", "temperature", "batch_size", "max_grad_norm",
        "update_epochs", "top_p", "top_k", "min_p", "repetition_penalty",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "beta")


class LLMPPOSpec(_GenerationSpec):
    """Proximal Policy Optimization for language models (Schulman et al., 2017, as in RL from
    human feedback, Ouyang et al., 2022, "InstructGPT", arXiv:2203.02155): a clipped objective
    with advantages from a learned value head (GAE over the completion's tokens) and a KL
    penalty towards the base model."""

    lr_actor: float = Field(
        default=5e-6, ge=0, validation_alias=AliasChoices("lr_actor", "lr"),
        description="AdamW learning rate of the policy adapter (also spelled lr).",
    )  # fmt: skip
    lr_critic: float | None = Field(
        default=5e-5, ge=0, description="AdamW learning rate of the value adapter and head; "
        "null: lr_actor's.",
    )  # fmt: skip
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature.")
    kl_clamp: float | None = Field(
        default=10.0, gt=0, description="Clamp each token's KL estimate to this; null: none."
    )
    max_grad_norm: float = Field(
        default=1.0, ge=0, description="Clip the actor's and the critic's gradients to this norm."
    )
    share_grad_clip: bool = Field(
        default=False, description="Clip actor and critic by one coefficient of their joint norm."
    )
    vf_coef: float = Field(default=0.5, ge=0, description="Weight of the value loss.")
    gamma: float = Field(default=1.0, ge=0, le=1, description="Discount of rewards over turns.")
    gae_lambda: float = Field(
        default=0.95, ge=0, le=1, description="GAE's lambda: bias-variance trade-off of advantages."
    )
    critic_warmup_steps: int = Field(
        default=0, ge=0, description="First updates that train only the value head."
    )
    whiten_advantages: bool = Field(default=True, description="Standardise advantages per batch.")
    importance_sampling_level: Literal["auto", "token", "sequence", "turn", "trajectory"] = Field(
        default="auto", description="Probability ratio per token (auto, token), or per "
        "completion (sequence or trajectory).",
    )  # fmt: skip
    action_granularity: _Granularity = Field(default="auto", description="The August form.")
    advantage_granularity: _Granularity = Field(default="auto", description="Multi-turn only.")
    turn_level_clip: bool = Field(default=True, description="Multi-turn: clip per turn.")
    turn_ratio_pooling: _TurnPooling = Field(default="sum", description="Multi-turn only.")
    turn_value_reduction: Literal["mean", "final_value"] = Field(
        default="final_value", description="Multi-turn: a turn's value from its tokens."
    )
    fuse_actor_critic_pass: bool | None = Field(
        default=None, description="One forward for actor and critic (a GPU memory setting)."
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr_actor", "lr_critic", "beta", "vf_coef", "clip_coef", "gamma", "gae_lambda",
        "temperature", "batch_size", "max_grad_norm", "update_epochs", "top_p", "top_k",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr_actor", "beta")

    @model_validator(mode="before")
    @classmethod
    def _one_rate(cls, data: Any) -> Any:
        reject_both_spellings(data, ("lr_actor", "lr"))
        return data


class DPOSpec(LLMSpec):
    """Direct Preference Optimization (DPO; Rafailov et al., 2023, arXiv:2305.18290): a
    classification loss on pairs of chosen and rejected responses whose logit is ``beta`` times
    the difference of their log-ratios to the base model; no reward model, no sampling."""

    lr: float = Field(default=5e-6, ge=0, description="AdamW learning rate of the adapters.")
    beta: float | None = Field(
        default=0.1, ge=0, le=1,
        description="Temperature of the implicit reward (how far from the base model to move).",
    )  # fmt: skip
    nll_alpha: float = Field(
        default=0.0, ge=0, description="Weight of a negative log-likelihood term on the chosen "
        "responses (DPO + NLL); 0: plain DPO (2.58: 1.0, which learnt less on the digits "
        "example: docs/differences.md).",
    )  # fmt: skip

    env_type: ClassVar[str] = "preference"
    environment_tags: ClassVar[Mapping[str, Any]] = {"env_type": "dataset",
                                                    "objective": "preference"}  # fmt: skip
    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr", "beta", "batch_size", "max_grad_norm", "update_epochs", "nll_alpha",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "beta")


class SFTSpec(LLMSpec):
    """Supervised fine-tuning: the negative log-likelihood of each example's response
    (``environment.response_column``) given its prompt."""

    lr: float = Field(default=5e-5, ge=0, description="AdamW learning rate of the adapters.")

    env_type: ClassVar[str] = "sft"
    environment_tags: ClassVar[Mapping[str, Any]] = {"env_type": "dataset", "objective": "sft"}
    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr", "batch_size", "max_grad_norm", "update_epochs",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr",)
