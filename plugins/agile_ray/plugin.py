"""Registers the ray backend (light: Ray and the training code are imported only to train)."""

from __future__ import annotations

from agile_cli import RegisterBackend, hookimpl
from agile_ray.spec import RayOptions


@hookimpl
def agile_register_backends(register: RegisterBackend) -> None:
    register(name="ray", options=RayOptions, implementation="agile_ray.backend:RayBackend")
