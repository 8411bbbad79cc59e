"""What a run was trained with: versions, machine and command, for ``provenance.json``.

Each start of a run (and each ``--resume``) appends one session to the run folder's
``provenance.json``: the command line, Python, the platform, the CPU count (and how many this
process may use), the device and its name, torch's threads, the versions of agile, torch,
numpy, gymnasium, pettingzoo and pydantic, of the distribution that provides the manifest's
environment, and of every distribution that registers agile plugins. Two runs' files tell
what differed between them beyond their manifests.
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

#: Distributions whose versions every session records (when installed).
PACKAGES = ("agile-cli", "torch", "numpy", "gymnasium", "pettingzoo", "pydantic")
ENTRY_POINT_GROUP = "agile"


def session(environment: str, device: Any, threads: int, seed: int) -> dict[str, Any]:
    """This process's provenance for a run on ``environment`` (the manifest's name)."""
    return {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "seed": seed,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "device": str(device),
        "device_name": device_name(device),
        "torch_threads": threads,
        "packages": {name: _version(name) for name in PACKAGES},
        "environment_package": environment_distribution(environment),
        "plugins": plugin_distributions(),
    }


def device_name(device: Any) -> str:
    """The GPU's name for a CUDA device, else the CPU's model (or the platform's word)."""
    if str(device).startswith("cuda"):
        import torch

        return str(torch.cuda.get_device_name(device))
    return _cpu_model() or platform.processor() or platform.machine()


def environment_distribution(name: str) -> dict[str, str | None] | None:
    """The distribution that provides environment ``name``, with its version: a gymnasium id's
    entry point's package, or the package a dotted name (``mpe2.simple_spread_v3``) starts
    with; None when neither tells."""
    module = _gymnasium_module(name) or (name.split(".")[0] if "." in name else None)
    if not module:
        return None
    top = module.split(".")[0]
    if (version := _version(top)) is not None:  # most import under their own name
        return {"module": top, "distribution": top, "version": version}
    distributions = metadata.packages_distributions().get(top) or [top]  # a scan: ~0.1 s
    return {"module": top, "distribution": distributions[0], "version": _version(distributions[0])}


def plugin_distributions() -> dict[str, str]:
    """Each installed ``agile`` entry point: its distribution and version."""
    found, named = {}, {}  # entry points of one distribution share its object: read it once
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(entry, "dist", None)
        if dist is None:
            found[entry.name] = entry.value
            continue
        if id(dist) not in named:
            named[id(dist)] = f"{dist.metadata['Name']}=={dist.version}"
        found[entry.name] = named[id(dist)]
    return dict(sorted(found.items()))


def _gymnasium_module(name: str) -> str | None:
    try:
        import gymnasium

        entry = gymnasium.spec(name).entry_point
    except Exception:  # not a registered id (or no gymnasium): the name may still tell
        return None
    return entry.split(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", None)


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str | None:
    with_model = Path("/proc/cpuinfo")
    if not with_model.is_file():
        return None
    for line in with_model.read_text(errors="replace").splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return None
