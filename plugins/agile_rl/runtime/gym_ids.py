"""Gymnasium ids as agile resolves them: the namespaces gymnasium leaves the user to register
(Atari's), and whether an id is known, with what to install or the closest id."""

from __future__ import annotations

import difflib

import gymnasium as gym

from agile_cli import EnvironmentNotFoundError


def is_atari(name: str) -> bool:
    """Whether ``name`` is an Atari game's id (``ALE/...``)."""
    return name.startswith("ALE/")


def register_namespace(name: str) -> None:
    """Register the package behind ``name``'s namespace where gymnasium leaves it to the user:
    gymnasium 1.x knows Atari's ``ALE/`` ids only after ``gym.register_envs(ale_py)``.

    :raises EnvironmentNotFoundError: an ``ALE/`` id without ale-py installed.
    """
    if not is_atari(name) or name in gym.registry:
        return
    try:
        import ale_py
    except ImportError:
        raise EnvironmentNotFoundError(
            f"'{name}' is an Atari game, and ale-py, which provides them, is not installed",
            "install it with `pip install ale-py` (or, in agile's folder, "
            '`pip install -e ".[atari]"`)',
        ) from None
    gym.register_envs(ale_py)


def check_registered(name: str) -> None:
    """Gymnasium knows ``name`` (an ``ALE/`` id once ale-py is registered).

    :raises EnvironmentNotFoundError: naming what to install, or the closest id.
    """
    register_namespace(name)
    try:
        gym.spec(name)
    except gym.error.NamespaceNotFound as exc:
        raise EnvironmentNotFoundError(str(exc), "install the package that registers it") from None
    except gym.error.Error:
        known = list(gym.registry)
        close = difflib.get_close_matches(name, known, n=1)
        raise EnvironmentNotFoundError(
            f"'{name}' is not a registered Gymnasium environment",
            f"did you mean '{close[0]}'?" if close else "set environment.entrypoint for your own",
        ) from None
