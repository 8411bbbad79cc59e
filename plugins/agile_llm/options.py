"""Nested settings of the LLM algorithm section: the vLLM engine, the cosine learning-rate
schedule, FSDP2 sharding and profiling (agilerl 2.58's closed models of them).

Light: pydantic and agile_cli only.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from typing import Any, Literal

from pydantic import Field, model_validator

from agile_cli import Spec
from agile_cli.helpers import located_error

#: The keys of 2.58's FSDP2 settings (``algorithm.fsdp``).
FSDP_KEYS = frozenset(
    {
        "reshard_after_forward",
        "cpu_offload",
        "optim_cpu_offload",
        "defer_grad_sync",
        "param_dtype",
        "reduce_dtype",
        "prefetch_units",
        "backward_prefetch_units",
        "checkpoint_skip_layer_types",
        "checkpoint_every_n_blocks",
        "wrap_every_n_blocks",
        "param_persistence_threshold",
        "ep",
        "ep_token_blocks",
        "routed_expert_chunk_mib",
        "tp",
        "shard_group_size",
    }
)
#: The keys of 2.58's learn profiling (``algorithm.profiling_config``).
PROFILING_KEYS = frozenset(
    {
        "output_dir",
        "memory_snapshot_on_oom",
        "memory_history_max_entries",
        "torch_profile_step",
        "torch_profile_with_stack",
        "profile_ranks",
    }
)


class CosineScheduleSpec(Spec):
    """``algorithm.cosine_lr_schedule_config``: a linear warm-up to the learning rate, then a
    cosine decay to ``min_lr_ratio`` of it over ``num_steps`` updates, held after. The August
    form counts ``num_epochs`` (passes over the training split) instead."""

    num_steps: int | None = Field(
        default=None, ge=1, description="Updates from the start of warm-up to the floor."
    )
    num_epochs: int | None = Field(
        default=None,
        ge=1,
        description="The August form: passes over the training split instead of num_steps.",
    )
    warmup_proportion: float = Field(
        default=0.0, ge=0, lt=1, description="Share of the schedule spent warming up."
    )
    min_lr_ratio: float = Field(
        default=0.1, ge=0, le=1, description="The floor, as a share of the learning rate."
    )

    @model_validator(mode="after")
    def _one_length(self) -> CosineScheduleSpec:
        if (self.num_steps is None) == (self.num_epochs is None):
            which = "both" if self.num_steps is not None else "neither"
            raise located_error(
                "num_steps",
                f"the schedule's length needs one of num_steps and num_epochs, got {which}",
                "write num_steps: N (updates)",
            )
        return self


class VLLMConfigSpec(Spec):
    """``algorithm.vllm_config``: the vLLM engine that generates, where vLLM does."""

    tensor_parallel_size: int | None = Field(default=None, ge=1, description="GPUs per engine.")
    gpu_memory_utilization: float = Field(
        default=0.3, ge=0, le=1, description="Share of GPU memory vLLM reserves."
    )
    max_num_seqs: int | None = Field(default=None, ge=1, description="Sequences decoded at once.")
    max_num_batched_tokens: int | None = Field(
        default=None, ge=1, description="Tokens per scheduler pass."
    )
    enforce_eager: bool | None = Field(default=None, description="Skip CUDA-graph capture.")
    sleep_mode: bool = Field(default=False, description="Release GPU memory between calls.")
    sleep_mode_level: Literal[1, 2] = Field(default=1, description="1 offloads weights; 2 drops.")
    dtype: str | None = Field(default=None, min_length=1, description="Generation weight dtype.")
    quantization: str | None = Field(default=None, min_length=1, description="Engine quantisation.")
    vllm_model_name_or_path: str | None = Field(
        default=None, min_length=1, description="Generate from another checkpoint."
    )
    kv_cache_dtype: str | None = Field(default=None, min_length=1, description="KV cache dtype.")
    max_lora_rank: int = Field(default=16, ge=1, description="Largest LoRA rank served.")
    max_loras: int = Field(default=1, ge=1, description="Adapters kept loaded at once.")
    strip_multimodal_towers: bool | list[Literal["image", "video", "audio"]] = Field(
        default=False, description="Skip loading these modalities' towers."
    )
    stop_sequences: list[str] | None = Field(
        default=None,
        description="Strings that end a completion (transformers generation honours them too).",
    )
    presence_penalty: float = Field(default=0.0, ge=0, description="Penalty on seen tokens.")
    frequency_penalty: float = Field(default=0.0, ge=0, description="Penalty by a token's count.")
    kv_cache_memory_bytes: int | None = Field(default=None, ge=0, description="Fixed KV cache.")
    limit_mm_per_prompt: dict[str, int] | None = Field(
        default=None, description="Most items of each modality per prompt."
    )
    lora_staging_dir: str | None = Field(
        default=None, min_length=1, description="Folder the engine reads adapters from."
    )


def check_keys(value: Any, known: frozenset[str], what: str) -> Any:
    """``value`` (``true``, ``{}`` or a mapping) when every key of it is one of ``known``."""
    if isinstance(value, dict):
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown {what} keys {unknown}; valid: {', '.join(sorted(known))}")
    return value


def gpu_present() -> bool:
    """Whether this machine has an NVIDIA GPU and driver (without importing torch)."""
    return os.path.exists("/proc/driver/nvidia") or shutil.which("nvidia-smi") is not None


def installed(module: str) -> bool:
    """Whether a top-level module can be imported (found, not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def generates_with_vllm(use_vllm: bool | None) -> bool:
    """``use_vllm`` as written, else (null, 2.58's form) whether this machine has vLLM and a
    CUDA GPU: 2.58 always generates with vLLM, and transformers samples the same distribution
    where it cannot."""
    return use_vllm if use_vllm is not None else installed("vllm") and gpu_present()


#: ``vllm_config`` settings agile's vLLM engine takes, and their values when not given.
VLLM_ENGINE_OPTIONS: dict[str, Any] = {
    "tensor_parallel_size": 1,
    "gpu_memory_utilization": 0.3,
    "max_num_seqs": None,
    "enforce_eager": None,
}
#: AgileRL's quantisation presets, as :func:`preset` spells them.
QUANTIZATION_PRESETS = frozenset({"none", "int8", "nf4", "4bit", "4-bit", "bnb-4bit", "bnb_4bit"})


def preset(value: str | dict[str, Any]) -> str | None:
    """A quantisation preset without case or spaces; None for a mapping of settings."""
    return None if isinstance(value, dict) else "".join(value.split()).lower()
