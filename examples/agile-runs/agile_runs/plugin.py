"""Registers the ``agile runs`` command. The command is imported inside the hook, which agile
calls only when it lists commands or runs one of a plugin's, not for `agile validate`."""

from __future__ import annotations

from agile_cli import RegisterCommand, hookimpl


@hookimpl
def agile_register_commands(register: RegisterCommand) -> None:
    from agile_runs.command import runs

    register(runs)
