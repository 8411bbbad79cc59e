"""The plugin host: finds plugins through entry points and collects what they register.

Nothing happens at import, and nothing is kept between calls: :func:`build_host` is called when
the CLI starts (which passes its registry on), and by :func:`installed_registry` when library
code is called without one.

Plugin code (an entry point's import, its registration with pluggy, each of its hooks, the
parts it names by reference) runs with ``sys.stdout`` sent to stderr, so that what a plugin
prints cannot corrupt machine-readable output, and with every exception but the user's Ctrl-C
caught, ``SystemExit`` and a ``KeyboardInterrupt`` the plugin raises itself included: a broken
plugin becomes one failed row, never the end of the program
(:func:`~agile_cli.host.deferred.run_plugin_code`).

The CLI builds a lazy host: every plugin module is imported and asked to register, but the
specs plugins name by reference are imported when first asked for, and the commands hook is
called only when commands are listed or a plugin's command is run. :meth:`PluginHost.load`
loads the rest, e.g. for ``agile plugins``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import pluggy

from agile_cli.errors import EXIT_USAGE, PluginError
from agile_cli.host import hookspecs
from agile_cli.host.deferred import describe, run_plugin_code
from agile_cli.host.registry import LAZY_TABLES, Registry
from agile_cli.models.base import suggest

ENTRY_POINT_GROUP = "agile"
BUILTIN_DISTRIBUTION = "agile-cli"

# Hook name -> the Registry method that makes its register callback, in calling order.
_HOOKS: tuple[tuple[str, str], ...] = (
    ("agile_register_paradigms", "paradigm_registrar"),
    ("agile_register_algorithms", "algorithm_registrar"),
    ("agile_register_environments", "environment_registrar"),
    ("agile_register_backends", "backend_registrar"),
    ("agile_register_selection_strategies", "selection_registrar"),
)
#: Called last, and by a lazy host only when commands are asked for.
_COMMANDS_HOOK = ("agile_register_commands", "command_registrar")
#: What :meth:`PluginHost.load` may load: the registry's tables of parts named by reference,
#: and the commands.
TABLES = (*LAZY_TABLES, "commands")


@dataclass
class PluginInfo:
    """One plugin as ``agile plugins`` shows it."""

    name: str
    module: str
    distribution: str | None = None
    version: str | None = None
    status: str = "loaded"
    error: str | None = None
    contributes: list[str] = field(default_factory=list)


@dataclass
class PluginHost:
    """The plugin manager, the registry it filled, and what happened to each plugin."""

    manager: pluggy.PluginManager
    registry: Registry
    plugins: list[PluginInfo]
    strict: bool = False
    commands_registered: bool = False

    @property
    def failed(self) -> list[PluginInfo]:
        """The plugins that failed to load, in loading order."""
        return [info for info in self.plugins if info.status == "failed"]

    @property
    def warnings(self) -> list[str]:
        """One line per broken plugin."""
        return [warning(info) for info in self.failed]

    def load(self, tables: Iterable[str] = TABLES) -> list[PluginInfo]:
        """Load now what a lazy host left for later: in ``tables`` (of :data:`TABLES`), every
        part plugins registered by reference, and for ``commands`` the commands hook. A plugin
        with a part that cannot load is dropped whole and becomes a failed row, as if it had
        failed when the host was built. Loading again loads nothing.

        :returns: the plugins that failed now, in loading order.
        """
        wanted = set(tables)
        if not wanted <= set(TABLES):
            raise ValueError(f"no such tables: {sorted(wanted - set(TABLES))}; known: {TABLES}")
        before = {info.name for info in self.failed}
        infos = {info.name: info for info in self.plugins}
        if "commands" in wanted and not self.commands_registered:
            self.commands_registered = True
            _call_hook(self.manager, *_COMMANDS_HOOK, self.registry, infos)
        lazy = [table for table in LAZY_TABLES if table in wanted]
        for plugin, error in self.registry.load(lazy).items():
            self.registry.forget(plugin)
            if self.manager.get_plugin(plugin) is not None:
                self.manager.unregister(name=plugin)
            _failed(infos.setdefault(plugin, PluginInfo(name=plugin, module=plugin)), error)
        _list_contributions(self)
        return [info for info in self.failed if info.name not in before]

    def check(self) -> None:
        """Refuse the registry when loading was strict and a plugin failed.

        :raises BrokenPluginsError: naming every broken plugin.
        """
        if self.strict and self.failed:
            raise BrokenPluginsError(self.failed)


class BrokenPluginsError(PluginError):
    """Plugins failed to load under ``AGILE_STRICT_PLUGINS``: one line for each."""

    exit_code = EXIT_USAGE

    def __init__(self, failed: list[PluginInfo]) -> None:
        count = len(failed)
        super().__init__(
            f"{count} plugin{'' if count == 1 else 's'} failed to load"
            " and AGILE_STRICT_PLUGINS is set",
            "fix them, skip them with --disable-plugin NAME, or unset AGILE_STRICT_PLUGINS"
            " to load the others with a warning",
        )
        self.failed = failed

    def lines(self) -> list[str]:
        broken = [f"  plugin '{info.name}' failed to load: {info.error}" for info in self.failed]
        return [f"{self.message}:", *broken, self.hint or ""]


@dataclass(frozen=True)
class LoadingControls:
    """Which plugins to load, and how to treat a broken one.

    :param only: load only these entry-point names (``AGILE_PLUGINS=a,b``); None loads all.
    :param disabled: never load these (``AGILE_DISABLE_PLUGINS=a,b``, ``--disable-plugin``).
    :param strict: a broken plugin makes the registry an error (:meth:`PluginHost.check`), not a
        warning (``AGILE_STRICT_PLUGINS=1``).
    """

    only: frozenset[str] | None = None
    disabled: frozenset[str] = frozenset()
    strict: bool = False

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, disabled: Iterable[str] = ()
    ) -> LoadingControls:
        environ = os.environ if environ is None else environ
        only = _names(environ.get("AGILE_PLUGINS", ""))
        return cls(
            only=frozenset(only) if only else None,
            disabled=frozenset([*_names(environ.get("AGILE_DISABLE_PLUGINS", "")), *disabled]),
            strict=environ.get("AGILE_STRICT_PLUGINS", "").lower() in ("1", "true", "yes"),
        )


def _names(value: str) -> list[str]:
    return [name.strip() for name in value.split(",") if name.strip()]


def warning(info: PluginInfo) -> str:
    """The line that warns of a broken plugin."""
    return f"plugin '{info.name}' failed to load: {info.error} (see `agile plugins`)"


def build_host(
    *,
    extra_plugins: Iterable[tuple[str, object]] = (),
    discovered: Iterable[EntryPoint] | None = None,
    reserved_commands: Iterable[str] = (),
    controls: LoadingControls | None = None,
    lazy: bool = False,
) -> PluginHost:
    """Load every plugin and collect its registrations.

    First-party plugins (distribution ``agile-cli``) are loaded and asked to register first,
    then the others in entry-point name order, then ``extra_plugins``. A name keeps its first
    registration: a later plugin that registers a taken name is dropped as broken. Loading
    always completes, strict or not; under strict controls :meth:`PluginHost.check` then
    refuses the result.

    :param extra_plugins: ``(name, plugin)`` pairs registered besides the entry points (tests).
    :param discovered: entry points to load instead of those installed (tests).
    :param reserved_commands: command names plugins may not take.
    :param controls: which plugins to load; default: from the environment variables.
    :param lazy: leave the parts plugins name by reference, and their commands, to load when
        asked for (:meth:`PluginHost.load`); a broken one is then found only when something
        needs it. Strict controls load everything, so that every broken plugin is refused.
    """
    controls = controls if controls is not None else LoadingControls.from_environment()
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    found = entry_points(group=ENTRY_POINT_GROUP) if discovered is None else discovered
    identities = _DistributionNames()
    ordered = sorted(found, key=lambda ep: _precedence(ep, identities))
    infos = [_load_entry_point(manager, ep, controls, identities) for ep in ordered]
    for name, plugin in extra_plugins:
        infos.append(_register(manager, name, plugin, getattr(plugin, "__name__", name)))
    registry = Registry(reserved_commands=frozenset(reserved_commands))
    by_name = {info.name: info for info in infos}
    for hook_name, registrar in _HOOKS:
        _call_hook(manager, hook_name, registrar, registry, by_name)
    host = PluginHost(manager, registry, infos, strict=controls.strict)
    if lazy and not controls.strict:
        _list_contributions(host)
    else:
        host.load()
    return host


def _list_contributions(host: PluginHost) -> None:
    for info in host.plugins:
        if info.status == "loaded":
            info.contributes = host.registry.contributions(info.name)


class _DistributionNames:
    """Each entry point's distribution name and version, its metadata read once per
    distribution (every first-party plugin shares one, whose metadata carries the whole
    README: reading it for each of them cost about a tenth of ``agile validate``)."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[str | None, str | None]] = {}

    def __call__(self, ep: EntryPoint) -> tuple[str | None, str | None]:
        dist = getattr(ep, "dist", None)
        if dist is None:
            return None, None
        key = id(dist)
        if key not in self._known:
            metadata = dist.metadata
            self._known[key] = (metadata["Name"], metadata["Version"])
        return self._known[key]


def _precedence(ep: EntryPoint, identities: _DistributionNames) -> tuple[bool, str]:
    """First-party plugins first, then by name: the order that settles a name conflict."""
    return (identities(ep)[0] != BUILTIN_DISTRIBUTION, ep.name)


def _load_entry_point(
    manager: pluggy.PluginManager,
    ep: EntryPoint,
    controls: LoadingControls,
    identities: _DistributionNames,
) -> PluginInfo:
    distribution, version = identities(ep)
    info = PluginInfo(name=ep.name, module=ep.value, distribution=distribution, version=version)
    if ep.name in controls.disabled or (controls.only is not None and ep.name not in controls.only):
        info.status = "disabled"
        info.error = (
            "disabled by --disable-plugin or AGILE_DISABLE_PLUGINS"
            if ep.name in controls.disabled
            else "not named in AGILE_PLUGINS"
        )
        return info
    plugin, error = run_plugin_code(ep.load)
    if error is not None:  # a broken plugin must not take the CLI down with it
        return _failed(info, error)
    loaded = _register(manager, ep.name, plugin, ep.value)
    loaded.distribution, loaded.version = info.distribution, info.version
    return loaded


def _register(manager: pluggy.PluginManager, name: str, plugin: object, module: str) -> PluginInfo:
    info = PluginInfo(name=name, module=module)

    def register() -> None:
        manager.register(plugin, name=name)
        _check_hook_names(manager, plugin)

    _, error = run_plugin_code(register)
    if error is not None:  # pluggy refuses malformed hook implementations
        if manager.get_plugin(name) is plugin:  # not another plugin of that name
            manager.unregister(name=name)
        return _failed(info, error)
    return info


def _check_hook_names(manager: pluggy.PluginManager, plugin: object) -> None:
    """A misspelled hook would otherwise be ignored silently."""
    known = [name for name in dir(hookspecs) if name.startswith("agile_register_")]
    for name in dir(plugin):
        if manager.parse_hookimpl_opts(plugin, name) is not None and name not in known:
            close = suggest(name, known)
            raise PluginError(
                f"implements unknown hook '{name}'"
                + (f" (did you mean '{close}'?)" if close else "")
            )


def _failed(info: PluginInfo, exc: BaseException) -> PluginInfo:
    info.status = "failed"
    info.error = describe(exc)  # one line, whatever the exception said
    info.contributes = []
    return info


def _call_hook(
    manager: pluggy.PluginManager,
    hook_name: str,
    registrar: str,
    registry: Registry,
    infos: dict[str, PluginInfo],
) -> None:
    """Call one hook of every plugin, each with its own ``register`` callback (made by the
    ``registrar`` method of ``registry``)."""
    hook = getattr(manager.hook, hook_name)
    make: Callable[[str], Any] = getattr(registry, registrar)
    for impl in hook.get_hookimpls():  # in registration order
        plugin = impl.plugin_name
        arguments = {"register": make(plugin)}
        call = functools.partial(impl.function, **{name: arguments[name] for name in impl.argnames})
        _, error = run_plugin_code(call)
        if error is not None:  # the plugin's own bug, or a refused registration
            registry.forget(plugin)
            manager.unregister(name=plugin)
            info = infos.setdefault(plugin, PluginInfo(name=plugin, module=plugin))
            _failed(info, error)


def installed_registry() -> Registry:
    """What the installed plugins register, loaded now (under the ``AGILE_*PLUGINS``
    environment controls): the default of library calls given no ``registry``. It is lazy:
    the specs plugins name by reference load when first asked for.

    Nothing is cached: each call loads the plugins again (tens of milliseconds), so a caller
    that needs the registry often builds one with :func:`build_host` and passes it on.

    :raises BrokenPluginsError: when loading is strict and a plugin failed.
    """
    host = build_host(lazy=True)
    host.check()
    return host.registry
