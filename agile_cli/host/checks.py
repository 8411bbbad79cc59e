"""The checks the registry makes of what a plugin registers: each raises
:class:`~agile_cli.errors.PluginError` with one sentence naming the registration and what is
wrong with it. A part given as a class is checked when it is registered; one given as a
``"module:Class"`` reference when it is first loaded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from agile_cli.errors import PluginError
from agile_cli.models.algorithm import AlgorithmSpec
from agile_cli.models.base import Spec, numeric_type
from agile_cli.models.selection import SelectionSpec
from agile_cli.models.training import TrainingSpec

S = TypeVar("S", bound=Spec)


def subclass(name: str, spec: Any, base: type[S]) -> type[S]:
    """``spec`` when it is a subclass of ``base`` that forbids unknown keys."""
    if not (isinstance(spec, type) and issubclass(spec, base)):
        raise PluginError(
            f"'{name}' comes with {spec!r}, not a subclass of agile_cli.{base.__name__}"
        )
    if spec.model_config.get("extra") != "forbid":
        raise PluginError(
            f"the spec of '{name}' ({spec.__name__}) accepts unknown keys; "
            "keep agile_cli.Spec's extra='forbid'"
        )
    return spec


def training_part(name: str, spec: Any) -> type[TrainingSpec]:
    """A paradigm's or a backend's ``training`` spec."""
    return subclass(name, spec, TrainingSpec)


def reference(name: str, target: Any, kind: str) -> None:
    """An implementation named as a ``"module:callable"`` string."""
    if not isinstance(target, str) or ":" not in target:
        raise PluginError(f"{kind} '{name}': {target!r} is not a 'module:callable' reference")


def algorithm_spec(
    name: str,
    spec: Any,
    paradigm: tuple[str, tuple[tuple[str, type], ...]] | None,
    aliases: Mapping[str, Mapping[str, Any]],
) -> type[AlgorithmSpec]:
    """An algorithm's spec: its mutable hyperparameters, its ``training_spec``, the fields its
    paradigm's runner reads (``paradigm``: its name and ``algorithm_fields``; None when it is
    not registered, which validation reports) and the fields its aliases imply."""
    checked = subclass(name, spec, AlgorithmSpec)
    _mutable(name, checked)
    if checked.training_spec is not None:
        subclass(name, checked.training_spec, TrainingSpec)
    family, fields = paradigm if paradigm is not None else ("", ())
    for field_name, annotation in fields:
        field = checked.model_fields.get(field_name)
        if field is None or field.annotation is not annotation:
            raise PluginError(
                f"algorithm '{name}' ({family}) needs a {annotation.__name__} field "
                f"'{field_name}': the {family} runner reads it"
            )
    for alias, implies in aliases.items():
        for key in implies:
            if key == "name" or key not in checked.model_fields:
                raise PluginError(
                    f"algorithm '{name}': alias '{alias}' implies '{key}', which is not a "
                    f"field of {checked.__name__}"
                )
    return checked


def alias(name: str, alias: Any, implies: Any) -> None:
    """An alias of algorithm ``name``: another non-empty name, mapped to the fields it implies
    (whether the spec has them is checked with the spec)."""
    if not isinstance(alias, str) or not alias.strip() or alias == name:
        raise PluginError(f"algorithm '{name}': alias {alias!r} is not another name")
    if not isinstance(implies, Mapping):
        raise PluginError(
            f"algorithm '{name}': alias '{alias}' must map to the fields it implies "
            f"({{}} for none), not {implies!r}"
        )


def selection_spec(name: str, spec: Any) -> type[SelectionSpec]:
    """A selection strategy's spec, whose ``strategy`` field accepts exactly its name."""
    checked = subclass(name, spec, SelectionSpec)
    field = checked.model_fields["strategy"]
    if getattr(field.annotation, "__args__", None) != (name,):
        raise PluginError(
            f"selection strategy '{name}': {checked.__name__}.strategy must be "
            f"Literal['{name}'], so that the section names its strategy"
        )
    return checked


def _mutable(name: str, spec: type[AlgorithmSpec]) -> None:
    for hp in spec.mutable_hyperparameters:
        field = spec.model_fields.get(hp)
        if field is None or numeric_type(field.annotation) is None:
            raise PluginError(
                f"algorithm '{name}' lists '{hp}' as mutable, but its spec has no int or "
                "float field of that name"
            )
    missing = set(spec.default_mutable) - set(spec.mutable_hyperparameters)
    if missing:
        raise PluginError(
            f"algorithm '{name}' mutates {sorted(missing)} by default, but does not list "
            "them in mutable_hyperparameters"
        )
