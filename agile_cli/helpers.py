"""Helpers for the authors of backends, environment builders, commands and the like: what
agile's own backends, builders and commands use to run members, find references, read run
folders and report safely. Public and
documented (the plugin guide), apart from the plugin contract in :mod:`agile_cli`.

Importing it is cheap: the names whose modules import torch or numpy (running members, the
CLI's plugin host) load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agile_cli._lazy import load
from agile_cli.environment import can_fork, not_an_environment, resolve_reference, resolve_wrapper
from agile_cli.errors import EXIT_RUNTIME, printable
from agile_cli.host.plugins import installed_registry
from agile_cli.host.registry import Registry
from agile_cli.memory import Estimate
from agile_cli.models.algorithm import check_entrypoint
from agile_cli.models.base import AGILE_ONLY, located_error, reject_both_spellings
from agile_cli.run_files import HINT, Fields, RunFileError, metrics_lines, read_json, read_manifest
from agile_cli.runner import reset_seed
from agile_cli.signals import interrupt_held

_LAZY = {
    "run_local": "agile_cli.training.trainer:run_local",
    "resume_local": "agile_cli.training.trainer:resume_local",
    "build_environment_from": "agile_cli.training.setup:build_environment_from",
    "member_spaces": "agile_cli.training.setup:member_spaces",
    "MemberTrainer": "agile_cli.training.members:MemberTrainer",
    "MemberOutcome": "agile_cli.training.members:MemberOutcome",
    "on_cpu": "agile_cli.training.members:on_cpu",
    "RunnerFactory": "agile_cli.training.members:RunnerFactory",
    "slot_sizes": "agile_cli.training.members:slot_sizes",
    "plugin_host": "agile_cli.cli:plugin_host",
    "last_fitness": "agile_cli.evolution.selection:last_fitness",
    "ordinal": "agile_cli.training.reevaluation:ordinal",
    "network_size": "agile_cli.training.loop:network_size",
    # Looked up at each use, so that a test can stand in for the machine's memory.
    "available_memory": "agile_cli.memory:available_memory",
    "format_bytes": "agile_cli.memory:format_bytes",
}

if TYPE_CHECKING:
    from agile_cli.cli import plugin_host
    from agile_cli.evolution.selection import last_fitness
    from agile_cli.memory import available_memory, format_bytes
    from agile_cli.training.loop import network_size
    from agile_cli.training.members import (
        MemberOutcome,
        MemberTrainer,
        RunnerFactory,
        on_cpu,
        slot_sizes,
    )
    from agile_cli.training.reevaluation import ordinal
    from agile_cli.training.setup import build_environment_from, member_spaces
    from agile_cli.training.trainer import resume_local, run_local

__all__ = [
    "AGILE_ONLY",
    "EXIT_RUNTIME",
    "HINT",
    "Estimate",
    "Fields",
    "MemberOutcome",
    "MemberTrainer",
    "Registry",
    "RunFileError",
    "RunnerFactory",
    "available_memory",
    "build_environment_from",
    "can_fork",
    "check_entrypoint",
    "format_bytes",
    "installed_registry",
    "interrupt_held",
    "last_fitness",
    "located_error",
    "member_spaces",
    "metrics_lines",
    "network_size",
    "not_an_environment",
    "on_cpu",
    "ordinal",
    "plugin_host",
    "printable",
    "read_json",
    "read_manifest",
    "reject_both_spellings",
    "reset_seed",
    "resolve_reference",
    "resolve_wrapper",
    "resume_local",
    "run_local",
    "slot_sizes",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return load(_LAZY[name])
    raise AttributeError(f"module 'agile_cli.helpers' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
