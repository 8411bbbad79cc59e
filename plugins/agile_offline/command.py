"""``agile dataset collect``: roll out a trained agent and write its episodes as an HDF5
dataset for offline training (layout in :mod:`agile_offline.dataset`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from agile_cli import UsageError


@click.group(name="dataset")
def dataset() -> None:
    """Make datasets for offline algorithms (CQN)."""


@dataset.command(name="collect")
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True))
@click.option("--episodes", type=click.IntRange(min=1), required=True, help="Episodes to play.")
@click.option(
    "--out", type=click.Path(path_type=Path, dir_okay=False), required=True,
    help="HDF5 file to write (a new file, unless --overwrite).",
)  # fmt: skip
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists.")
@click.option("--member", type=int, help="Member index (population checkpoints).")
@click.option(
    "--epsilon", type=click.FloatRange(0, 1), default=0.0, show_default=True,
    help="Chance of a uniformly random action at each step (lower-quality data).",
)  # fmt: skip
@click.option("--seed", default=0, show_default=True, help="Seed of the episodes.")
@click.option("--device", default="auto", show_default=True, help="cpu, cuda or auto.")
@click.option("--trust-code", is_flag=True, help="Import the code the run names (environment "
              "file, wrappers, reward file) though your agile did not seal it, or a file it "
              "names changed since.")  # fmt: skip
@click.pass_context
def collect(ctx: click.Context, run_dir: Path, episodes: int, out: Path, overwrite: bool,
            member: int | None, epsilon: float, seed: int, device: str,
            trust_code: bool) -> None:  # fmt: skip
    """Play EPISODES episodes with a trained agent (RUN_DIR: a run folder's elite, elite.pt, or
    a checkpoint's member) and write them to --out.

    The agent acts greedily, except for a random action with chance --epsilon. Exit status:
    2 for a usage error, 1 when collecting fails.
    """
    from agile_cli.helpers import plugin_host
    from agile_offline.collect import collect_episodes, write_hdf5

    if out.exists() and not overwrite:
        raise UsageError(f"--out {out} exists", "pass --overwrite to replace it, or name another")
    registry = plugin_host(ctx).registry
    columns, returns = collect_episodes(
        run_dir, registry, episodes=episodes, member=member, epsilon=epsilon, seed=seed,
        device=device, trust_code=trust_code,
    )  # fmt: skip
    _write_new(out, columns, write_hdf5)
    mean = sum(returns) / len(returns)
    click.echo(
        f"wrote {len(columns['rewards'])} steps of {episodes} episodes to {out}: "
        f"mean return {mean:.2f}"
    )


def _write_new(out: Path, columns: Any, write: Callable[[Path, Any], None]) -> None:
    """Write beside ``out`` and move into place: an interrupted write leaves no torn file."""
    temporary = out.with_name(f".{out.name}.tmp")
    try:
        write(temporary, columns)
        os.replace(temporary, out)
    finally:
        temporary.unlink(missing_ok=True)
