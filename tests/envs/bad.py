"""Entry points that return something other than an environment."""

from __future__ import annotations

from typing import Any

from gymnasium.envs.classic_control import CartPoleEnv


def make(**kwargs: Any) -> Any:
    return 42


def make_class(**kwargs: Any) -> Any:
    return CartPoleEnv


def make_pair(**kwargs: Any) -> Any:
    return CartPoleEnv(), {}
