"""Registers the local backend (light: training code is imported only to train)."""

from __future__ import annotations

from agile_cli import RegisterBackend, hookimpl
from agile_local.spec import LocalOptions


@hookimpl
def agile_register_backends(register: RegisterBackend) -> None:
    register(name="local", options=LocalOptions, implementation="agile_local.backend:LocalBackend")
