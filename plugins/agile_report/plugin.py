"""Registers ``agile report`` and ``agile diff``, the commands that read run folders after
training (light: each command is imported when commands are asked for)."""

from __future__ import annotations

from agile_cli import RegisterCommand, hookimpl


@hookimpl
def agile_register_commands(register: RegisterCommand) -> None:
    from agile_report.commands import diff, report

    register(report)
    register(diff)
