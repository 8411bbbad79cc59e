"""Joining (or starting) a Ray cluster, and sharing its resources out among the members."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agile_cli import TrainingError, UsageError, slot_sizes

#: Seconds to wait for a HOST:PORT to accept a connection before calling it unreachable (Ray's
#: own client retries for minutes).
CONNECT_TIMEOUT = 5.0

#: Where the Ray instance a run starts for itself listens, on Linux: a loopback address (Ray
#: replaces 127.0.0.1 with the machine's network address, and would listen there).
PRIVATE_ADDRESS = "127.0.0.2"


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


@contextlib.contextmanager
def connected(address: str | None) -> Iterator[Any]:
    """Ray, joined to the cluster at ``address`` (or to a Ray instance started on this machine
    for the run, without it), until the block ends."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is None:
        # A private instance: no token from another cluster applies, and a short temporary
        # folder of its own (Ray's socket paths must stay short).
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        if "RAY_TMPDIR" not in os.environ:  # kept afterwards: it holds the workers' logs
            os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="agile-ray-")
    elif address != "auto":
        _reachable(address)
    import ray

    # Workers' own output stays in their log files (the Ray session folder's logs/), out of
    # the progress display; their errors come back as the run's.
    options: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    if address is None:
        options.update(include_dashboard=False, _temp_dir=os.environ["RAY_TMPDIR"])
        if sys.platform.startswith("linux"):  # every 127.x address is loopback there
            options["_node_ip_address"] = PRIVATE_ADDRESS
    try:
        ray.init(address=address, **options)
    except ConnectionError as exc:
        raise TrainingError(
            f"cannot join the Ray cluster at {address}: {exc}",
            "start one with `ray start --head`, or give --address HOST:PORT",
        ) from None
    try:
        yield ray
    finally:
        ray.shutdown()


def cluster_cpus(ray: Any) -> float:
    """The CPUs of the whole cluster (every node's, busy or not)."""
    return float(ray.cluster_resources().get("CPU", 0.0))
