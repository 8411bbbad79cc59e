"""``agile evaluate``: score a saved agent, and watch it (``--video`` or ``--render``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from agile_cli.errors import UsageError, printable
from agile_cli.host.registry import Registry

if TYPE_CHECKING:
    from agile_cli.manifest import TrainingManifest
    from agile_cli.member import Member

#: The most characters ``agile evaluate`` shows of one line a paradigm adds under its score.
DETAIL_WIDTH = 400


@dataclass(frozen=True)
class EvaluateOptions:
    """What ``agile evaluate`` was asked for, besides the agent.

    :param video: record the episodes to this .mp4 file.
    :param render: show the episodes in a window.
    """

    episodes: int = 10
    member: int | None = None
    device: str = "auto"
    seed: int | None = None
    top: int | None = None
    trust_code: bool = False
    video: Path | None = None
    render: bool = False


def run_evaluate(registry: Registry, source: Path, options: EvaluateOptions) -> None:
    """Load the agent ``source`` names, play its greedy episodes, and print their returns
    (or the paradigm's own score); with ``video`` or ``render``, one episode at a time in one
    copy of the environment, drawn.

    :raises UsageError: a bad option, or an environment that cannot draw.
    """
    from agile_cli.training import watch
    from agile_cli.training.evaluation import load_agent

    _check(options)
    if options.top is not None:
        _score_top(registry, source, options)
        return
    if options.video is not None:
        watch.check_video_path(options.video)
    if options.render:
        watch.check_display()
    agent, manifest = load_agent(
        source, registry, member=options.member, device=options.device,
        trust_code=options.trust_code,
    )  # fmt: skip
    who = f"{manifest.algorithm_name} member {agent.index} on {manifest.environment.name}"
    if options.video is None and not options.render:
        _score(agent, manifest, registry, options, who, source)
        return
    watched = watch.watch(
        agent, manifest, registry, episodes=options.episodes, seed=options.seed or 0,
        video=options.video,
    )  # fmt: skip
    _print_returns(who, watched.returns)
    for episode, (total, steps) in enumerate(zip(watched.returns, watched.lengths, strict=True)):
        click.echo(f"  episode {episode + 1}: return {total:.2f}, {steps} steps")
    if options.video is not None:
        seconds = watched.frames / watched.fps
        click.echo(
            f"wrote {options.video}: {watched.frames} frames at {watched.fps} fps ({seconds:.1f} s)"
        )


def _check(options: EvaluateOptions) -> None:
    if options.episodes < 1:
        raise click.BadParameter("must be at least 1", param_hint="--episodes")
    if options.top is not None:
        if options.top < 1:
            raise click.BadParameter("must be at least 1", param_hint="--top")
        flags = {"--member": options.member is not None, "--video": options.video is not None,
                 "--render": options.render}  # fmt: skip
        given = [flag for flag, value in flags.items() if value]
        if given:
            raise UsageError(
                f"--top cannot be used with {' or '.join(given)}",
                "--top scores the best members of a population; leave it out to score or "
                "watch one member",
            )
    if options.video is not None and options.render:
        raise UsageError(
            "--video and --render cannot be used together",
            "an environment draws either into frames (--video) or into a window (--render)",
        )


def _score(agent: Member, manifest: TrainingManifest, registry: Registry,
           options: EvaluateOptions, who: str, source: Path) -> None:  # fmt: skip
    from agile_cli.training.evaluation import run_seed, score

    result = score(agent, manifest, registry, options.episodes, options.seed or 0,
                   run_seed=lambda: run_seed(source))  # fmt: skip
    if result.returns is None:  # the paradigm's own score
        family = manifest.family
        how = f"({family})" if result.details else f"over {options.episodes} rounds ({family})"
        click.echo(printable(f"{who}: fitness {result.fitness:.4g} {how}"))
        for line in result.details:  # e.g. a language model's sample answers, cut short
            shown = printable(line)
            click.echo(shown if len(shown) <= DETAIL_WIDTH else shown[: DETAIL_WIDTH - 3] + "...")
        return
    _print_returns(who, result.returns)


def _print_returns(who: str, returns: list[float]) -> None:
    import numpy as np

    click.echo(
        f"{who}: mean return {np.mean(returns):.2f} +/- {np.std(returns):.2f} over "
        f"{len(returns)} episodes"
    )


def _score_top(registry: Registry, source: Path, options: EvaluateOptions) -> None:
    """Score the ``--top`` best members of a population checkpoint again on fresh episodes
    (by default on the seed the run's own end used: the same figures as its summary)."""
    from agile_cli.training import reevaluation
    from agile_cli.training.evaluation import load_population

    members, manifest, counters = load_population(
        source, registry, device=options.device, trust_code=options.trust_code
    )
    ranked = reevaluation.top_members(members, options.top or len(members))
    if not ranked:
        raise UsageError(
            f"no member of {source} has been evaluated yet", "train a generation first"
        )
    seed = options.seed
    if seed is None:
        seed = reevaluation.evaluation_seed(counters["seed"])
    results = reevaluation.reevaluate(ranked, manifest, registry, options.episodes, seed)
    if not results:
        raise UsageError(
            f"{manifest.algorithm_name} scores its members its own way, not by episodes",
            f"score one member with agile evaluate {source} --member N",
        )
    click.echo(printable(
        f"{manifest.algorithm_name} on {manifest.environment.name}: the best {len(results)} of "
        f"{len(members)} members after generation {counters['generation']}, scored again on "
        f"{options.episodes} fresh episodes each (seed {seed})"
    ))  # fmt: skip
    click.echo(
        f"  {'member':>6}  {'training rank':>13}  {'training':>9}  {'score':>9}  95% interval"
    )
    for result in results:
        interval = (
            f"{result.low:.2f} to {result.high:.2f}" if result.low is not None else "(one episode)"
        )
        click.echo(
            f"  {result.member:>6}  {result.training_rank:>13}  {result.training_fitness:>9.2f}  "
            f"{result.score:>9.2f}  {interval}"
        )
    click.echo(f"best: member {results[0].member}")
