"""Building Gymnasium environments from a validated :class:`GymEnvSpec`."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from agile_cli import EnvironmentBuilder, EnvironmentNotFoundError
from agile_gymnasium.spec import GymEnvSpec

# Packages that provide environment families, for the install hint.
_EXTRAS = {"Box2D": "gymnasium[box2d]", "box2d": "gymnasium[box2d]", "mujoco": "gymnasium[mujoco]"}


class GymBuilder(EnvironmentBuilder):
    """Resolves and builds single-agent environments."""

    def check(self, spec: GymEnvSpec) -> None:  # type: ignore[override]
        """Resolve the environment and build one copy, without a vector around it."""
        self.make_factory(spec)

    def build(  # type: ignore[override]
        self, spec: GymEnvSpec, *, seed: int | None = None
    ) -> gym.vector.VectorEnv:
        """A vector of ``spec.num_envs`` environments.

        A registered id with a native vector implementation (CartPole, for one) and no
        wrappers uses it: one array program stepping every copy, the fastest option. Otherwise
        copies run in subprocesses, or in this process when ``sync`` is set.
        """
        native = _native_vector(spec)
        if native is not None:
            native.reset(seed=seed)
            return native
        factory = self.make_factory(spec)
        factories = [factory] * spec.num_envs
        if spec.sync or spec.num_envs == 1:
            envs: gym.vector.VectorEnv = gym.vector.SyncVectorEnv(factories)
        else:
            envs = gym.vector.AsyncVectorEnv(factories, context="fork" if _can_fork() else None)
        envs.reset(seed=seed)
        return envs

    @staticmethod
    def make_factory(spec: GymEnvSpec) -> Callable[[], gym.Env]:
        """A picklable-enough callable making one wrapped environment; resolves eagerly."""
        base = Path(spec.path) if spec.path else Path.cwd()
        if spec.entrypoint:
            make_env = _resolve(spec.entrypoint, base, "environment.entrypoint")
        else:
            _check_registered(spec.name)
            make_env = _registered(spec.name)
        wrappers = [_wrapper(item, base) for item in spec.wrappers]
        config = dict(spec.config)

        def factory() -> gym.Env:
            env = _call(make_env, config, spec.name)
            for wrapper, kwargs in wrappers:
                env = wrapper(env, **kwargs)
            return env

        factory().close()  # fail here, in the parent, with a clear message
        return factory


def _native_vector(spec: GymEnvSpec) -> gym.vector.VectorEnv | None:
    if spec.entrypoint or spec.wrappers:
        return None
    _check_registered(spec.name)
    if gym.spec(spec.name).vector_entry_point is None:
        return None
    return gym.make_vec(
        spec.name, num_envs=spec.num_envs, vectorization_mode="vector_entry_point", **spec.config
    )


def _registered(name: str) -> Callable[..., gym.Env]:
    def make(**kwargs: Any) -> gym.Env:
        return gym.make(name, **kwargs)

    return make


def _call(make_env: Callable[..., gym.Env], config: dict[str, Any], name: str) -> gym.Env:
    try:
        return make_env(**config)
    except gym.error.DependencyNotInstalled as exc:
        raise EnvironmentNotFoundError(
            f"environment '{name}' needs a package that is not installed: {exc}",
            _install_hint(str(exc)),
        ) from None
    except ModuleNotFoundError as exc:
        raise EnvironmentNotFoundError(
            f"environment '{name}' needs the module '{exc.name}', which is not installed",
            f"install it with `pip install {_EXTRAS.get(str(exc.name), exc.name)}`",
        ) from None
    except TypeError as exc:
        raise EnvironmentNotFoundError(
            f"environment '{name}' rejected its config: {exc}", "check environment.config"
        ) from None


def _install_hint(message: str) -> str:
    for package, extra in _EXTRAS.items():
        if package.lower() in message.lower():
            return f'install it with `pip install "{extra}"` or `pip install "agile-cli[box2d]"`'
    return "install the package named above"


def _check_registered(name: str) -> None:
    try:
        gym.spec(name)
    except gym.error.NamespaceNotFound as exc:
        raise EnvironmentNotFoundError(str(exc), "install the package that registers it") from None
    except gym.error.Error:
        known = list(gym.registry)
        import difflib

        close = difflib.get_close_matches(name, known, n=1)
        raise EnvironmentNotFoundError(
            f"'{name}' is not a registered Gymnasium environment",
            f"did you mean '{close[0]}'?" if close else "set environment.entrypoint for your own",
        ) from None


def _resolve(reference: str, base: Path, where: str) -> Any:
    """``module:Attr`` or ``file.py:Attr``, the module tried as a file under ``base`` first."""
    module_part, _, attribute = reference.rpartition(":")
    module = _import_file(module_part, base) or _import_module(module_part, where)
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise EnvironmentNotFoundError(
                f"{where}: '{module_part}' has no attribute '{attribute}'", "check the name"
            )
        target = getattr(target, part)
    if not callable(target):
        raise EnvironmentNotFoundError(f"{where}: '{reference}' is not callable")
    return target


def _import_file(module_part: str, base: Path) -> Any:
    candidates = [module_part, module_part.replace(".", "/")]
    for candidate in candidates:
        for path in (base / candidate, base / f"{candidate}.py"):
            if path.is_file() and path.suffix == ".py":
                name = f"agile_user_env_{abs(hash(str(path.resolve())))}"
                if name in sys.modules:
                    return sys.modules[name]
                spec = importlib.util.spec_from_file_location(name, path)
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                spec.loader.exec_module(module)
                return module
    return None


def _import_module(name: str, where: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise EnvironmentNotFoundError(
            f"{where}: cannot import '{name}' (no file {name}.py either)",
            f"install it with `pip install {exc.name}`" if exc.name != name else "check the path",
        ) from None


def _wrapper(item: str | tuple[str, dict[str, Any]], base: Path) -> tuple[Any, dict[str, Any]]:
    target, kwargs = (item, {}) if isinstance(item, str) else item
    if ":" in target:
        return _resolve(target, base, "environment.wrappers"), dict(kwargs)
    module_name, _, attribute = target.rpartition(".")
    return _resolve(f"{module_name}:{attribute}", base, "environment.wrappers"), dict(kwargs)


def _can_fork() -> bool:
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()
