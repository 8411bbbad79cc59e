"""The hooks a plugin implements to extend agile.

A plugin is a module (or object) found through the ``agile`` entry-point group, first-party
plugins included. It implements any of the hooks below, decorated with :data:`hookimpl`.
Each hook receives a ``register`` callback owned by the core: the core checks what is
registered, stamps it with the contributing plugin, and refuses a name registered twice,
naming both plugins.

Stability promise: hook names and parameter names are never renamed or removed. New
parameters may be added; an implementation only declares the parameters it uses, so adding one
never breaks an existing plugin.

Plugin modules are imported, and their hooks called, each time the CLI starts: keep their top
level light. Heavy dependencies (torch, gymnasium, ...) belong in the ``implementation``
modules, which are imported only when something is trained or built. A spec (or a backend's
options) may be passed as a class or named as a ``"module:Class"`` string: a string is imported
and checked the first time a command needs it (``agile validate`` imports only the specs of the
manifest it reads), a class is checked when it is registered. ``agile plugins`` and
``agile schema`` import every spec, so a broken spec module shows there as a failed row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from agile_cli.host.registry import (
        RegisterAlgorithm,
        RegisterBackend,
        RegisterCommand,
        RegisterEnvironment,
        RegisterParadigm,
        RegisterSelection,
    )

PROJECT = "agile"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def agile_register_paradigms(register: RegisterParadigm) -> None:
    """Register training paradigms (how members of a kind of algorithm train).

    Called once when the plugin host is built, for every plugin before any algorithm or
    environment builder is registered, so those may name a paradigm of any plugin as their
    ``family``. For each paradigm call ``register(name=..., implementation="module:Class",
    ...)``:

    - ``implementation``: a :class:`~agile_cli.Paradigm` subclass, imported only when
      training starts. Its ``population(manifest, cls, env, context, size)`` returns
      ``size`` members of the algorithm class ``cls`` with indices ``0..size-1`` (the RL
      paradigms build each alone from the network section; the LLM paradigm builds LoRA
      adapters over one shared model), into which resuming and ``agile evaluate`` load saved
      states. Its ``runner(manifest, env, buffer)`` returns an :class:`~agile_cli.Runner`,
      whose ``train_population(members, steps, progress)`` trains the population for one
      generation of ``steps`` steps each, calling ``progress(n)`` as steps are done, and whose
      ``evaluate_population(members, rounds, max_steps)`` scores it. ``agile evaluate`` asks
      for a runner with ``buffer`` None to score a saved member, so a runner must not need the
      buffer to evaluate. Optionally, ``buffer(manifest, env, device)`` returns what the
      population shares (e.g. a replay buffer), ``environment(manifest, build, members)``
      builds the environment ``members`` members train in at once, ``memory_needs`` names
      what the run will hold in memory and ``torch_threads`` how many threads torch uses;
    - ``network`` / ``replay_buffer``: the spec (or ``"module:Class"``) of the manifest's
      ``network`` / ``replay_buffer`` section for the paradigm's algorithms (None: the
      paradigm adds no such section; a ``replay_buffer`` spec: its ``buffer`` keeps one);
    - ``multi_agent``: members take dicts of spaces keyed by agent;
    - ``training``: a :class:`~agile_cli.TrainingSpec` subclass (or ``"module:Class"``)
      adding the paradigm's own fields to the ``training`` section;
    - ``algorithm_fields``: ``{name: type}`` every algorithm's spec must declare (the runner
      reads them);
    - ``description``: one line for ``agile plugins``;
    - ``step_unit``: what ``training.max_steps`` counts, as progress names it;
    - ``check_architecture``: ``check(architecture, network, algorithm)`` (an
      :class:`~agile_cli.host.registry.ArchitectureCheck`), called by validation for each
      architecture a recipe gives the members, with the validated ``network`` and
      ``algorithm`` sections; it raises ``ValueError`` naming what is wrong (a width over the
      section's bound, data the members cannot adopt). Without it a recipe may give no
      architecture. Keep it light: import the training stack inside it.
    """


@hookspec
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    """Register algorithms.

    Called once when the plugin host is built. For each algorithm call
    ``register(name=..., spec=..., family=..., implementation="module:Class")``:

    - ``name`` is what ``algorithm.name`` must equal in a manifest (case-sensitive);
    - ``spec`` is an :class:`~agile_cli.AlgorithmSpec` subclass (or ``"module:Class"``, imported
      when a manifest names the algorithm) validating the rest of the ``algorithm`` section;
    - ``family`` names the training paradigm (``"off_policy"``, ``"on_policy"``... for the
      first-party ones, or any name a plugin registered with ``agile_register_paradigms``): it
      picks the runner, the shared buffer and the environment builders;
    - ``implementation`` names the :class:`~agile_rl.Algorithm` subclass, imported only when
      training starts;
    - ``aliases`` (optional) maps other spellings ``algorithm.name`` may give to the fields
      each implies, e.g. ``{"Recurrent PPO": {"recurrent": True}, "RecurrentPPO": {...}}``
      (``{}``: none). A manifest naming one validates as ``name`` with those fields filled in
      and a warning naming ``name``, which resolved manifests carry; one giving an implied
      field another value is refused. An alias that is already a name or an alias, or that
      implies a key the spec lacks, is refused.

    May not build networks or import heavy dependencies.
    """


@hookspec
def agile_register_environments(register: RegisterEnvironment) -> None:
    """Register environment builders.

    Called once when the plugin host is built. For each builder call
    ``register(name=..., spec=..., families=..., implementation="module:Builder")``: ``spec`` is
    an :class:`~agile_cli.EnvironmentSpec` subclass (or ``"module:Class"``) that validates the
    ``environment`` section of manifests whose algorithm belongs to one of ``families``;
    ``implementation`` names an :class:`~agile_cli.EnvironmentBuilder`. Several builders may
    serve a family: the first registered (first-party plugins register first) is the default,
    and a manifest picks another with ``environment.builder: NAME``.
    """


@hookspec
def agile_register_backends(register: RegisterBackend) -> None:
    """Register training backends (where a manifest runs).

    Called once when the plugin host is built. For each backend call
    ``register(name=..., options=..., implementation="module:Backend")``: ``options`` is a
    :class:`~agile_cli.Spec` subclass (or ``"module:Class"``) of the backend's run options
    (``agile train --backend NAME``). ``training`` (optional) is a
    :class:`~agile_cli.TrainingSpec` subclass (or ``"module:Class"``) of fields the backend
    reads from the manifest's ``training`` section; since a manifest is validated without
    knowing where it will run, every manifest accepts them (and imports them).
    """


@hookspec
def agile_register_selection_strategies(register: RegisterSelection) -> None:
    """Register selection strategies (how the next generation is built from an evaluated one).

    Called once when the plugin host is built. For each strategy call
    ``register(name=..., spec=..., implementation="module:factory")``:

    - ``name`` is what the manifest's ``selection_strategy.strategy`` (or
      ``tournament_selection.strategy``) must equal; ``tournament`` is the core's own;
    - ``spec`` is a :class:`~agile_cli.SelectionSpec` subclass (or ``"module:Class"``)
      validating that section, whose
      ``check_training`` checks it against the population size and whose ``resolved`` fills in
      defaults that depend on it;
    - ``implementation``: ``factory(spec, pop_size)`` returns a
      :class:`~agile_cli.SelectionStrategy`, imported only when training starts. Its
      ``select(population, rng)`` returns a :class:`~agile_cli.Selection` (the elite, the next
      generation and which of its members to mutate); ``state_dict`` and ``load_state_dict``
      carry what it remembers between generations through checkpoints, and ``metrics`` adds
      a ``selection`` entry to each generation's line of ``metrics.jsonl``.
    """


@hookspec
def agile_register_commands(register: RegisterCommand) -> None:
    """Register extra CLI commands.

    Called once when the CLI builds its command list: to list commands (``--help``), to run a
    plugin's command, and for ``agile plugins``; not for a core command such as ``agile
    validate``, so import the commands inside the hook. Call ``register(command)`` with a
    :class:`click.Command` (or group); its name becomes ``agile NAME``. Core command names
    cannot be taken.
    """
