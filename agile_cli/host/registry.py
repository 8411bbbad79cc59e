"""What plugins registered: training paradigms, algorithms, environment builders, backends and
commands."""

from __future__ import annotations

import importlib
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agile_cli.errors import PluginError
from agile_cli.models.algorithm import AlgorithmSpec, EnvironmentSpec, Family
from agile_cli.models.base import Spec, suggest
from agile_cli.models.selection import SelectionSpec, TournamentSelectionSpec
from agile_cli.models.training import TrainingSpec


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


class ArchitectureCheck(Protocol):
    """A paradigm's check of an architecture a manifest names for its members (each entry of
    a recipe's schedule), at validation: before anything is built, so it may not import the
    training stack until it is called with an architecture."""

    def __call__(
        self, architecture: Mapping[str, Any], network: Spec, algorithm: AlgorithmSpec
    ) -> None:
        """Refuse ``architecture`` unless the members of the validated ``algorithm`` section
        could adopt it and the validated ``network`` section's bounds allow every size in it.

        :raises ValueError: one sentence saying what is wrong in ``architecture``, e.g.
            ``head.hidden_size[1] is 100000, over network.head_config.max_mlp_nodes 500``.
        """


@dataclass(frozen=True)
class ParadigmEntry:
    """A training paradigm a plugin registered: how the members of its algorithms train.

    :param name: what algorithms and environment builders name as their ``family``.
    :param implementation: ``"module:Class"``, a :class:`~agile_cli.Paradigm` subclass that
        builds what a run needs (imported only to train).
    :param multi_agent: members take dicts of spaces keyed by agent (``observation_spaces``,
        ``action_spaces``) instead of one ``observation_space`` and ``action_space``.
    :param training: the ``training`` section's spec (a :class:`~agile_cli.TrainingSpec`
        subclass with the paradigm's own fields).
    :param algorithm_fields: ``name -> type`` of the spec fields every algorithm of the paradigm
        must declare, because the runner reads them.
    :param replay_buffer: the paradigm keeps a replay buffer (its ``buffer`` builds one), so
        the manifest's ``replay_buffer`` section applies.
    :param step_unit: what the paradigm's ``training.max_steps`` and ``evo_steps`` count, as
        progress and summaries name it (``env steps``; an LLM's ``prompts``; an offline
        learner's ``updates``).
    :param check_architecture: checks an architecture a manifest gives the paradigm's members
        (a recipe's schedule) against the network section; None: its members take none.
    """

    name: str
    implementation: str
    multi_agent: bool
    training: type[TrainingSpec]
    algorithm_fields: tuple[tuple[str, type], ...]
    description: str
    plugin: str
    replay_buffer: bool = False
    step_unit: str = "env steps"
    check_architecture: ArchitectureCheck | None = None

    @property
    def uses_replay_buffer(self) -> bool:
        """Whether the manifest's ``replay_buffer`` section applies."""
        return self.replay_buffer

    def load(self) -> Any:
        """The paradigm's implementation class (imports its module, and so the training
        stack); the training set-up checks that it is a :class:`~agile_cli.Paradigm`."""
        return load_object(self.implementation)


@dataclass(frozen=True)
class AlgorithmEntry:
    """An algorithm a plugin registered; ``family`` names its paradigm."""

    name: str
    spec: type[AlgorithmSpec]
    family: str
    implementation: str
    plugin: str

    def load(self) -> Any:
        """The algorithm class (imports its module, and so its heavy dependencies)."""
        return load_object(self.implementation)


@dataclass(frozen=True)
class AlgorithmAlias:
    """Another spelling of a registered algorithm's name (e.g. one the reference format
    writes), accepted in ``algorithm.name`` with a warning naming the canonical spelling.

    :param canonical: the registered name it stands for (what resolved manifests carry).
    :param implies: fields the spelling sets (``Recurrent PPO``: ``recurrent: true``); a
        manifest giving one of them another value is refused.
    """

    name: str
    canonical: str
    implies: Mapping[str, Any]
    plugin: str


@dataclass(frozen=True)
class EnvironmentEntry:
    """An environment builder a plugin registered."""

    name: str
    spec: type[EnvironmentSpec]
    families: frozenset[str]
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
    training: type[TrainingSpec] | None = None

    def load(self) -> Any:
        return load_object(self.implementation)


@dataclass(frozen=True)
class SelectionEntry:
    """A selection strategy: the core's ``tournament`` or one a plugin registered.

    :param implementation: ``"module:factory"``; ``factory(spec, pop_size)`` returns the
        :class:`~agile_cli.SelectionStrategy`.
    """

    name: str
    spec: type[SelectionSpec]
    implementation: str
    plugin: str

    def build(self, spec: SelectionSpec, pop_size: int) -> Any:
        return load_object(self.implementation)(spec, pop_size)


#: The plugin name the core's own contributions carry.
CORE = "agile_cli"

TOURNAMENT = SelectionEntry(
    "tournament",
    TournamentSelectionSpec,
    "agile_cli.evolution.selection:tournament_selection",
    CORE,
)


@dataclass(frozen=True)
class CommandEntry:
    """A CLI command a plugin registered."""

    name: str
    command: Any
    plugin: str


class RegisterParadigm(Protocol):
    def __call__(
        self,
        *,
        name: str,
        implementation: str,
        multi_agent: bool = False,
        training: type[TrainingSpec] = TrainingSpec,
        algorithm_fields: Mapping[str, type] | None = None,
        description: str = "",
        replay_buffer: bool = False,
        step_unit: str = "env steps",
        check_architecture: ArchitectureCheck | None = None,
    ) -> None: ...


class RegisterAlgorithm(Protocol):
    def __call__(
        self,
        *,
        name: str,
        spec: type[AlgorithmSpec],
        family: Family | str,
        implementation: str,
        aliases: Mapping[str, Mapping[str, Any]] | None = None,
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
    def __call__(
        self,
        *,
        name: str,
        options: type[Spec],
        implementation: str,
        training: type[TrainingSpec] | None = None,
    ) -> None: ...


class RegisterSelection(Protocol):
    def __call__(self, *, name: str, spec: type[SelectionSpec], implementation: str) -> None: ...


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
        kinds = (
            ("paradigm", self.paradigms),
            ("algorithm", self.algorithms),
            ("algorithm alias", self.algorithm_aliases),
            ("environment", self.environments),
            ("backend", self.backends),
            ("selection strategy", self.selections),
            ("command", self.commands),
        )
        return [
            f"{kind}:{name}"
            for kind, entries in kinds
            for name, entry in entries.items()
            if entry.plugin == plugin
        ]

    # -- register callbacks handed to the hooks ------------------------------------------------

    def paradigm_registrar(self, plugin: str) -> RegisterParadigm:
        def register(
            *,
            name: str,
            implementation: str,
            multi_agent: bool = False,
            training: type[TrainingSpec] = TrainingSpec,
            algorithm_fields: Mapping[str, type] | None = None,
            description: str = "",
            replay_buffer: bool = False,
            step_unit: str = "env steps",
            check_architecture: ArchitectureCheck | None = None,
        ) -> None:
            name = _plain(name)
            _require_subclass(name, training, TrainingSpec)
            _check_reference(name, implementation)
            if check_architecture is not None and not callable(check_architecture):
                raise PluginError(
                    f"paradigm '{name}': check_architecture {check_architecture!r} is not callable"
                )
            fields = tuple((algorithm_fields or {}).items())
            entry = ParadigmEntry(
                name, implementation, bool(multi_agent), training, fields, description, plugin,
                bool(replay_buffer), str(step_unit), check_architecture,
            )  # fmt: skip
            _add(self.paradigms, "paradigm", entry)

        return register

    def algorithm_registrar(self, plugin: str) -> RegisterAlgorithm:
        def register(
            *,
            name: str,
            spec: type[AlgorithmSpec],
            family: Family | str,
            implementation: str,
            aliases: Mapping[str, Mapping[str, Any]] | None = None,
        ) -> None:
            _require_subclass(name, spec, AlgorithmSpec)
            _check_free(self.algorithm_aliases, "algorithm name", name, plugin)
            _check_mutable(name, spec)
            if spec.training_spec is not None:
                _require_subclass(name, spec.training_spec, TrainingSpec)
            family = _plain(family)
            paradigm = self.paradigms.get(family)  # None: not installed; validate says so
            if paradigm is not None:
                _check_paradigm_fields(name, spec, paradigm)
            entry = AlgorithmEntry(name, spec, family, implementation, plugin)
            checked = [_checked_alias(entry, a, implied) for a, implied in (aliases or {}).items()]
            for alias in checked:  # all checked before anything is registered
                _check_free(self.algorithms, "algorithm name", alias.name, plugin)
                _check_free(self.algorithm_aliases, "algorithm name", alias.name, plugin)
            _add(self.algorithms, "algorithm", entry)
            self.algorithm_aliases.update((alias.name, alias) for alias in checked)

        return register

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
            spec: type[EnvironmentSpec],
            families: Iterable[Family | str],
            implementation: str,
        ) -> None:
            _require_subclass(name, spec, EnvironmentSpec)
            wanted = frozenset(_plain(family) for family in families)
            entry = EnvironmentEntry(name, spec, wanted, implementation, plugin)
            _add(self.environments, "environment builder", entry)

        return register

    def backend_registrar(self, plugin: str) -> RegisterBackend:
        def register(
            *,
            name: str,
            options: type[Spec],
            implementation: str,
            training: type[TrainingSpec] | None = None,
        ) -> None:
            _require_subclass(name, options, Spec)
            if training is not None:
                _require_subclass(name, training, TrainingSpec)
            entry = BackendEntry(name, options, implementation, plugin, training)
            _add(self.backends, "backend", entry)

        return register

    def selection_registrar(self, plugin: str) -> RegisterSelection:
        def register(*, name: str, spec: type[SelectionSpec], implementation: str) -> None:
            _require_subclass(name, spec, SelectionSpec)
            _check_reference(name, implementation, "selection strategy")
            _check_strategy_literal(name, spec)
            _add(self.selections, "selection strategy", SelectionEntry(name, spec, implementation,
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


def _plain(name: Family | str) -> str:
    """A paradigm's name as a plain string (``Family`` members are strings too)."""
    return name.value if isinstance(name, Family) else name


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


def _check_reference(name: str, reference: str | None, kind: str = "paradigm") -> None:
    if reference is not None and (not isinstance(reference, str) or ":" not in reference):
        raise PluginError(f"{kind} '{name}': {reference!r} is not a 'module:callable' reference")


def _check_strategy_literal(name: str, spec: type[SelectionSpec]) -> None:
    """The spec's ``strategy`` field must accept exactly the registered name."""
    field = spec.model_fields["strategy"]
    if getattr(field.annotation, "__args__", None) != (name,):
        raise PluginError(
            f"selection strategy '{name}': {spec.__name__}.strategy must be "
            f"Literal['{name}'], so that the section names its strategy"
        )


def _check_paradigm_fields(name: str, spec: type[AlgorithmSpec], paradigm: ParadigmEntry) -> None:
    """The fields the paradigm's runner reads from every member's spec."""
    for field_name, annotation in paradigm.algorithm_fields:
        field = spec.model_fields.get(field_name)
        if field is None or field.annotation is not annotation:
            raise PluginError(
                f"algorithm '{name}' ({paradigm.name}) needs a {annotation.__name__} field "
                f"'{field_name}': the {paradigm.name} runner reads it"
            )


def _checked_alias(entry: AlgorithmEntry, alias: Any, implies: Any) -> AlgorithmAlias:
    """An alias of ``entry``: a non-empty name and ``{field: value}`` of the spec's fields."""
    if not isinstance(alias, str) or not alias.strip() or alias == entry.name:
        raise PluginError(f"algorithm '{entry.name}': alias {alias!r} is not another name")
    if not isinstance(implies, Mapping):
        raise PluginError(
            f"algorithm '{entry.name}': alias '{alias}' must map to the fields it implies "
            f"({{}} for none), not {implies!r}"
        )
    for key in implies:
        if key == "name" or key not in entry.spec.model_fields:
            raise PluginError(
                f"algorithm '{entry.name}': alias '{alias}' implies '{key}', which is not a "
                f"field of {entry.spec.__name__}"
            )
    frozen = types.MappingProxyType(dict(implies))
    return AlgorithmAlias(alias, entry.name, frozen, entry.plugin)


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
