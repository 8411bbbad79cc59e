"""The interface environment builders implement, and the helpers they share to resolve a
user's ``module:Callable`` references (light: nothing here imports an environment library)."""

from __future__ import annotations

import abc
import importlib
import importlib.util
import reprlib
import sys
from pathlib import Path
from typing import Any, Generic, TypeVar

from agile_cli.errors import EnvironmentNotFoundError
from agile_cli.models.algorithm import EnvironmentSpec

#: The environment spec a builder reads (``EnvironmentBuilder[GymEnvSpec]``).
S = TypeVar("S", bound=EnvironmentSpec)


class EnvironmentBuilder(abc.ABC, Generic[S]):
    """Turns a validated environment spec into a vector environment; a subclass names the
    spec it reads (``class GymBuilder(EnvironmentBuilder[GymEnvSpec])``).

    The object :meth:`build` returns follows gymnasium's ``VectorEnv`` API: ``num_envs``,
    ``single_observation_space``, ``single_action_space``, ``reset(seed=)``, ``step(actions)``
    with next-step autoreset, and ``close()``.
    """

    @abc.abstractmethod
    def build(self, spec: S, *, seed: int | None = None) -> Any:
        """A vector of environments as ``spec`` describes, reset with ``seed``."""

    def check(self, spec: S) -> None:
        """Resolve the environment without training (``agile validate --check-env``).

        Raise :class:`~agile_cli.errors.EnvironmentNotFoundError` with an install hint when
        something is missing. The default builds one vector and closes it.
        """
        self.build(spec, seed=0).close()


class MultiAgentVectorEnv(abc.ABC):
    """What a builder for the multi-agent families returns: ``num_envs`` copies of a
    PettingZoo-style parallel environment stepped together, every array batched over copies.

    - ``agents``: every agent that can appear, in a fixed order; ``single_observation_spaces``
      and ``single_action_spaces`` map each to its space in one copy.
    - ``reset(seed=)`` returns ``(observations, infos)``; ``step(actions)`` returns
      ``(observations, rewards, terminated, truncated, infos)``. Each of the first four is a
      dict with every agent: observations ``(num_envs, *shape)``, rewards ``(num_envs,)`` floats,
      terminated / truncated ``(num_envs,)`` bools. ``actions`` maps every agent to an array of
      ``num_envs`` actions.
    - A copy's episode ends when all its agents are done. The next ``step`` then resets that
      copy instead (next-step autoreset): its actions are ignored, and it returns the first
      observations with zero rewards and nothing done.
    - An agent absent from a copy (it left early, or has not appeared) reports terminated,
      zero reward and its last observation (zeros before its first).
    """

    num_envs: int
    agents: list[str]
    single_observation_spaces: dict[str, Any]
    single_action_spaces: dict[str, Any]

    @abc.abstractmethod
    def reset(self, *, seed: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset every copy (copy ``i`` seeded with ``seed + i`` when a seed is given)."""

    @abc.abstractmethod
    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        """One step of every copy."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the copies (and their worker processes)."""


def resolve_reference(reference: str, base: Path, where: str) -> Any:
    """The callable ``reference`` names: ``module:Attr`` or ``file.py:Attr``, the module tried
    as a file under ``base`` first, then imported.

    :param where: the manifest field the reference came from, for error messages.
    :raises EnvironmentNotFoundError: the module, the attribute or the callable is missing.
    """
    module_part, _, attribute = reference.rpartition(":")
    file = reference_file(reference, base)
    module = _import_file(file) if file is not None else _import_module(module_part, where)
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


def not_an_environment(
    reference: str, returned: Any, wanted: str, hint: str, field: str = "entrypoint"
) -> EnvironmentNotFoundError:
    """The error for an ``environment.entrypoint`` (or ``factory``: ``field``) whose callable
    returned something other than an environment.

    :param reference: the entrypoint (or factory) as the manifest gives it.
    :param returned: what calling it returned.
    :param wanted: what it should have returned, e.g. ``a gymnasium.Env``.
    :param hint: how to make one; replaced by a pointed hint for a class or a tuple.
    """
    if isinstance(returned, type):
        what, hint = f"the class {returned.__name__}", "return an instance of it"
    else:
        name = type(returned).__name__
        article = "an" if name[:1].lower() in "aeiou" else "a"
        what = f"{article} {name} ({_short.repr(returned)})"
        if isinstance(returned, tuple):
            hint = "return the environment alone, not a tuple"
    return EnvironmentNotFoundError(
        f"environment.{field}: {reference} returned {what}, not {wanted}", hint
    )


_short = reprlib.Repr()
_short.maxstring = _short.maxother = 40


def resolve_wrapper(
    item: str | tuple[str, dict[str, Any]], base: Path
) -> tuple[Any, dict[str, Any]]:
    """A wrapper and its keyword arguments from one ``environment.wrappers`` entry:
    ``module:Wrapper``, ``package.module.Wrapper`` or ``(target, {kwargs})``."""
    kwargs = {} if isinstance(item, str) else item[1]
    return resolve_reference(wrapper_reference(item), base, "environment.wrappers"), dict(kwargs)


def wrapper_reference(item: str | tuple[str, dict[str, Any]] | list[Any]) -> str:
    """The ``module:Wrapper`` reference one ``environment.wrappers`` entry names."""
    target = item if isinstance(item, str) else str(item[0])
    if ":" not in target:
        module_name, _, attribute = target.rpartition(".")
        target = f"{module_name}:{attribute}"
    return target


def reference_file(reference: str, base: Path) -> Path | None:
    """The Python file :func:`resolve_reference` imports for ``reference`` (``base / module``
    or ``base / module.py``, dots as folders too), or None when it imports an installed module
    by name instead. Imports nothing."""
    module_part = reference.rpartition(":")[0]
    for candidate in (module_part, module_part.replace(".", "/")):
        for path in (base / candidate, base / f"{candidate}.py"):
            if path.is_file() and path.suffix == ".py":
                return path
    return None


def can_fork() -> bool:
    """Whether worker processes can be forked here (not on Windows, nor macOS by default)."""
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()


def _import_file(path: Path) -> Any:
    name = f"agile_user_env_{abs(hash(str(path.resolve())))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _import_module(name: str, where: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise EnvironmentNotFoundError(
            f"{where}: cannot import '{name}' (no file {name}.py either)",
            f"install it with `pip install {exc.name}`" if exc.name != name else "check the path",
        ) from None
