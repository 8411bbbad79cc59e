"""Vectors of Gymnasium environments from a validated :class:`~agile_rl.GymnasiumEnvSpec`:
what the ``gymnasium`` and ``offline`` environment builders build."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from agile_cli import EnvironmentNotFoundError
from agile_cli.helpers import can_fork, not_an_environment, resolve_reference, resolve_wrapper
from agile_rl.models.gymnasium import GymnasiumEnvSpec
from agile_rl.runtime.gym_ids import check_registered, is_atari, register_namespace

# Packages that provide environment families, for the install hint.
_EXTRAS = {"Box2D": "gymnasium[box2d]", "box2d": "gymnasium[box2d]", "mujoco": "gymnasium[mujoco]"}


def gym_vector_env(spec: GymnasiumEnvSpec, *, seed: int | None = None) -> gym.vector.VectorEnv:
    """A vector of ``spec.num_envs`` environments, reset with ``seed``.

    A registered id with a native vector implementation (CartPole, for one) and no wrappers
    uses it: one array program stepping every copy, the fastest option; so does an Atari game
    with ``atari`` preprocessing (ale-py's, :mod:`agile_rl.runtime.atari`). Otherwise copies
    run in subprocesses, or in this process when ``sync`` is set. With ``engine: envpool``,
    EnvPool's threads step them (:mod:`agile_rl.runtime.envpool_vector`).

    :raises EnvironmentNotFoundError: when the environment cannot be resolved or made.
    """
    if spec.engine == "envpool":
        from agile_rl.runtime.envpool_vector import envpool_vector_env

        return envpool_vector_env(spec, seed=seed)
    if spec.atari is not None:
        check_registered(spec.name)  # ale-py installed, the game known
        from agile_rl.runtime.atari import atari_vector_env

        return atari_vector_env(spec, seed=seed)
    native = _native_vector(spec)
    if native is not None:
        native.reset(seed=seed)
        return native
    factories = [gym_env_factory(spec)] * spec.num_envs
    if spec.sync or spec.num_envs == 1:
        envs: gym.vector.VectorEnv = gym.vector.SyncVectorEnv(factories)
    else:
        envs = gym.vector.AsyncVectorEnv(factories, context="fork" if can_fork() else None)
    envs.reset(seed=seed)
    return envs


def gym_env_factory(spec: GymnasiumEnvSpec) -> Callable[[], gym.Env]:
    """A picklable-enough callable making one wrapped environment. It resolves eagerly and
    makes (and closes) one environment at once, so that a mistake fails here, in the parent.

    :raises EnvironmentNotFoundError: when the environment cannot be resolved or made.
    """
    base = Path(spec.path) if spec.path else Path.cwd()
    make_env: Callable[..., gym.Env]
    if spec.factory:
        maker = resolve_reference(spec.factory, base, "environment.factory")
        make_env = functools.partial(maker, spec.entrypoint or spec.name)
    elif spec.entrypoint:
        make_env = resolve_reference(spec.entrypoint, base, "environment.entrypoint")
    else:
        check_registered(spec.name)
        make_env = _registered(spec.name)
    wrappers = [resolve_wrapper(item, base) for item in spec.wrappers]
    config = dict(spec.config)

    def factory() -> gym.Env:
        env = _call(make_env, config, spec.name)
        field, made_by = (
            ("factory", spec.factory) if spec.factory else ("entrypoint", spec.entrypoint)
        )
        if made_by and not _is_env(env):
            raise not_an_environment(made_by, env, "a gymnasium.Env", _ENV_HINT, field)
        for wrapper, kwargs in wrappers:
            env = wrapper(env, **kwargs)
        return env

    factory().close()
    return factory


_ENV_HINT = "return an environment, e.g. gymnasium.make(...) or an instance of your Env class"
_ENV_API = ("reset", "step", "observation_space", "action_space")


def _is_env(value: Any) -> bool:
    """A gymnasium.Env, or an object with its API (vector envs accept those too)."""
    return isinstance(value, gym.Env) or (
        not isinstance(value, type) and all(hasattr(value, name) for name in _ENV_API)
    )


def _native_vector(spec: GymnasiumEnvSpec) -> gym.vector.VectorEnv | None:
    if spec.entrypoint or spec.factory or spec.wrappers:
        return None
    check_registered(spec.name)
    # Atari games without preprocessing step in gymnasium's vectors (raw frames, as made).
    if gym.spec(spec.name).vector_entry_point is None or is_atari(spec.name):
        return None
    return gym.make_vec(
        spec.name, num_envs=spec.num_envs, vectorization_mode="vector_entry_point", **spec.config
    )


def _registered(name: str) -> Callable[..., gym.Env]:
    def make(**kwargs: Any) -> gym.Env:
        register_namespace(name)  # again in a spawned worker, whose registry starts bare
        _mujoco_warnings_to_python(name)
        return gym.make(name, **kwargs)

    return make


def _mujoco_warnings_to_python(name: str) -> None:
    """For a MuJoCo task, send MuJoCo's warnings to Python's ``warnings`` (shown once each)
    instead of its default: stderr at every construction and a ``MUJOCO_LOG.TXT`` written into
    the working directory (mujoco 4 warns so about gymnasium's HalfCheetah model)."""
    entry = gym.spec(name).entry_point
    if not (isinstance(entry, str) and entry.startswith("gymnasium.envs.mujoco")):
        return
    try:
        import mujoco
    except ImportError:
        return  # gymnasium's make says how to install it
    mujoco.set_mju_user_warning(_mujoco_warning)


def _mujoco_warning(message: str) -> None:
    warnings.warn(f"MuJoCo: {message.strip()}", RuntimeWarning, stacklevel=1)


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
            return f'install it with `pip install "{extra}"`'
    return "install the package named above"
