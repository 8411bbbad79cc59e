"""A population of LoRA adapters over one frozen base model.

Every member of an LLM population is one named LoRA adapter of a single PEFT model, so memory
is one base model plus N adapters, not N models (LoRA: Hu et al., 2021, arXiv:2106.09685). The
member being trained or asked for completions is made the active adapter; the reference policy
for a KL penalty is the same base with every adapter disabled, not a second copy.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agile_cli import TrainingError
from agile_cli.helpers import printable
from agile_llm.messages import error_detail

LORA_MARKER = "lora_"


class AdapterPopulation:
    """Named LoRA adapters sharing ``base``, whose own weights stay frozen.

    :param base: a ``transformers`` causal LM (wrapped in place).
    :param lora: a ``peft.LoraConfig``, or its keyword arguments (``r``, ``lora_alpha``,
        ``target_modules``, ``lora_dropout``, ...).
    :param names: one adapter per member, the first active.
    """

    def __init__(self, base: Any, lora: Any, names: list[str]) -> None:
        from peft import LoraConfig, get_peft_model

        if not names:
            raise ValueError("a population needs at least one adapter")
        if isinstance(lora, LoraConfig):
            self.config = lora
        else:
            self.config = LoraConfig(**{"task_type": "CAUSAL_LM", **dict(lora)})
        self.model = get_peft_model(base, self.config, adapter_name=names[0])
        self.names = [names[0]]
        self._parameters: dict[str, dict[str, torch.nn.Parameter]] = {}
        self._lora_layers: list[Any] | None = None
        for name in names[1:]:
            self.add(name)
        self.active = ""
        self.activate(names[0])

    def activate(self, name: str) -> None:
        """Make ``name`` the adapter that forward passes use and gradients reach."""
        if name == self.active:
            return
        self.model.set_adapter(name)
        for adapter in self.names:  # only the active member learns
            for parameter in self.adapter_parameters(adapter).values():
                parameter.requires_grad_(adapter == name)
        self.active = name

    def add(self, name: str, source: str | None = None) -> None:
        """A new adapter ``name``: freshly initialised (its update starts at zero), or a copy
        of adapter ``source``."""
        self.model.add_adapter(name, self.config)
        self.names.append(name)
        for parameter in self.adapter_parameters(name).values():
            parameter.requires_grad_(False)
        if source is not None:
            self.copy(source, name)

    def remove(self, name: str) -> None:
        """Free adapter ``name``'s weights (a member that left the population)."""
        if name not in self.names:
            return
        if name == self.active:
            others = [other for other in self.names if other != name]
            if not others:
                return  # the last adapter stays: PEFT needs one
            self.activate(others[0])
        self.model.delete_adapter(name)
        self.names.remove(name)
        self._parameters.pop(name, None)

    def adapter_parameters(self, name: str) -> dict[str, torch.nn.Parameter]:
        """The LoRA weights of adapter ``name``, by parameter name."""
        cached = self._parameters.get(name)
        if cached is None:
            marker = f".{name}."
            cached = self._parameters[name] = {
                key: parameter
                for key, parameter in self.model.named_parameters()
                if LORA_MARKER in key and marker in key
            }
        return cached

    def weights(self, name: str) -> dict[str, torch.Tensor]:
        """A copy of adapter ``name``'s weights, keyed without its name (to load into any
        adapter, or save)."""
        marker = f".{name}."
        return {
            key.replace(marker, ".{adapter}."): parameter.detach().clone()
            for key, parameter in self.adapter_parameters(name).items()
        }

    def load_weights(self, name: str, weights: Mapping[str, torch.Tensor]) -> None:
        """Set adapter ``name``'s weights from :meth:`weights` of any adapter.

        :raises KeyError: the weights are of another shape of adapter.
        """
        own = self.adapter_parameters(name)
        marker = f".{name}."
        expected = {key.replace(marker, ".{adapter}."): key for key in own}
        if set(expected) != set(weights):
            raise KeyError("the saved adapter's layers differ from this model's adapters")
        with torch.no_grad():
            for key, value in weights.items():
                own[expected[key]].copy_(value)

    def base_parameters(self) -> list[torch.nn.Parameter]:
        """The frozen weights every adapter shares."""
        return [p for key, p in self.model.named_parameters() if LORA_MARKER not in key]

    def copy(self, source: str, target: str) -> None:
        """Overwrite adapter ``target``'s weights with ``source``'s (tournament selection)."""
        into = self.adapter_parameters(target)
        with torch.no_grad():
            for key, parameter in self.adapter_parameters(source).items():
                into[key.replace(f".{source}.", f".{target}.")].copy_(parameter)

    @property
    def mixable(self) -> bool:
        """Whether :meth:`mixed` can serve this model: its LoRA layers are plain linear or
        embedding ones (no DoRA or other variant, no adapted raw parameters)."""
        from peft.tuners.lora import Embedding, Linear

        return all(
            type(layer) in (Linear, Embedding) and not getattr(layer, "lora_variant", None)
            for layer in self._layers()
        )

    def _layers(self) -> list[Any]:
        """The model's LoRA layers (adapters come and go; the layers they live in stay)."""
        from peft.tuners.lora import LoraLayer

        if self._lora_layers is None:
            self._lora_layers = [m for m in self.model.modules() if isinstance(m, LoraLayer)]
        return self._lora_layers

    @contextmanager
    def mixed(self, rows: list[str]) -> Iterator[None]:
        """Forward passes inside give row ``i`` of their batch adapter ``rows[i]``, so one
        pass of the base serves every member's rows, and gradients reach each adapter named;
        afterwards only the active adapter learns again. A LoRA linear layer computes each
        run of rows of one adapter on a slice of its input (no gather or scatter); other LoRA
        layers (embeddings) use PEFT's mixed-adapter batches."""
        from peft.tuners.lora import Linear

        runs = _runs(rows)
        patched: list[tuple[Any, Any]] = []
        hooks = []
        for module in self._layers():
            if isinstance(module, Linear) and not module.merged:
                # an instance's own forward (an accelerate hook's, say) comes back afterwards
                patched.append((module, module.__dict__.get("forward")))
                by_runs = functools.partial(_by_runs, module, runs)
                module.forward = by_runs  # on purpose, undone below
            else:
                hooks.append(module.register_forward_pre_hook(
                    functools.partial(_with_adapter_names, rows), with_kwargs=True))  # fmt: skip
        named = set(rows)
        for name in named:
            for parameter in self.adapter_parameters(name).values():
                parameter.requires_grad_(True)
        try:
            yield
        finally:
            for module, own in patched:
                if own is None:
                    del module.forward  # the class's own again
                else:
                    module.forward = own
            for hook in hooks:
                hook.remove()
            for name in named - {self.active}:
                for parameter in self.adapter_parameters(name).values():
                    parameter.requires_grad_(False)

    @contextmanager
    def routed(self, rows: list[str]) -> Iterator[None]:
        """Forward passes inside give row ``i`` of their batch adapter ``rows[i]``: rows of one
        adapter make it the active one (as any LoRA layer serves, a quantised base's too), rows
        of several are :meth:`mixed`."""
        if len(set(rows)) > 1:
            with self.mixed(rows):
                yield
            return
        if rows:
            self.activate(rows[0])
        yield

    @contextmanager
    def reference(self) -> Iterator[None]:
        """Forward passes inside use the base model alone (every adapter disabled)."""
        with self.model.disable_adapter():
            yield


def _runs(rows: list[str]) -> list[tuple[str, int, int]]:
    """``rows`` as runs of one adapter: ``(name, start, stop)``."""
    runs: list[tuple[str, int, int]] = []
    for index, name in enumerate(rows):
        if runs and runs[-1][0] == name:
            runs[-1] = (name, runs[-1][1], index + 1)
        else:
            runs.append((name, index, index + 1))
    return runs


def _by_runs(
    module: Any, runs: list[tuple[str, int, int]], x: torch.Tensor, *args: Any, **kwargs: Any
) -> torch.Tensor:
    """A LoRA linear layer's output with each run of rows through its own adapter."""
    result = module.base_layer(x, *args, **kwargs)
    parts = []
    for name, start, stop in runs:
        rows = x[start:stop]
        if name not in module.lora_A:
            parts.append(torch.zeros_like(result[start:stop]))
            continue
        down, up = module.lora_A[name], module.lora_B[name]
        update = up(down(module.lora_dropout[name](rows.to(down.weight.dtype))))
        parts.append(update * module.scaling[name])
    return result + torch.cat(parts).to(result.dtype)


def _with_adapter_names(rows: list[str], module: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    return args, {**kwargs, "adapter_names": rows}


@dataclass
class StartingAdapter:
    """A saved adapter every new member starts from, read from ``folder``."""

    config: Any  # peft.LoraConfig
    weights: dict[str, torch.Tensor]
    folder: Path
    what: str = "network.adapter_path"  # how messages name where the folder was given

    def load_into(self, model: Any, name: str) -> None:
        """Set adapter ``name`` of the PEFT ``model`` to these weights.

        :raises TrainingError: a weight has no layer of that name or shape in the model (an
            adapter of another base model).
        """
        from peft import set_peft_model_state_dict

        try:
            result = set_peft_model_state_dict(model, self.weights, adapter_name=name)
        except RuntimeError as exc:  # torch's size mismatch
            raise self.unusable(error_detail(exc)) from None
        unknown = list(getattr(result, "unexpected_keys", []))
        if unknown:
            raise self.unusable(
                f"{len(unknown)} of its weights ({printable(unknown[0])}, ...) match no layer"
            )

    def unusable(self, why: str) -> TrainingError:
        return TrainingError(
            f"{self.what}: the adapter in {self.folder} does not fit this model: {why}",
            "start from an adapter trained on this base model (its adapter_config.json names "
            "base_model_name_or_path)",
        )


def read_adapter(
    path: str | Path | None, what: str = "network.adapter_path"
) -> StartingAdapter | None:
    """Read an adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``);
    ``what`` names where it was given, in messages."""
    if path is None:
        return None
    from peft import LoraConfig
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(path)
    weights = folder / "adapter_model.safetensors"
    if not (folder / "adapter_config.json").is_file() or not weights.is_file():
        raise TrainingError(
            f"{what}: {folder.resolve()} holds no adapter_config.json and "
            "adapter_model.safetensors",
            "point it at a PEFT adapter folder, e.g. an earlier run's elite/",
        )
    try:
        config = LoraConfig.from_pretrained(str(folder))
        return StartingAdapter(config, load_file(str(weights)), folder, what)  # data only
    except (OSError, ValueError, TypeError, SafetensorError) as exc:
        raise TrainingError(
            f"{what}: {folder} cannot be read ({type(exc).__name__}: {error_detail(exc)})",
            "point it at a PEFT adapter folder that save_pretrained wrote whole, e.g. an "
            "earlier run's elite/",
        ) from None
