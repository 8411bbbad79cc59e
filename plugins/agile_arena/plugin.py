"""Registers the Arena backend and the ``agile login``, ``agile logout`` and ``agile arena``
commands. Light: httpx and the client are imported only when a command runs."""

from __future__ import annotations

from agile_arena.commands import arena, login, logout
from agile_arena.spec import ArenaOptions, ArenaTraining
from agile_cli import RegisterBackend, RegisterCommand, hookimpl


@hookimpl
def agile_register_backends(register: RegisterBackend) -> None:
    register(
        name="arena",
        options=ArenaOptions,
        implementation="agile_arena.backend:ArenaBackend",
        training=ArenaTraining,
    )


@hookimpl
def agile_register_commands(register: RegisterCommand) -> None:
    register(login)
    register(logout)
    register(arena)
