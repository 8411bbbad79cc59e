"""The hooks a plugin implements to extend agile.

A plugin is a module (or object) found through the ``agile`` entry-point group, first-party
plugins included. It implements any of the hooks below, decorated with :data:`hookimpl`.
Each hook receives a ``register`` callback owned by the core: the core checks what is
registered, stamps it with the contributing plugin, and refuses a name registered twice,
naming both plugins.

Stability promise: hook names and parameter names are never renamed or removed. New
parameters may be added; an implementation only declares the parameters it uses, so adding one
never breaks an existing plugin.

Plugin modules are imported when the CLI starts (and by ``agile validate``): keep their top
level light. Heavy dependencies (torch, gymnasium, ...) belong in the ``implementation``
modules, which are imported only when something is trained or built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from agile_cli.registry import (
        RegisterAlgorithm,
        RegisterBackend,
        RegisterCommand,
        RegisterEnvironment,
    )

PROJECT = "agile"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    """Register algorithms.

    Called once when the plugin host is built. For each algorithm call
    ``register(name=..., spec=..., family=..., implementation="module:Class")``:

    - ``name`` is what ``algorithm.name`` must equal in a manifest (case-sensitive);
    - ``spec`` is an :class:`~agile_cli.AlgorithmSpec` subclass validating the rest of the
      ``algorithm`` section;
    - ``family`` (a :class:`~agile_cli.Family`) picks the environment builder and loop;
    - ``implementation`` names the :class:`~agile_cli.Algorithm` subclass, imported only when
      training starts.

    May not build networks or import heavy dependencies.
    """


@hookspec
def agile_register_environments(register: RegisterEnvironment) -> None:
    """Register environment builders.

    Called once when the plugin host is built. For each builder call
    ``register(name=..., spec=..., families=..., implementation="module:Builder")``: ``spec`` is
    an :class:`~agile_cli.EnvironmentSpec` subclass that validates the ``environment`` section of
    manifests whose algorithm belongs to one of ``families``; ``implementation`` names an
    :class:`~agile_cli.EnvironmentBuilder`. Several builders may serve a family: the first
    registered (first-party plugins register first) is the default, and a manifest picks
    another with ``environment.builder: NAME``.
    """


@hookspec
def agile_register_backends(register: RegisterBackend) -> None:
    """Register training backends (where a manifest runs).

    Called once when the plugin host is built. For each backend call
    ``register(name=..., options=..., implementation="module:Backend")``: ``options`` is a
    :class:`~agile_cli.Spec` subclass of the backend's run options (``agile train
    --backend NAME``).
    """


@hookspec
def agile_register_commands(register: RegisterCommand) -> None:
    """Register extra CLI commands.

    Called once when the CLI builds its command list. Call ``register(command)`` with a
    :class:`click.Command` (or group); its name becomes ``agile NAME``. Core command names
    cannot be taken.
    """
