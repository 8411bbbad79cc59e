"""Registers the ``agile runs`` command; click is all it needs at import."""

from __future__ import annotations

from agile_cli import RegisterCommand, hookimpl
from agile_runs.command import runs


@hookimpl
def agile_register_commands(register: RegisterCommand) -> None:
    register(runs)
