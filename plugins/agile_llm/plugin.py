"""Registers LLM fine-tuning: its paradigm, GRPO and its variants, DPO, SFT, the ``llm``
environment builder and ``agile llm`` (light: pydantic and click only; transformers, peft and
datasets are imported when training starts)."""

from __future__ import annotations

from agile_cli import (
    Family,
    RegisterAlgorithm,
    RegisterCommand,
    RegisterEnvironment,
    RegisterParadigm,
    hookimpl,
)
from agile_llm import spec
from agile_llm.command import llm

#: Registered name -> (spec, implementation class in agile_llm.algorithms).
ALGORITHMS: dict[str, tuple[type[spec.LLMSpec], str]] = {
    "GRPO": (spec.GRPOSpec, "GRPO"),
    "GSPO": (spec.GSPOSpec, "GSPO"),
    "CISPO": (spec.CISPOSpec, "CISPO"),
    "LLMREINFORCE": (spec.LLMREINFORCESpec, "LLMREINFORCE"),
    "LLMPPO": (spec.LLMPPOSpec, "LLMPPO"),
    "DPO": (spec.DPOSpec, "DPO"),
    "SFT": (spec.SFTSpec, "SFT"),
}


@hookimpl
def agile_register_paradigms(register: RegisterParadigm) -> None:
    register(
        name=Family.LLM,
        runner="agile_llm.runner:llm_runner",
        environment="agile_llm.environment:prepare",
        population="agile_llm.population:build_population",
        training=spec.LLMTraining,
        description="fine-tune LoRA adapters of one frozen language model on prompts",
    )


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    for name, (algorithm_spec, implementation) in ALGORITHMS.items():
        register(
            name=name,
            spec=algorithm_spec,
            family=Family.LLM,
            implementation=f"agile_llm.algorithms:{implementation}",
        )


@hookimpl
def agile_register_environments(register: RegisterEnvironment) -> None:
    register(
        name="llm",
        spec=spec.LLMEnvSpec,
        families=[Family.LLM],
        implementation="agile_llm.environment:LLMBuilder",
    )


@hookimpl
def agile_register_commands(register: RegisterCommand) -> None:
    register(llm)
