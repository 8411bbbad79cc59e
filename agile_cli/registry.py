"""What plugins registered: algorithms, environment builders, backends and commands."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agile_cli.errors import PluginError
from agile_cli.models.algorithm import AlgorithmSpec, EnvironmentSpec, Family
from agile_cli.models.base import Spec


def load_object(reference: str) -> Any:
    """Import ``"package.module:Attribute"`` and return the attribute.

    :raises PluginError: naming the reference when it cannot be imported.
    """
    module_name, _, attribute = reference.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split(".") if attribute else []:
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise PluginError(
            f"cannot load '{reference}': {type(exc).__name__}: {exc}",
            "reinstall the plugin that provides it",
        ) from None
    return target


@dataclass(frozen=True)
class AlgorithmEntry:
    """An algorithm a plugin registered."""

    name: str
    spec: type[AlgorithmSpec]
    family: Family
    implementation: str
    plugin: str

    def load(self) -> Any:
        """The algorithm class (imports its module, and so its heavy dependencies)."""
        return load_object(self.implementation)


@dataclass(frozen=True)
class EnvironmentEntry:
    """An environment builder a plugin registered."""

    name: str
    spec: type[EnvironmentSpec]
    families: frozenset[Family]
    implementation: str
    plugin: str

    def load(self) -> Any:
        return load_object(self.implementation)


@dataclass(frozen=True)
class BackendEntry:
    """A training backend a plugin registered."""

    name: str
    options: type[Spec]
    implementation: str
    plugin: str

    def load(self) -> Any:
        return load_object(self.implementation)


@dataclass(frozen=True)
class CommandEntry:
    """A CLI command a plugin registered."""

    name: str
    command: Any
    plugin: str


class RegisterAlgorithm(Protocol):
    def __call__(
        self, *, name: str, spec: type[AlgorithmSpec], family: Family | str, implementation: str
    ) -> None: ...


class RegisterEnvironment(Protocol):
    def __call__(
        self,
        *,
        name: str,
        spec: type[EnvironmentSpec],
        families: Iterable[Family | str],
        implementation: str,
    ) -> None: ...


class RegisterBackend(Protocol):
    def __call__(self, *, name: str, options: type[Spec], implementation: str) -> None: ...


class RegisterCommand(Protocol):
    def __call__(self, command: Any) -> None: ...


@dataclass
class Registry:
    """Everything registered, keyed by name; a second registration of a name is refused."""

    algorithms: dict[str, AlgorithmEntry] = field(default_factory=dict)
    environments: dict[str, EnvironmentEntry] = field(default_factory=dict)
    backends: dict[str, BackendEntry] = field(default_factory=dict)
    commands: dict[str, CommandEntry] = field(default_factory=dict)
    reserved_commands: frozenset[str] = frozenset()

    def algorithm(self, name: str) -> AlgorithmEntry:
        return self.algorithms[name]

    def environment_for(self, family: Family, name: str | None = None) -> EnvironmentEntry | None:
        """The builder called ``name`` if it serves ``family``; without a name, the family's
        default: the first builder registered for it (first-party plugins register first)."""
        if name is not None:
            entry = self.environments.get(name)
            return entry if entry is not None and family in entry.families else None
        return next((e for e in self.environments.values() if family in e.families), None)

    def builders_for(self, family: Family) -> list[str]:
        """Names of every builder serving ``family``, the default first."""
        return [name for name, entry in self.environments.items() if family in entry.families]

    def contributions(self, plugin: str) -> list[str]:
        """What one plugin contributed, as ``kind:name`` labels."""
        kinds = (
            ("algorithm", self.algorithms),
            ("environment", self.environments),
            ("backend", self.backends),
            ("command", self.commands),
        )
        return [
            f"{kind}:{name}"
            for kind, entries in kinds
            for name, entry in entries.items()
            if entry.plugin == plugin
        ]

    # -- register callbacks handed to the hooks ------------------------------------------------

    def algorithm_registrar(self, plugin: str) -> RegisterAlgorithm:
        def register(
            *, name: str, spec: type[AlgorithmSpec], family: Family | str, implementation: str
        ) -> None:
            _require_subclass(name, spec, AlgorithmSpec)
            _check_mutable(name, spec)
            family = _family(family)
            _check_loop_fields(name, spec, family)
            entry = AlgorithmEntry(name, spec, family, implementation, plugin)
            _add(self.algorithms, "algorithm", entry)

        return register

    def environment_registrar(self, plugin: str) -> RegisterEnvironment:
        def register(
            *,
            name: str,
            spec: type[EnvironmentSpec],
            families: Iterable[Family | str],
            implementation: str,
        ) -> None:
            _require_subclass(name, spec, EnvironmentSpec)
            wanted = frozenset(_family(family) for family in families)
            entry = EnvironmentEntry(name, spec, wanted, implementation, plugin)
            _add(self.environments, "environment builder", entry)

        return register

    def backend_registrar(self, plugin: str) -> RegisterBackend:
        def register(*, name: str, options: type[Spec], implementation: str) -> None:
            _require_subclass(name, options, Spec)
            _add(self.backends, "backend", BackendEntry(name, options, implementation, plugin))

        return register

    def command_registrar(self, plugin: str) -> RegisterCommand:
        def register(command: Any) -> None:
            name = getattr(command, "name", None)
            if not name or not callable(getattr(command, "main", None)):
                raise PluginError(f"{command!r} is not a click command")
            if name in self.reserved_commands:
                raise PluginError(f"command '{name}' is a core command; choose another name")
            _add(self.commands, "command", CommandEntry(name, command, plugin))

        return register


def _add(table: dict[str, Any], kind: str, entry: Any) -> None:
    existing = table.get(entry.name)
    if existing is not None:
        raise PluginError(
            f"{kind} '{entry.name}' is registered by both '{existing.plugin}' and '{entry.plugin}'",
            "uninstall or disable one of them",
        )
    table[entry.name] = entry


def _require_subclass(name: str, spec: Any, base: type[Spec]) -> None:
    if not (isinstance(spec, type) and issubclass(spec, base)):
        raise PluginError(
            f"'{name}' comes with {spec!r}, not a subclass of agile_cli.{base.__name__}"
        )
    if spec.model_config.get("extra") != "forbid":
        raise PluginError(
            f"the spec of '{name}' ({spec.__name__}) accepts unknown keys; "
            "keep agile_cli.Spec's extra='forbid'"
        )


def _family(family: Family | str) -> Family:
    try:
        return Family(family)
    except ValueError:
        valid = ", ".join(f.value for f in Family)
        raise PluginError(f"unknown family {family!r} (valid: {valid})") from None


def _check_loop_fields(name: str, spec: type[AlgorithmSpec], family: Family) -> None:
    """The single-agent loops read ``learn_step`` (and ``batch_size``) from every member."""
    if family in (Family.OFF_POLICY, Family.ON_POLICY):
        field = spec.model_fields.get("learn_step")
        if field is None or field.annotation is not int:
            raise PluginError(
                f"algorithm '{name}' ({family.value}) needs an int field 'learn_step': "
                "the training loop reads it"
            )


def _check_mutable(name: str, spec: type[AlgorithmSpec]) -> None:
    for hp in spec.mutable_hyperparameters:
        field = spec.model_fields.get(hp)
        if field is None or field.annotation not in (int, float):
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
