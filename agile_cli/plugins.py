"""The plugin host: finds plugins through entry points and collects what they register.

Nothing happens at import. :func:`build_host` is called when the CLI starts (or the first time
library code needs the registry, through :func:`default_host`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import pluggy

from agile_cli import hookspecs
from agile_cli.errors import PluginError
from agile_cli.registry import Registry

ENTRY_POINT_GROUP = "agile"

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
        return [
            f"plugin '{info.name}' failed to load: {info.error} (see `agile plugins`)"
            for info in self.plugins
            if info.status == "failed"
        ]


def build_host(
    *,
    extra_plugins: Iterable[tuple[str, object]] = (),
    discovered: Iterable[EntryPoint] | None = None,
    reserved_commands: Iterable[str] = (),
) -> PluginHost:
    """Load every plugin and collect its registrations.

    :param extra_plugins: ``(name, plugin)`` pairs registered besides the entry points (tests).
    :param discovered: entry points to load instead of those installed (tests).
    :param reserved_commands: command names plugins may not take.
    :raises PluginError: when two plugins register the same name.
    """
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    found = entry_points(group=ENTRY_POINT_GROUP) if discovered is None else discovered
    infos = [_load_entry_point(manager, ep) for ep in found]
    for name, plugin in extra_plugins:
        infos.append(_register(manager, name, plugin, module=getattr(plugin, "__name__", name)))
    registry = Registry(reserved_commands=frozenset(reserved_commands))
    by_name = {info.name: info for info in infos}
    for hook_name, registrar in _HOOKS:
        _call_hook(manager, hook_name, getattr(registry, registrar), registry, by_name)
    for info in infos:
        if info.status == "loaded":
            info.contributes = registry.contributions(info.name)
    return PluginHost(manager, registry, infos)


def _load_entry_point(manager: pluggy.PluginManager, ep: EntryPoint) -> PluginInfo:
    dist = getattr(ep, "dist", None)
    info = PluginInfo(
        name=ep.name,
        module=ep.value,
        distribution=dist.metadata["Name"] if dist is not None else None,
        version=dist.version if dist is not None else None,
    )
    try:
        plugin = ep.load()
    except Exception as exc:  # a broken plugin must not take the CLI down with it
        return _failed(info, exc)
    loaded = _register(manager, ep.name, plugin, module=ep.value)
    loaded.distribution, loaded.version = info.distribution, info.version
    return loaded


def _register(manager: pluggy.PluginManager, name: str, plugin: object, module: str) -> PluginInfo:
    info = PluginInfo(name=name, module=module)
    try:
        manager.register(plugin, name=name)
    except Exception as exc:  # pluggy refuses malformed hook implementations
        return _failed(info, exc)
    return info


def _failed(info: PluginInfo, exc: BaseException) -> PluginInfo:
    info.status = "failed"
    info.error = f"{type(exc).__name__}: {exc}"
    return info


def _call_hook(
    manager: pluggy.PluginManager,
    hook_name: str,
    registrar: Callable[[str], Any],
    registry: Registry,
    infos: dict[str, PluginInfo],
) -> None:
    hook = getattr(manager.hook, hook_name)
    for impl in hook.get_hookimpls():  # in registration order
        plugin = impl.plugin_name
        arguments = {"register": registrar(plugin)}
        try:
            impl.function(**{name: arguments[name] for name in impl.argnames})
        except PluginError:
            raise
        except Exception as exc:  # the plugin's own bug: drop it, keep the others
            _forget(registry, plugin)
            manager.unregister(name=plugin)
            if plugin in infos:
                _failed(infos[plugin], exc)


def _forget(registry: Registry, plugin: str) -> None:
    for table in (registry.algorithms, registry.environments, registry.backends, registry.commands):
        for name in [name for name, entry in table.items() if entry.plugin == plugin]:
            del table[name]


@functools.cache
def default_host() -> PluginHost:
    """The host built from installed plugins, made on first use and kept for the process."""
    return build_host()
