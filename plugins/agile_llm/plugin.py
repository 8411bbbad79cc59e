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

#: Registered name -> (spec, implementation class).
ALGORITHMS: dict[str, tuple[type[spec.LLMSpec], str]] = {
    "GRPO": (spec.GRPOSpec, "agile_llm.algorithms:GRPO"),
    "GSPO": (spec.GSPOSpec, "agile_llm.algorithms:GSPO"),
    "CISPO": (spec.CISPOSpec, "agile_llm.algorithms:CISPO"),
    "LLMREINFORCE": (spec.LLMREINFORCESpec, "agile_llm.algorithms:LLMREINFORCE"),
    "LLMPPO": (spec.LLMPPOSpec, "agile_llm.ppo:LLMPPO"),
    "DPO": (spec.DPOSpec, "agile_llm.algorithms:DPO"),
    "SFT": (spec.SFTSpec, "agile_llm.algorithms:SFT"),
}


@hookimpl
def agile_register_paradigms(register: RegisterParadigm) -> None:
    register(
        name=Family.LLM,
        implementation="agile_llm.runner:LanguageModels",
        training=spec.LLMTraining,
        description="fine-tune LoRA adapters of one frozen language model on prompts",
        step_unit="prompts",
    )


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    for name, (algorithm_spec, implementation) in ALGORITHMS.items():
        register(
            name=name,
            spec=algorithm_spec,
            family=Family.LLM,
            implementation=implementation,
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
