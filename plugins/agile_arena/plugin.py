"""Registers the Arena backend and the ``agile login``, ``agile logout`` and ``agile arena``
commands. Light: its specs are named by reference (imported when a command needs them), and
the commands, httpx and the client are imported only when the commands are asked for."""

from __future__ import annotations

from agile_cli import RegisterBackend, RegisterCommand, hookimpl


@hookimpl
def agile_register_backends(register: RegisterBackend) -> None:
    register(
        name="arena",
        options="agile_arena.spec:ArenaOptions",
        implementation="agile_arena.backend:ArenaBackend",
        training="agile_arena.spec:ArenaTraining",
    )


@hookimpl
def agile_register_commands(register: RegisterCommand) -> None:
    from agile_arena.commands import arena, login, logout

    register(login)
    register(logout)
    register(arena)
