"""``agile dataset collect``: roll out a trained agent and write its episodes as an HDF5
dataset for offline training (layout in :mod:`agile_offline.dataset`)."""

from __future__ import annotations

from pathlib import Path

import click


@click.group(name="dataset")
def dataset() -> None:
    """Make datasets for offline algorithms (CQN)."""


@dataset.command(name="collect")
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True))
@click.option("--episodes", type=click.IntRange(min=1), required=True, help="Episodes to play.")
@click.option(
    "--out", type=click.Path(path_type=Path, dir_okay=False), required=True,
    help="HDF5 file to write (overwritten).",
)  # fmt: skip
@click.option("--member", type=int, help="Member index (population checkpoints).")
@click.option(
    "--epsilon", type=click.FloatRange(0, 1), default=0.0, show_default=True,
    help="Chance of a uniformly random action at each step (lower-quality data).",
)  # fmt: skip
@click.option("--seed", default=0, show_default=True, help="Seed of the episodes.")
@click.option("--device", default="auto", show_default=True, help="cpu, cuda or auto.")
@click.pass_context
def collect(ctx: click.Context, run_dir: Path, episodes: int, out: Path, member: int | None,
            epsilon: float, seed: int, device: str) -> None:  # fmt: skip
    """Play EPISODES episodes with a trained agent (RUN_DIR: a run folder's elite, elite.pt, or
    a checkpoint's member) and write them to --out.

    The agent acts greedily, except for a random action with chance --epsilon. Exit status:
    2 for a usage error, 1 when collecting fails.
    """
    from agile_cli.cli import plugin_host
    from agile_offline.collect import collect_episodes, write_hdf5

    registry = plugin_host(ctx).registry
    columns, returns = collect_episodes(
        run_dir, registry, episodes=episodes, member=member, epsilon=epsilon, seed=seed,
        device=device,
    )  # fmt: skip
    write_hdf5(out, columns)
    mean = sum(returns) / len(returns)
    click.echo(
        f"wrote {len(columns['rewards'])} steps of {episodes} episodes to {out}: "
        f"mean return {mean:.2f}"
    )
