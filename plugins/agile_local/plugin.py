"""Registers the local backend (light: its options are named by reference, imported when a
command needs them; training code is imported only to train)."""

from __future__ import annotations

from agile_cli import RegisterBackend, hookimpl


@hookimpl
def agile_register_backends(register: RegisterBackend) -> None:
    register(
        name="local",
        options="agile_local.spec:LocalOptions",
        implementation="agile_local.backend:LocalBackend",
    )
