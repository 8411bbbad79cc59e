"""The options of a run whose evolutionary loop and run folder are on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from agile_cli.models import limits
from agile_cli.models.base import Spec


class LocalRunOptions(Spec):
    """How a run trains and what it writes: the local backend's options, which a backend that
    trains elsewhere but keeps the run folder here (e.g. on a Ray cluster) extends. The one
    shape of run options, from the command line (and ``LocalTrainer.train``) to the loop."""

    #: A backend's own options that shape how its runs train (beside the local backend's,
    #: ``RUN_SHAPING_OPTIONS``): checkpoints record them, and ``--resume`` with that backend
    #: keeps them unless given anew.
    shaping: ClassVar[tuple[str, ...]] = ()

    device: str = Field(
        default="auto", description="cpu, cuda, cuda:N, or auto (CUDA when present)."
    )
    seed: int | None = Field(
        default=None, ge=0, description="Seed of everything random; default mutation.rand_seed."
    )
    run_dir: Path | None = Field(
        default=None, description="Run folder; default runs/<algorithm>-<env>-<time>."
    )
    wb: bool = Field(default=False, description="Log to Weights & Biases (honours WANDB_MODE).")
    tensorboard: bool = Field(
        default=False, description="Write TensorBoard scalars to the run folder."
    )
    checkpoint_steps: int | None = Field(
        default=None, ge=1, description="Keep a population snapshot every N env steps per member."
    )
    overwrite: bool = Field(
        default=False,
        description="Replace the run already in --run-dir (deletes that run's files).",
    )
    trust_code: bool = Field(
        default=False,
        description="With --resume: import the code the run names (environment file, "
        "wrappers, reward file) though your agile did not seal it, or a file it names changed "
        "since.",
    )
    checkpoint_buffer: bool = Field(
        default=False,
        description="Include the replay buffer in checkpoints (exact resume, larger files).",
    )
    threads: int | None = Field(
        default=None,
        ge=1,
        description="torch threads of the training process; default: 1 for evolvable networks "
        "(their operations gain little from more, and lose much when other processes share "
        "the CPUs), torch's own count for language models (at most the CPUs this process may "
        "use). Results depend on it: repeat a run with the same number.",
    )
    elite_top: int = Field(
        default=3,
        ge=0,
        le=limits.POPULATION,
        description="At the end, score this many of the best members again on fresh "
        "evaluation seeds; the best of them becomes the elite (0: the best of the last "
        "generation's evaluation).",
    )
    elite_episodes: int = Field(
        default=30,
        ge=2,
        le=limits.EVALUATION_EPISODES,
        description="Fresh episodes each of those members plays (see --elite-top).",
    )
    compile: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Compile the stacked networks' forward passes with torch.compile (on), "
        "or not (off); auto: where it was measured faster (nowhere yet: on the CPU measured "
        "it won only for large groups, and CUDA is not measured; see docs/performance.md). "
        "Compiled and eager runs may differ in the last bits; a resumed run keeps it.",
    )
    per_member: bool = Field(
        default=False,
        description="Make every member a group of one: members still train side by side, "
        "but none shares a computation with another (LLM: each its own passes of the base), "
        "for debugging.",
    )
