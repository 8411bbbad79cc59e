"""The entries of the registry: what one plugin registered under one name (a paradigm, an
algorithm and its aliases, an environment builder, a backend, a selection strategy, a
command), stamped with the plugin's name.

A spec an entry carries is a :class:`~agile_cli.host.deferred.Deferred` part: its property
(``spec``, ``training``, ``options``) imports it the first time it is read when the plugin
named it by reference, and raises :class:`~agile_cli.host.deferred.UnloadableError` when it
cannot be loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agile_cli.errors import PluginError
from agile_cli.host.deferred import Deferred, import_reference
from agile_cli.models.algorithm import AlgorithmSpec, EnvironmentSpec
from agile_cli.models.base import Spec
from agile_cli.models.selection import SelectionSpec, TournamentSelectionSpec
from agile_cli.models.training import TrainingSpec


def load_object(reference: str) -> Any:
    """Import ``"package.module:Attribute"`` and return the attribute.

    :raises PluginError: naming the reference when it cannot be imported.
    """
    try:
        return import_reference(reference)
    except (ImportError, AttributeError) as exc:
        raise PluginError(
            f"cannot load '{reference}': {type(exc).__name__}: {exc}",
            "reinstall the plugin that provides it",
        ) from None


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
    :param training_part: the ``training`` section's spec (a :class:`~agile_cli.TrainingSpec`
        subclass with the paradigm's own fields), or where to import it from; read it as
        :attr:`training`.
    :param algorithm_fields: ``name -> type`` of the spec fields every algorithm of the paradigm
        must declare, because the runner reads them.
    :param section_parts: the manifest sections the paradigm adds, by name (``network``,
        ``replay_buffer``: a paradigm that keeps a replay buffer, which its ``buffer`` builds),
        each the spec it is validated against or where to import it from; read them with
        :meth:`section`.
    :param step_unit: what the paradigm's ``training.max_steps`` and ``evo_steps`` count, as
        progress and summaries name it (``env steps``; an LLM's ``prompts``; an offline
        learner's ``updates``).
    :param check_architecture: checks an architecture a manifest gives the paradigm's members
        (a recipe's schedule) against the network section; None: its members take none.
    """

    name: str
    implementation: str
    multi_agent: bool
    training_part: Deferred[type[TrainingSpec]]
    algorithm_fields: tuple[tuple[str, type], ...]
    description: str
    plugin: str
    section_parts: Mapping[str, Deferred[type[Spec]]] = field(default_factory=dict)
    step_unit: str = "env steps"
    check_architecture: ArchitectureCheck | None = None

    @property
    def training(self) -> type[TrainingSpec]:
        """The ``training`` section's spec, imported on first use if named by reference.

        :raises UnloadableError: it cannot be imported, or is not a TrainingSpec subclass.
        """
        return self.training_part.get()

    @property
    def uses_replay_buffer(self) -> bool:
        """Whether the manifest's ``replay_buffer`` section applies."""
        return "replay_buffer" in self.section_parts

    def section(self, name: str) -> type[Spec] | None:
        """The spec of section ``name`` the paradigm adds, imported on first use if named by
        reference; None where it adds none.

        :raises UnloadableError: it cannot be imported, or is not a Spec subclass.
        """
        part = self.section_parts.get(name)
        return None if part is None else part.get()

    def load(self) -> Any:
        """The paradigm's implementation class (imports its module, and so the training
        stack); the training set-up checks that it is a :class:`~agile_cli.Paradigm`."""
        return load_object(self.implementation)


@dataclass(frozen=True)
class AlgorithmEntry:
    """An algorithm a plugin registered; ``family`` names its paradigm.

    :param spec_part: its :class:`~agile_cli.AlgorithmSpec` subclass, or where to import it
        from; read it as :attr:`spec`.
    """

    name: str
    spec_part: Deferred[type[AlgorithmSpec]]
    family: str
    implementation: str
    plugin: str

    @property
    def spec(self) -> type[AlgorithmSpec]:
        """The spec of the ``algorithm`` section, imported on first use if named by reference.

        :raises UnloadableError: it cannot be imported, or the registry's checks refuse it.
        """
        return self.spec_part.get()

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
    """An environment builder a plugin registered; ``spec_part`` is read as :attr:`spec`."""

    name: str
    spec_part: Deferred[type[EnvironmentSpec]]
    families: frozenset[str]
    implementation: str
    plugin: str

    @property
    def spec(self) -> type[EnvironmentSpec]:
        """The spec of the ``environment`` section (:raises UnloadableError: as
        :attr:`AlgorithmEntry.spec`)."""
        return self.spec_part.get()

    def load(self) -> Any:
        return load_object(self.implementation)


@dataclass(frozen=True)
class BackendEntry:
    """A training backend a plugin registered; its parts are read as :attr:`options` and
    :attr:`training`."""

    name: str
    options_part: Deferred[type[Spec]]
    implementation: str
    plugin: str
    training_part: Deferred[type[TrainingSpec]] | None = None

    @property
    def options(self) -> type[Spec]:
        """The spec of its run options (:raises UnloadableError: as :attr:`AlgorithmEntry.spec`)."""
        return self.options_part.get()

    @property
    def training(self) -> type[TrainingSpec] | None:
        """The ``training`` fields it reads; None: it reads none (:raises UnloadableError: as
        :attr:`AlgorithmEntry.spec`)."""
        return None if self.training_part is None else self.training_part.get()

    def load(self) -> Any:
        return load_object(self.implementation)


@dataclass(frozen=True)
class SelectionEntry:
    """A selection strategy: the core's ``tournament`` or one a plugin registered.

    :param spec_part: its :class:`~agile_cli.SelectionSpec` subclass, or where to import it
        from; read it as :attr:`spec`.
    :param implementation: ``"module:factory"``; ``factory(spec, pop_size)`` returns the
        :class:`~agile_cli.SelectionStrategy`.
    """

    name: str
    spec_part: Deferred[type[SelectionSpec]]
    implementation: str
    plugin: str

    @property
    def spec(self) -> type[SelectionSpec]:
        """The spec of the selection section (:raises UnloadableError: as
        :attr:`AlgorithmEntry.spec`)."""
        return self.spec_part.get()

    def build(self, spec: SelectionSpec, pop_size: int) -> Any:
        return load_object(self.implementation)(spec, pop_size)


#: The plugin name the core's own contributions carry.
CORE = "agile_cli"

TOURNAMENT = SelectionEntry(
    "tournament",
    Deferred(
        TournamentSelectionSpec,
        lambda spec: spec,
        plugin=CORE,
        label="selection strategy 'tournament'",
    ),
    "agile_cli.evolution.selection:tournament_selection",
    CORE,
)


@dataclass(frozen=True)
class CommandEntry:
    """A CLI command a plugin registered."""

    name: str
    command: Any
    plugin: str
