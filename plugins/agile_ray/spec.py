"""Run options of the ray backend: the local backend's, and where and how members run."""

from __future__ import annotations

from pydantic import Field

from agile_cli import LocalRunOptions


class RayOptions(LocalRunOptions):
    """How ``agile train --backend ray`` runs."""

    shaping = ("checkpoint_every", "member_timeout", "asynchronous", "max_staleness",
               "share_experience")  # fmt: skip

    address: str | None = Field(
        None,
        description="Ray cluster to join: auto (the one `ray start` made on this machine) or "
        "HOST:PORT; default: start a Ray instance on this machine for the run.",
    )
    cpus_per_member: float | None = Field(
        None,
        gt=0,
        description="CPUs a worker reserves per member it trains; default: the cluster's CPUs "
        "shared out, at most 1 per member.",
    )
    gpus_per_member: float = Field(0.0, ge=0, description="GPUs a worker reserves per member.")
    members_per_worker: int | None = Field(
        None,
        ge=1,
        description="Members each Ray worker trains, side by side (stacked where they can be); "
        "default: as few as the cluster's CPUs allow.",
    )
    worker_timeout: float = Field(
        120.0,
        gt=0,
        description="Seconds a worker may go without progress before the run says it waits "
        "for it (e.g. for Ray to place it again after its node died).",
    )
    checkpoint_every: int = Field(
        1,
        ge=1,
        description="Generations between the run's checkpoints (and after the last): each "
        "one fetches every member's state from the workers, which otherwise keep them; a "
        "worker that dies between two costs the generations since the last.",
    )
    member_timeout: float | None = Field(
        None,
        gt=0,
        description="Seconds a worker's call (training and scoring its members for a "
        "generation, counted from the call, a restarted worker's start included; checked "
        "about every 1.5 s) may take: past it the worker is restarted and its members train "
        "the generation again, at most 5 times; default: no bound.",
    )
    asynchronous: bool = Field(
        False,
        description="Asynchronous evolution (--async): each worker's members are selected and "
        "mutated as soon as their round ends, against the latest fitnesses of the others, and "
        "train on without waiting for the other workers; default: synchronous generations.",
        json_schema_extra={"flags": ["--async"]},
    )
    max_staleness: int = Field(
        2,
        ge=0,
        description="With --async: a member whose worker has trained more than this many "
        "rounds fewer than the selecting worker takes no part in its selection.",
    )
    share_experience: bool = Field(
        False,
        description="Off-policy algorithms: after each generation, every worker's replay "
        "buffer takes in the rows the other workers' buffers stored in it (moved between "
        "workers by Ray), so members learn from the whole population's experience a "
        "generation late; default: each worker's buffer keeps its own slot's experience.",
    )
