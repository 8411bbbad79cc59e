"""The plugin host: finds plugins through entry points and collects what they register.

Nothing happens at import. :func:`build_host` is called when the CLI starts (or the first time
library code needs the registry, through :func:`default_host`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import pluggy

from agile_cli import hookspecs
from agile_cli.errors import PluginError
from agile_cli.models.base import suggest
from agile_cli.registry import Registry

ENTRY_POINT_GROUP = "agile"
BUILTIN_DISTRIBUTION = "agile-cli"

# Hook name -> the Registry method that makes its register callback.
_HOOKS: tuple[tuple[str, str], ...] = (
    ("agile_register_algorithms", "algorithm_registrar"),
    ("agile_register_environments", "environment_registrar"),
    ("agile_register_backends", "backend_registrar"),
    ("agile_register_commands", "command_registrar"),
)


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

    @property
    def warnings(self) -> list[str]:
        """One line per broken plugin."""
        return [
            f"plugin '{info.name}' failed to load: {info.error} (see `agile plugins`)"
            for info in self.plugins
            if info.status == "failed"
        ]


@dataclass(frozen=True)
class LoadingControls:
    """Which plugins to load, and how to treat a broken one.

    :param only: load only these entry-point names (``AGILE_PLUGINS=a,b``); None loads all.
    :param disabled: never load these (``AGILE_DISABLE_PLUGINS=a,b``, ``--disable-plugin``).
    :param strict: a broken plugin is an error, not a warning (``AGILE_STRICT_PLUGINS=1``).
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


def build_host(
    *,
    extra_plugins: Iterable[tuple[str, object]] = (),
    discovered: Iterable[EntryPoint] | None = None,
    reserved_commands: Iterable[str] = (),
    controls: LoadingControls | None = None,
) -> PluginHost:
    """Load every plugin and collect its registrations.

    First-party plugins (distribution ``agile-cli``) are loaded and asked to register first,
    then the others in entry-point name order, then ``extra_plugins``. A name keeps its first
    registration: a later plugin that registers a taken name is dropped as broken.

    :param extra_plugins: ``(name, plugin)`` pairs registered besides the entry points (tests).
    :param discovered: entry points to load instead of those installed (tests).
    :param reserved_commands: command names plugins may not take.
    :param controls: which plugins to load; default: from the environment variables.
    :raises PluginError: under ``strict`` controls, for the first broken plugin.
    """
    controls = controls if controls is not None else LoadingControls.from_environment()
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    found = entry_points(group=ENTRY_POINT_GROUP) if discovered is None else discovered
    infos = [_load_entry_point(manager, ep, controls) for ep in sorted(found, key=_precedence)]
    for name, plugin in extra_plugins:
        infos.append(_register(manager, name, plugin, getattr(plugin, "__name__", name), controls))
    registry = Registry(reserved_commands=frozenset(reserved_commands))
    by_name = {info.name: info for info in infos}
    for hook_name, registrar in _HOOKS:
        _call_hook(manager, hook_name, getattr(registry, registrar), registry, by_name, controls)
    for info in infos:
        if info.status == "loaded":
            info.contributes = registry.contributions(info.name)
    return PluginHost(manager, registry, infos)


def _precedence(ep: EntryPoint) -> tuple[bool, str]:
    """First-party plugins first, then by name: the order that settles a name conflict."""
    dist = getattr(ep, "dist", None)
    return (dist is None or dist.metadata["Name"] != BUILTIN_DISTRIBUTION, ep.name)


def _load_entry_point(
    manager: pluggy.PluginManager, ep: EntryPoint, controls: LoadingControls
) -> PluginInfo:
    dist = getattr(ep, "dist", None)
    info = PluginInfo(
        name=ep.name,
        module=ep.value,
        distribution=dist.metadata["Name"] if dist is not None else None,
        version=dist.version if dist is not None else None,
    )
    if ep.name in controls.disabled or (controls.only is not None and ep.name not in controls.only):
        info.status = "disabled"
        info.error = (
            "disabled by --disable-plugin or AGILE_DISABLE_PLUGINS"
            if ep.name in controls.disabled
            else "not named in AGILE_PLUGINS"
        )
        return info
    try:
        plugin = ep.load()
    except Exception as exc:  # a broken plugin must not take the CLI down with it
        return _failed(info, exc, controls)
    loaded = _register(manager, ep.name, plugin, ep.value, controls)
    loaded.distribution, loaded.version = info.distribution, info.version
    return loaded


def _register(
    manager: pluggy.PluginManager,
    name: str,
    plugin: object,
    module: str,
    controls: LoadingControls,
) -> PluginInfo:
    info = PluginInfo(name=name, module=module)
    try:
        manager.register(plugin, name=name)
        _check_hook_names(manager, plugin)
    except Exception as exc:  # pluggy refuses malformed hook implementations
        if manager.is_registered(plugin):
            manager.unregister(plugin)
        return _failed(info, exc, controls)
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


def _failed(info: PluginInfo, exc: BaseException, controls: LoadingControls) -> PluginInfo:
    message = exc.message if isinstance(exc, PluginError) else f"{type(exc).__name__}: {exc}"
    message = " ".join(message.split())  # one line, whatever the exception said
    if controls.strict:
        raise PluginError(
            f"plugin '{info.name}' is broken: {message}",
            "fix it, or unset AGILE_STRICT_PLUGINS to skip it with a warning",
        ) from exc
    info.status = "failed"
    info.error = message
    return info


def _call_hook(
    manager: pluggy.PluginManager,
    hook_name: str,
    registrar: Callable[[str], Any],
    registry: Registry,
    infos: dict[str, PluginInfo],
    controls: LoadingControls,
) -> None:
    hook = getattr(manager.hook, hook_name)
    for impl in hook.get_hookimpls():  # in registration order
        plugin = impl.plugin_name
        arguments = {"register": registrar(plugin)}
        try:
            impl.function(**{name: arguments[name] for name in impl.argnames})
        except Exception as exc:  # the plugin's own bug, or a refused registration
            _forget(registry, plugin)
            manager.unregister(name=plugin)
            info = infos.setdefault(plugin, PluginInfo(name=plugin, module=plugin))
            _failed(info, exc, controls)


def _forget(registry: Registry, plugin: str) -> None:
    for table in (registry.algorithms, registry.environments, registry.backends, registry.commands):
        for name in [name for name, entry in table.items() if entry.plugin == plugin]:
            del table[name]


@functools.cache
def default_host() -> PluginHost:
    """The host built from installed plugins, made on first use and kept for the process."""
    return build_host()


def registry_or_default(registry: Registry | None) -> Registry:
    """``registry``, or the installed plugins' registry when None."""
    return registry if registry is not None else default_host().registry
