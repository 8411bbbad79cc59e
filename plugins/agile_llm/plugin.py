"""Registers ``agile llm`` (light: click only; the LLM stack is imported when a command runs)."""

from __future__ import annotations

from agile_cli import RegisterCommand, hookimpl
from agile_llm.command import llm


@hookimpl
def agile_register_commands(register: RegisterCommand) -> None:
    register(llm)
