"""Joining (or starting) a Ray cluster, and sharing its resources out among the members."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import socket
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agile_cli import TrainingError, UsageError
from agile_cli.helpers import interrupt_held, slot_sizes

#: Seconds to wait for a HOST:PORT to accept a connection before calling it unreachable (Ray's
#: own client retries for minutes).
CONNECT_TIMEOUT = 5.0

#: What Ray reads from the environment, once per process when it is imported, for the Ray
#: instance a run starts for itself. Multi-node mode off (on every platform, despite the name):
#: the node's address is the loopback one, not the machine's network address, and Ray's servers
#: then listen there only instead of on every interface. Token authentication: every request
#: needs the token as well, so other users of the machine cannot submit work either.
PRIVATE_SETTINGS = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token"}


@dataclass(frozen=True)
class Plan:
    """How the population is spread over Ray workers.

    :param sizes: members per worker (slot), in population order.
    :param cpus: CPUs each worker reserves.
    :param gpus: GPUs each worker reserves.
    """

    sizes: list[int]
    cpus: float
    gpus: float

    @property
    def threads(self) -> int:
        """Torch threads of a worker: its whole CPUs, at least one."""
        return max(1, math.floor(self.cpus))

    def describe(self) -> str:
        workers = len(self.sizes)
        members = "/".join(str(size) for size in sorted(set(self.sizes), reverse=True))
        noun = "member" if members == "1" else "members"
        gpus = f", {self.gpus:g} GPU" if self.gpus else ""
        return f"{workers} Ray workers of {members} {noun}, {self.cpus:g} CPU{gpus} each"


def plan(
    population: int,
    cluster_cpus: float,
    *,
    cpus_per_member: float | None,
    gpus_per_member: float,
    members_per_worker: int | None,
) -> Plan:
    """Workers, their members and resources for ``population`` members on a cluster of
    ``cluster_cpus`` CPUs. Given ``cpus_per_member``, a worker reserves that many per member;
    by default the cluster's CPUs are shared out, at most one per member, so that every
    worker runs at once."""
    if members_per_worker is None:  # as many workers as whole CPUs, unless told the CPUs
        whole = max(1, math.floor(cluster_cpus))
        members_per_worker = 1 if cpus_per_member is not None else math.ceil(population / whole)
    sizes = slot_sizes(population, math.ceil(population / members_per_worker))
    largest = max(sizes)
    if cpus_per_member is not None:
        cpus = cpus_per_member * largest
    else:  # round down, so that every worker fits at once
        cpus = min(float(largest), max(0.01, math.floor(100 * cluster_cpus / len(sizes)) / 100))
    return Plan(sizes, cpus, gpus_per_member * largest)


def _reachable(address: str) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(
            f"--address {address!r} is not HOST:PORT or auto",
            "e.g. --address 127.0.0.1:6379, as `ray start --head` printed it",
        )
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT):
            pass
    except OSError as exc:
        raise TrainingError(
            f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}",
            "start it with `ray start --head`, or check the address and port it printed",
        ) from None


def _private_instance() -> dict[str, Any]:
    """``ray.init``'s options for a Ray instance of the run's own, once the environment Ray
    reads is set for it (see ``PRIVATE_SETTINGS``)."""
    if "ray" in sys.modules and any(os.environ.get(k) != v for k, v in PRIVATE_SETTINGS.items()):
        raise TrainingError(
            "Ray was imported before the run, without the settings that keep a Ray instance of "
            "the run's own on loopback, with token authentication",
            "import ray after the run starts, or set "
            + " ".join(f"{k}={v}" for k, v in PRIVATE_SETTINGS.items())
            + " before importing it, or give --address",
        )
    os.environ.update(PRIVATE_SETTINGS)
    # Ray loads the token once per process: a later instance keeps it, or the user's.
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    os.environ.pop("RAY_ADDRESS", None)  # Ray would join that cluster instead
    # Ray starts workers at nice 15; the run's own workers are its training, and compete as
    # the local backend's process does (with other work running, nice 15 starved them 20x).
    os.environ.setdefault("RAY_worker_niceness", "0")
    if "RAY_TMPDIR" not in os.environ:  # kept afterwards: it holds the workers' logs
        # A short folder of its own: Ray's socket paths must stay short.
        os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="agile-ray-")
    return {"address": "local", "include_dashboard": False, "_temp_dir": os.environ["RAY_TMPDIR"]}


@contextlib.contextmanager
def connected(address: str | None) -> Iterator[Any]:
    """Ray, joined to the cluster at ``address`` (with Ray's own settings), or without it to a
    Ray instance started on this machine for the run (listening on loopback only, with token
    authentication), until the block ends."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is None:
        options = _private_instance()
    else:
        if address != "auto":
            _reachable(address)
        options = {"address": address}
    import ray

    # Workers' own output stays in their log files (the Ray session folder's logs/), out of
    # the progress display; their errors come back as the run's.
    options.update(logging_level=logging.WARNING, log_to_driver=False)
    try:
        with interrupt_held():
            _start(ray, options, address)
        yield ray
    finally:
        with interrupt_held():
            ray.shutdown()


def _start(ray: Any, options: dict[str, Any], address: str | None) -> None:
    try:
        ray.init(**options)
    except ConnectionError as exc:
        raise TrainingError(
            f"cannot join the Ray cluster at {address}: {exc}",
            "start one with `ray start --head`, or give --address HOST:PORT",
        ) from None


def cluster_cpus(ray: Any) -> float:
    """The CPUs of the whole cluster (every node's, busy or not)."""
    return float(ray.cluster_resources().get("CPU", 0.0))
