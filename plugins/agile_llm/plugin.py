"""Registers LLM fine-tuning: its paradigm, GRPO and its variants, DPO, SFT, the ``llm``
environment builder and ``agile llm`` (light: its specs are named by reference, imported when a
manifest needs them; ``agile llm`` when commands are asked for; transformers, peft and datasets
when training starts)."""

from __future__ import annotations

from agile_cli import (
    RegisterAlgorithm,
    RegisterCommand,
    RegisterEnvironment,
    RegisterParadigm,
    hookimpl,
)

_SPECS = "agile_llm.spec"

#: Registered name -> (its spec, its implementation), as ``"module:Class"`` references.
ALGORITHMS: dict[str, tuple[str, str]] = {
    "GRPO": (f"{_SPECS}:GRPOSpec", "agile_llm.algorithms:GRPO"),
    "GSPO": (f"{_SPECS}:GSPOSpec", "agile_llm.algorithms:GSPO"),
    "CISPO": (f"{_SPECS}:CISPOSpec", "agile_llm.algorithms:CISPO"),
    "LLMREINFORCE": (f"{_SPECS}:LLMREINFORCESpec", "agile_llm.algorithms:LLMREINFORCE"),
    "LLMPPO": (f"{_SPECS}:LLMPPOSpec", "agile_llm.ppo:LLMPPO"),
    "DPO": (f"{_SPECS}:DPOSpec", "agile_llm.algorithms:DPO"),
    "SFT": (f"{_SPECS}:SFTSpec", "agile_llm.algorithms:SFT"),
}


@hookimpl
def agile_register_paradigms(register: RegisterParadigm) -> None:
    register(
        name="llm",
        implementation="agile_llm.runner:LanguageModels",
        training=f"{_SPECS}:LLMTraining",
        network=f"{_SPECS}:FinetuningNetworkSpec",
        replay_buffer=f"{_SPECS}:LLMReplayBufferSpec",
        description="fine-tune LoRA adapters of one frozen language model on prompts",
        step_unit="prompts",
    )


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    for name, (algorithm_spec, implementation) in ALGORITHMS.items():
        register(
            name=name,
            spec=algorithm_spec,
            family="llm",
            implementation=implementation,
        )


@hookimpl
def agile_register_environments(register: RegisterEnvironment) -> None:
    register(
        name="llm",
        spec=f"{_SPECS}:LLMEnvSpec",
        families=["llm"],
        implementation="agile_llm.environment:LLMBuilder",
    )


@hookimpl
def agile_register_commands(register: RegisterCommand) -> None:
    from agile_llm.command import llm

    register(llm)
