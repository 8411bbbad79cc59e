"""Registers the ray backend (light: its options are named by reference, imported when a
command needs them; Ray and the training code are imported only to train)."""

from __future__ import annotations

from agile_cli import RegisterBackend, hookimpl


@hookimpl
def agile_register_backends(register: RegisterBackend) -> None:
    register(
        name="ray",
        options="agile_ray.spec:RayOptions",
        implementation="agile_ray.backend:RayBackend",
    )
