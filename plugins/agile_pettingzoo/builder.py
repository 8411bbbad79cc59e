"""Building vectors of PettingZoo parallel environments from a validated
:class:`PettingZooEnvSpec`."""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import logging
import pkgutil
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agile_cli import EnvironmentBuilder, EnvironmentNotFoundError, MultiAgentVectorEnv
from agile_cli.helpers import not_an_environment, resolve_reference, resolve_wrapper
from agile_pettingzoo.mpe import MPEVectorEnv, world_for
from agile_pettingzoo.spec import PettingZooEnvSpec
from agile_pettingzoo.vector import SubprocessParallelVectorEnv, SyncParallelVectorEnv

log = logging.getLogger(__name__)

_MODULE_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_MPE_HINT = 'install it with `pip install mpe2` or, in agile\'s folder, `pip install -e ".[mpe]"`'
# PettingZoo families whose dependencies come with an extra of the same name.
_PETTINGZOO_EXTRAS = ("atari", "butterfly", "classic", "sisl")
_noticed: set[str] = set()


class PettingZooBuilder(EnvironmentBuilder[PettingZooEnvSpec]):
    """Resolves and builds multi-agent environments."""

    def check(self, spec: PettingZooEnvSpec) -> None:
        """Resolve the environment and build one copy."""
        self.make_factory(spec)

    def build(self, spec: PettingZooEnvSpec, *, seed: int | None = None) -> MultiAgentVectorEnv:
        """A vector of ``spec.num_envs`` copies, reset with ``seed``: mpe2's speaker-listener
        and simple spread as arrays (``vectorised``), others in worker processes, or in this
        process when ``sync`` is set or there is one copy."""
        factory = self.make_factory(spec)
        world = _vectorised(spec, factory)
        envs: MultiAgentVectorEnv
        if world is not None:
            template = factory()
            envs = MPEVectorEnv(world, template, spec.num_envs)
            template.close()
        elif spec.sync or spec.num_envs == 1:
            envs = SyncParallelVectorEnv(factory, spec.num_envs)
        else:
            envs = SubprocessParallelVectorEnv(factory, spec.num_envs)
        envs.reset(seed=seed)
        return envs

    @staticmethod
    def make_factory(spec: PettingZooEnvSpec) -> ParallelEnvFactory:
        """The callable making one wrapped copy, checked by building one here: a missing
        package or a bad reference fails in this process, with a clear message."""
        factory = ParallelEnvFactory(
            name=spec.name if spec.entrypoint else _moved(spec.name),
            entrypoint=spec.entrypoint,
            factory=spec.factory,
            path=str(Path(spec.path or Path.cwd()).resolve()),
            config=dict(spec.config),
            wrappers=list(spec.wrappers),
        )
        SyncParallelVectorEnv(factory, 1).close()  # also checks the spaces can be batched
        return factory


@dataclass(frozen=True)
class ParallelEnvFactory:
    """Makes one copy: the spec's fields, resolved on each call, so that it pickles to a
    spawned worker (which imports what it needs itself)."""

    name: str
    entrypoint: str | None
    path: str
    factory: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    wrappers: list[Any] = field(default_factory=list)

    def __call__(self) -> Any:
        base = Path(self.path)
        if self.factory:
            maker = resolve_reference(self.factory, base, "environment.factory")
            make_env = functools.partial(maker, self.entrypoint or self.name)
        elif self.entrypoint:
            make_env = resolve_reference(self.entrypoint, base, "environment.entrypoint")
        else:
            make_env = _parallel_env(self.name)
        wrappers = [resolve_wrapper(item, base) for item in self.wrappers]
        env = _call(make_env, self.config, self.name)
        if not _is_parallel_env(env):
            raise _not_parallel(self, env)
        for wrapper, kwargs in wrappers:
            env = wrapper(env, **kwargs)
        return env


def _vectorised(spec: PettingZooEnvSpec, factory: ParallelEnvFactory) -> Any:
    """The world maker that steps ``spec``'s copies as arrays, or None."""
    if not spec.vectorised or spec.entrypoint or spec.factory or spec.wrappers:
        return None
    return world_for(factory.name, spec.config)


def _moved(name: str) -> str:
    """``pettingzoo.mpe.X`` is ``mpe2.X`` since PettingZoo 1.25; say so once per name."""
    if not name.startswith("pettingzoo.mpe."):
        return name
    moved = "mpe2." + name.removeprefix("pettingzoo.mpe.")
    if name not in _noticed:
        _noticed.add(name)
        log.warning("notice: %s moved to %s (PettingZoo 1.25+); using that", name, moved)
    return moved


def _parallel_env(name: str) -> Any:
    if not _MODULE_PATH.match(name):
        raise EnvironmentNotFoundError(
            f"'{name}' is not a Python module path",
            "name a module exposing parallel_env, e.g. mpe2.simple_spread_v3, or set "
            "environment.entrypoint",
        )
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise _missing(name, exc) from None
    except ImportError as exc:
        raise EnvironmentNotFoundError(f"cannot import '{name}': {exc}") from None
    make_env = getattr(module, "parallel_env", None)
    if not callable(make_env):
        raise EnvironmentNotFoundError(
            f"module '{name}' has no parallel_env",
            "name a PettingZoo environment module, e.g. mpe2.simple_spread_v3, or set "
            "environment.entrypoint to a callable returning a ParallelEnv",
        )
    return make_env


def _call(make_env: Any, config: dict[str, Any], name: str) -> Any:
    try:
        env = make_env(**config)
    except ModuleNotFoundError as exc:
        raise _missing(name, exc) from None
    except TypeError as exc:
        raise EnvironmentNotFoundError(
            f"environment '{name}' rejected its config: {exc}", "check environment.config"
        ) from None
    return env


_PARALLEL_HINT = (
    "return a ParallelEnv (a module's parallel_env(), or pettingzoo.utils.aec_to_parallel(env))"
)


def _is_parallel_env(env: Any) -> bool:
    return (
        not isinstance(env, type)
        and hasattr(env, "possible_agents")
        and not hasattr(env, "agent_selection")  # an AEC environment
    )


def _not_parallel(made: ParallelEnvFactory, env: Any) -> EnvironmentNotFoundError:
    wanted = "a PettingZoo ParallelEnv"
    if made.factory:
        return not_an_environment(made.factory, env, wanted, _PARALLEL_HINT, "factory")
    if made.entrypoint:
        return not_an_environment(made.entrypoint, env, wanted, _PARALLEL_HINT)
    return EnvironmentNotFoundError(
        f"environment '{made.name}' made a {type(env).__name__}, not a PettingZoo ParallelEnv",
        _PARALLEL_HINT,
    )


def _missing(name: str, exc: ModuleNotFoundError) -> EnvironmentNotFoundError:
    """The error for a module that cannot be imported: ``name`` itself, or one it needs."""
    missing = exc.name or name
    package = missing.partition(".")[0]
    if not (name == missing or name.startswith(f"{missing}.")):
        return EnvironmentNotFoundError(
            f"environment '{name}' needs the module '{missing}', which is not installed",
            _dependency_hint(name, package),
        )
    parent = missing.rpartition(".")[0]
    if sys.modules.get(parent) is not None:  # the package is there; the module is not
        return EnvironmentNotFoundError(
            f"'{parent}' has no module '{missing.rpartition('.')[2]}'",
            _close_module(missing, sys.modules[parent]),
        )
    if _is_mpe2_module(name):
        hint = f"did you mean 'mpe2.{name}'?"
    else:
        hint = _MPE_HINT if package == "mpe2" else f"install it with `pip install {package}`"
    return EnvironmentNotFoundError(f"cannot import '{name}'", hint)


def _is_mpe2_module(name: str) -> bool:
    """Whether a bare name such as ``simple_spread_v3`` is one of mpe2's environments."""
    if "." in name:
        return False
    try:
        return importlib.util.find_spec(f"mpe2.{name}") is not None
    except ModuleNotFoundError:
        return False


def _dependency_hint(name: str, package: str) -> str:
    parts = name.split(".")
    if parts[0] == "pettingzoo" and len(parts) > 1 and parts[1] in _PETTINGZOO_EXTRAS:
        return f'install it with `pip install "pettingzoo[{parts[1]}]"`'
    return _MPE_HINT if package == "mpe2" else f"install it with `pip install {package}`"


def _close_module(missing: str, parent: Any) -> str:
    prefix = missing.rpartition(".")[0]
    found = pkgutil.iter_modules(getattr(parent, "__path__", []))
    known = [f"{prefix}.{info.name}" for info in found]
    close = difflib.get_close_matches(missing, known, n=1)
    return f"did you mean '{close[0]}'?" if close else "check the name"
