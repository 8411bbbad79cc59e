"""What a run needs in memory, checked before anything large is allocated.

A paradigm names what its run will hold (:meth:`agile_cli.Paradigm.memory_needs`: networks,
a replay buffer, rollouts), each as a :class:`Need`; the core adds the dataset an environment
builder declared (``dataset_nbytes`` on the environment it returns) and :func:`check` compares
the sum with what is available: on the training device for needs that live there, in host
memory for the rest. A run that cannot fit is refused naming the figure and the field to
change. Nothing here imports torch until a CUDA device is asked about.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agile_cli.errors import UsageError


@dataclass(frozen=True)
class Need:
    """One part of a run's memory.

    :param field: the manifest field that sizes it, where a fix goes.
    :param what: what it is, e.g. ``the replay buffer``.
    :param detail: how the figure comes about.
    :param nbytes: the bytes it needs.
    :param on_device: lives on the training device (else in host memory).
    :param hint: how to make it smaller.
    """

    field: str
    what: str
    detail: str
    nbytes: int
    on_device: bool
    hint: str


@dataclass(frozen=True)
class Estimate:
    """What :func:`check` found: each need, and the memory it was compared with."""

    needs: tuple[Need, ...]
    host_available: int | None
    device_available: int | None

    @property
    def total(self) -> int:
        return sum(need.nbytes for need in self.needs)


def check(needs: Sequence[Need], device: Any) -> Estimate:
    """Compare ``needs`` with the memory available for them, and refuse them if they cannot
    fit.

    :param device: the ``torch.device`` the run trains on (needs ``on_device`` are compared
        with its free memory when it is a CUDA device, with host memory otherwise).
    :raises UsageError: (exit 2) the run needs more memory than is available.
    """
    kept = tuple(need for need in needs if need.nbytes > 0)
    on_cuda = getattr(device, "type", "cpu") == "cuda"
    estimate = Estimate(kept, available_memory(), device_memory(device) if on_cuda else None)
    host = [need for need in kept if not (on_cuda and need.on_device)]
    _refuse_overflow(host, estimate.host_available, "this machine has available")
    if on_cuda:
        placed = [need for need in kept if need.on_device]
        _refuse_overflow(placed, estimate.device_available, f"{device} has free")
    return estimate


def dataset_need(env: Any) -> Need:
    """The host memory of the data an environment builder declared it loaded
    (``dataset_nbytes`` on the environment; none declared: zero)."""
    nbytes = int(getattr(env, "dataset_nbytes", 0) or 0)
    detail = "loaded, as the environment builder declared"
    return Need("environment", "the dataset", detail, nbytes, False, "use a smaller dataset")


def _refuse_overflow(needs: list[Need], available: int | None, place: str) -> None:
    total = sum(need.nbytes for need in needs)
    if available is None or not needs or total <= available:
        return
    biggest = max(needs, key=lambda need: need.nbytes)
    message = f"{biggest.field}: {biggest.what} needs {format_bytes(biggest.nbytes)}"
    message += f" ({biggest.detail})"
    if biggest.nbytes <= available:
        message += f", {format_bytes(total)} with the rest of the run"
    raise UsageError(f"{message}, more than the {format_bytes(available)} {place}", biggest.hint)


# -- memory available ----------------------------------------------------------------------------


def available_memory() -> int | None:
    """Bytes of host memory a new allocation can get: Linux's ``MemAvailable``; elsewhere the
    physical memory; None when neither is known."""
    found = _mem_available(Path("/proc/meminfo"))
    if found is not None:
        return found
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _mem_available(meminfo: Path) -> int | None:
    try:
        text = meminfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == "MemAvailable" and value.split():
            return int(value.split()[0]) * 1024  # kB
    return None


def device_memory(device: Any) -> int | None:
    """Free bytes on a CUDA device; None for other devices."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    free, _total = torch.cuda.mem_get_info(device)
    return int(free)


def format_bytes(count: int) -> str:
    """``372 B``, ``5.2 MiB``, ``37.2 GiB``."""
    if count < 1024:
        return f"{count:,} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:,.1f} {unit}"
