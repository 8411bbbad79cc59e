"""A population of LoRA adapters over one frozen base model.

Every member of an LLM population is one named LoRA adapter of a single PEFT model, so memory
is one base model plus N adapters, not N models (LoRA: Hu et al., 2021, arXiv:2106.09685). The
member being trained or asked for completions is made the active adapter; the reference policy
for a KL penalty is the same base with every adapter disabled, not a second copy.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

LORA_MARKER = "lora_"


class AdapterPopulation:
    """Named LoRA adapters sharing ``base``, whose own weights stay frozen.

    :param base: a ``transformers`` causal LM (wrapped in place).
    :param lora: ``peft.LoraConfig`` keyword arguments (``r``, ``lora_alpha``,
        ``target_modules``, ``lora_dropout``, ...).
    :param names: one adapter per member, the first active.
    """

    def __init__(self, base: Any, lora: Mapping[str, Any], names: list[str]) -> None:
        from peft import LoraConfig, get_peft_model

        if not names:
            raise ValueError("a population needs at least one adapter")
        self.config = LoraConfig(task_type="CAUSAL_LM", **dict(lora))
        self.model = get_peft_model(base, self.config, adapter_name=names[0])
        for name in names[1:]:
            self.model.add_adapter(name, self.config)
        self.names = list(names)
        self.activate(names[0])

    def activate(self, name: str) -> None:
        """Make ``name`` the adapter that forward passes use and gradients reach."""
        self.model.set_adapter(name)
        for adapter in self.names:  # only the active member learns
            for parameter in self.adapter_parameters(adapter).values():
                parameter.requires_grad_(adapter == name)

    def adapter_parameters(self, name: str) -> dict[str, torch.nn.Parameter]:
        """The LoRA weights of adapter ``name``, by parameter name."""
        marker = f".{name}."
        return {
            key: parameter
            for key, parameter in self.model.named_parameters()
            if LORA_MARKER in key and marker in key
        }

    def base_parameters(self) -> list[torch.nn.Parameter]:
        """The frozen weights every adapter shares."""
        return [p for key, p in self.model.named_parameters() if LORA_MARKER not in key]

    def copy(self, source: str, target: str) -> None:
        """Overwrite adapter ``target``'s weights with ``source``'s (tournament selection)."""
        into = self.adapter_parameters(target)
        with torch.no_grad():
            for key, parameter in self.adapter_parameters(source).items():
                into[key.replace(f".{source}.", f".{target}.")].copy_(parameter)

    @contextmanager
    def reference(self) -> Iterator[None]:
        """Forward passes inside use the base model alone (every adapter disabled)."""
        with self.model.disable_adapter():
            yield
