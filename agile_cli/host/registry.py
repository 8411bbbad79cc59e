"""What plugins registered: training paradigms, algorithms, environment builders, backends and
commands.

Names, families and references are recorded when a plugin registers them; a spec registered by
reference (``spec="module:Class"``) is imported and checked the first time it is asked for
(:class:`~agile_cli.host.deferred.Deferred`), so a command builds only the specs it uses. A spec
registered as a class is checked at once, as it always was.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from agile_cli.errors import PluginError
from agile_cli.host import checks
from agile_cli.host.deferred import Deferred, UnloadableError
from agile_cli.host.entries import (
    CORE,
    TOURNAMENT,
    AlgorithmAlias,
    AlgorithmEntry,
    ArchitectureCheck,
    BackendEntry,
    CommandEntry,
    EnvironmentEntry,
    ParadigmEntry,
    SelectionEntry,
    load_object,
)
from agile_cli.models.algorithm import AlgorithmSpec, EnvironmentSpec
from agile_cli.models.base import Spec, suggest
from agile_cli.models.selection import SelectionSpec
from agile_cli.models.training import TrainingSpec

__all__ = [  # the entries are defined in agile_cli.host.entries, and long imported from here
    "CORE",
    "LAZY_TABLES",
    "TOURNAMENT",
    "AlgorithmAlias",
    "AlgorithmEntry",
    "ArchitectureCheck",
    "BackendEntry",
    "CommandEntry",
    "EnvironmentEntry",
    "ParadigmEntry",
    "RegisterAlgorithm",
    "RegisterBackend",
    "RegisterCommand",
    "RegisterEnvironment",
    "RegisterParadigm",
    "RegisterSelection",
    "Registry",
    "SelectionEntry",
    "load_object",
    "usable",
]

T = TypeVar("T")

#: The tables of the registry whose entries may hold parts registered by reference.
LAZY_TABLES = ("paradigms", "algorithms", "environments", "backends", "selections")


class RegisterParadigm(Protocol):
    def __call__(
        self,
        *,
        name: str,
        implementation: str,
        multi_agent: bool = False,
        training: type[TrainingSpec] | str = TrainingSpec,
        algorithm_fields: Mapping[str, type] | None = None,
        description: str = "",
        network: type[Spec] | str | None = None,
        replay_buffer: type[Spec] | str | None = None,
        step_unit: str = "env steps",
        check_architecture: ArchitectureCheck | None = None,
    ) -> None: ...


class RegisterAlgorithm(Protocol):
    def __call__(
        self,
        *,
        name: str,
        spec: type[AlgorithmSpec] | str,
        family: str,
        implementation: str,
        aliases: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None: ...


class RegisterEnvironment(Protocol):
    def __call__(
        self,
        *,
        name: str,
        spec: type[EnvironmentSpec] | str,
        families: Iterable[str],
        implementation: str,
    ) -> None: ...


class RegisterBackend(Protocol):
    def __call__(
        self,
        *,
        name: str,
        options: type[Spec] | str,
        implementation: str,
        training: type[TrainingSpec] | str | None = None,
    ) -> None: ...


class RegisterSelection(Protocol):
    def __call__(
        self, *, name: str, spec: type[SelectionSpec] | str, implementation: str
    ) -> None: ...


class RegisterCommand(Protocol):
    def __call__(self, command: Any) -> None: ...


@dataclass
class Registry:
    """Everything registered, keyed by name; a second registration of a name is refused."""

    paradigms: dict[str, ParadigmEntry] = field(default_factory=dict)
    algorithms: dict[str, AlgorithmEntry] = field(default_factory=dict)
    algorithm_aliases: dict[str, AlgorithmAlias] = field(default_factory=dict)
    environments: dict[str, EnvironmentEntry] = field(default_factory=dict)
    backends: dict[str, BackendEntry] = field(default_factory=dict)
    commands: dict[str, CommandEntry] = field(default_factory=dict)
    selections: dict[str, SelectionEntry] = field(
        default_factory=lambda: {TOURNAMENT.name: TOURNAMENT}
    )
    reserved_commands: frozenset[str] = frozenset()

    def algorithm(self, name: str) -> AlgorithmEntry:
        return self.algorithms[name]

    def paradigm(self, name: str) -> ParadigmEntry:
        """The paradigm called ``name`` (an algorithm's ``family``)."""
        return self.paradigms[name]

    def section_spec(self, entry: AlgorithmEntry, section: str) -> type[Spec] | None:
        """What the manifest's ``network`` or ``replay_buffer`` section is validated against
        for algorithm ``entry``: its spec's narrower class where it names one, else the one
        its paradigm declared; None where the paradigm adds no such section (or is missing)."""
        spec = entry.spec
        narrower = spec.network_spec if section == "network" else spec.replay_buffer_spec
        paradigm = self.paradigms.get(entry.family)
        return narrower or (paradigm.section(section) if paradigm is not None else None)

    def environment_for(self, family: str, name: str | None = None) -> EnvironmentEntry | None:
        """The builder called ``name`` if it serves ``family``; without a name, the family's
        default: the first builder registered for it (first-party plugins register first)."""
        if name is not None:
            entry = self.environments.get(name)
            return entry if entry is not None and family in entry.families else None
        return next((e for e in self.environments.values() if family in e.families), None)

    def builders_for(self, family: str) -> list[str]:
        """Names of every builder serving ``family``, the default first."""
        return [name for name, entry in self.environments.items() if family in entry.families]

    def contributions(self, plugin: str) -> list[str]:
        """What one plugin contributed, as ``kind:name`` labels."""
        return [
            f"{kind}:{name}"
            for kind, entries in self._tables()
            for name, entry in entries.items()
            if entry.plugin == plugin
        ]

    def _tables(self) -> tuple[tuple[str, dict[str, Any]], ...]:
        return (
            ("paradigm", self.paradigms),
            ("algorithm", self.algorithms),
            ("algorithm alias", self.algorithm_aliases),
            ("environment", self.environments),
            ("backend", self.backends),
            ("selection strategy", self.selections),
            ("command", self.commands),
        )

    def load(self, tables: Iterable[str] = LAZY_TABLES) -> dict[str, UnloadableError]:
        """Load now every part registered by reference in ``tables`` (names of this class's
        fields, e.g. ``backends``), as if each were asked for.

        :returns: plugin name -> the first of its parts that failed (nothing is forgotten:
            see :meth:`forget`).
        """
        failed: dict[str, UnloadableError] = {}
        for table in tables:
            for entry in list(getattr(self, table).values()):
                for part in _parts(entry):
                    if entry.plugin in failed:
                        break
                    try:
                        part.get()
                    except UnloadableError as error:
                        failed[entry.plugin] = error
        return failed

    def forget(self, plugin: str) -> None:
        """Drop everything ``plugin`` registered (a plugin that failed is dropped whole)."""
        for _, table in self._tables():
            for name in [name for name, entry in table.items() if entry.plugin == plugin]:
                del table[name]

    # -- register callbacks handed to the hooks ------------------------------------------------

    def paradigm_registrar(self, plugin: str) -> RegisterParadigm:
        def register(
            *,
            name: str,
            implementation: str,
            multi_agent: bool = False,
            training: type[TrainingSpec] | str = TrainingSpec,
            algorithm_fields: Mapping[str, type] | None = None,
            description: str = "",
            network: type[Spec] | str | None = None,
            replay_buffer: type[Spec] | str | None = None,
            step_unit: str = "env steps",
            check_architecture: ArchitectureCheck | None = None,
        ) -> None:
            name = str(name)
            checks.reference(name, implementation, "paradigm")
            label = f"paradigm '{name}'"
            part = _part(training, lambda t: checks.training_part(name, t), plugin, label)
            sections = {
                section: _part(target, lambda s: checks.subclass(name, s, Spec), plugin, label)
                for section, target in (("network", network), ("replay_buffer", replay_buffer))
                if target is not None
            }
            if check_architecture is not None and not callable(check_architecture):
                raise PluginError(
                    f"paradigm '{name}': check_architecture {check_architecture!r} is not callable"
                )
            fields = tuple((algorithm_fields or {}).items())
            entry = ParadigmEntry(
                name, implementation, bool(multi_agent), part, fields, description, plugin,
                sections, str(step_unit), check_architecture,
            )  # fmt: skip
            _add(self.paradigms, "paradigm", entry)

        return register

    def algorithm_registrar(self, plugin: str) -> RegisterAlgorithm:
        def register(
            *,
            name: str,
            spec: type[AlgorithmSpec] | str,
            family: str,
            implementation: str,
            aliases: Mapping[str, Mapping[str, Any]] | None = None,
        ) -> None:
            family = str(family)
            spellings = _aliases(name, aliases or {}, plugin)
            implied = {alias.name: alias.implies for alias in spellings}
            part = _part(spec, lambda s: self._checked_algorithm(name, s, family, implied),
                         plugin, f"algorithm '{name}'")  # fmt: skip
            _check_free(self.algorithm_aliases, "algorithm name", name, plugin)
            for alias in spellings:  # all checked before anything is registered
                _check_free(self.algorithms, "algorithm name", alias.name, plugin)
                _check_free(self.algorithm_aliases, "algorithm name", alias.name, plugin)
            _add(self.algorithms, "algorithm", AlgorithmEntry(name, part, family, implementation,
                                                              plugin))  # fmt: skip
            self.algorithm_aliases.update((alias.name, alias) for alias in spellings)

        return register

    def _checked_algorithm(
        self, name: str, spec: Any, family: str, implied: Mapping[str, Mapping[str, Any]]
    ) -> type[AlgorithmSpec]:
        """The checks of an algorithm's spec, against its paradigm as registered when the spec
        is checked (all paradigms register before any algorithm)."""
        paradigm = self.paradigms.get(family)  # None: not installed; validate says so
        fields = (family, paradigm.algorithm_fields) if paradigm is not None else None
        return checks.algorithm_spec(name, spec, fields, implied)

    def resolve_algorithm(self, name: str) -> tuple[AlgorithmEntry, AlgorithmAlias | None] | None:
        """The algorithm ``name`` names, registered under it or as one of its aliases (then
        with the alias); None when it names none."""
        entry = self.algorithms.get(name)
        if entry is not None:
            return entry, None
        alias = self.algorithm_aliases.get(name)
        if alias is None or alias.canonical not in self.algorithms:
            return None
        return self.algorithms[alias.canonical], alias

    def environment_registrar(self, plugin: str) -> RegisterEnvironment:
        def register(
            *,
            name: str,
            spec: type[EnvironmentSpec] | str,
            families: Iterable[str],
            implementation: str,
        ) -> None:
            part = _part(spec, lambda s: checks.subclass(name, s, EnvironmentSpec), plugin,
                         f"environment builder '{name}'")  # fmt: skip
            wanted = frozenset(str(family) for family in families)
            entry = EnvironmentEntry(name, part, wanted, implementation, plugin)
            _add(self.environments, "environment builder", entry)

        return register

    def backend_registrar(self, plugin: str) -> RegisterBackend:
        def register(
            *,
            name: str,
            options: type[Spec] | str,
            implementation: str,
            training: type[TrainingSpec] | str | None = None,
        ) -> None:
            label = f"backend '{name}'"
            part = _part(options, lambda s: checks.subclass(name, s, Spec), plugin, label)
            fields = (
                None
                if training is None
                else _part(training, lambda t: checks.training_part(name, t), plugin, label)
            )
            entry = BackendEntry(name, part, implementation, plugin, fields)
            _add(self.backends, "backend", entry)

        return register

    def selection_registrar(self, plugin: str) -> RegisterSelection:
        def register(*, name: str, spec: type[SelectionSpec] | str, implementation: str) -> None:
            checks.reference(name, implementation, "selection strategy")
            part = _part(spec, lambda s: checks.selection_spec(name, s), plugin,
                         f"selection strategy '{name}'")  # fmt: skip
            _add(self.selections, "selection strategy", SelectionEntry(name, part, implementation,
                                                                       plugin))  # fmt: skip

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

    def missing_paradigm(self, entry: AlgorithmEntry) -> str | None:
        """Why ``entry`` cannot be trained: its paradigm is not registered; None when it is."""
        if entry.family in self.paradigms:
            return None
        known = sorted(self.paradigms)
        close = suggest(entry.family, known)
        listing = "registered: " + (", ".join(known) or "none")
        said = f"did you mean '{close}'?" if close else listing
        return (
            f"{entry.name} trains by paradigm {entry.family!r}, which no plugin registers ({said})"
        )


def usable(entries: Iterable[T], part: Callable[[T], Any]) -> list[T]:
    """The ``entries`` whose ``part`` loads (those of a broken plugin are left out), for what
    looks across plugins and must not be stopped by one broken plugin."""
    kept = []
    for entry in entries:
        try:
            part(entry)
        except UnloadableError:
            continue
        kept.append(entry)
    return kept


def _part(target: Any, check: Callable[[Any], T], plugin: str, label: str) -> Deferred[T]:
    """A part of a registration: a ``"module:Class"`` string is kept to load on first use; an
    object is checked now, so that a plugin passing classes fails as it always did."""
    if isinstance(target, str) and ":" not in target:
        raise PluginError(f"{label}: {target!r} is not a 'module:Class' reference")
    part = Deferred(target, check, plugin=plugin, label=label)
    if not part.by_reference:
        part.get()
    return part


def _aliases(
    name: str, aliases: Mapping[str, Mapping[str, Any]], plugin: str
) -> list[AlgorithmAlias]:
    """The other spellings of algorithm ``name``, each with the fields it implies (whether
    the spec has them is checked with the spec)."""
    spellings = []
    for alias, implies in aliases.items():
        checks.alias(name, alias, implies)
        frozen = types.MappingProxyType(dict(implies))
        spellings.append(AlgorithmAlias(alias, name, frozen, plugin))
    return spellings


def _parts(entry: Any) -> list[Deferred[Any]]:
    """The parts of a registry entry that may load on first use."""
    return [value for value in vars(entry).values() if isinstance(value, Deferred)]


def _add(table: dict[str, Any], kind: str, entry: Any) -> None:
    _check_free(table, kind, entry.name, entry.plugin)
    table[entry.name] = entry


def _check_free(table: dict[str, Any], kind: str, name: str, plugin: str) -> None:
    existing = table.get(name)
    if existing is not None:
        raise PluginError(
            f"{kind} '{name}' is registered by both '{existing.plugin}' and '{plugin}'",
            "uninstall or disable one of them",
        )
