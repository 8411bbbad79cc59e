"""The ``environment`` section for multi-agent (PettingZoo) algorithms."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field

from agile_cli import StarterValue, VectorEnvironmentSpec
from agile_cli.helpers import AGILE_ONLY


class PettingZooEnvSpec(VectorEnvironmentSpec):
    """A vector of PettingZoo parallel environments: a module exposing ``parallel_env``
    (``config`` goes to it), or your own callable returning a ParallelEnv; wrappers are
    PettingZoo parallel-env wrappers. ``sync`` and ``vectorised`` are agile extensions: the
    reference format always steps multi-agent copies in subprocesses."""

    name: str = Field(
        min_length=1,
        description=(
            "Module exposing parallel_env (e.g. mpe2.simple_spread_v3), or a label with entrypoint."
        ),
    )

    vectorised: bool = Field(
        default=True,
        json_schema_extra=AGILE_ONLY,
        description=(
            "Step mpe2's simple_speaker_listener_v4 and simple_spread_v3 as one NumPy "
            "computation over every copy (the same episodes as mpe2's own copies, step for "
            "step); false steps mpe2's copies. Rendering, wrappers, benchmark_data, curriculum "
            "and partial observability always use mpe2's copies; other environments ignore it."
        ),
    )

    starter_values: ClassVar[Mapping[str, StarterValue]] = {
        "name": StarterValue("mpe2.simple_speaker_listener_v4"),
    }
