"""Learning with the defaults: untuned manifests (every hyperparameter at its default), each
trained over several seeds, against the goal it must reach within a budget of global env steps.

The manifests are ``benchmarks/defaults/*.yaml``: what a user writes from ``agile schema``
(algorithm name, environment, budget, population 4, an empty mutation and selection section).
For each manifest and seed this runs ``agile train MANIFEST --quiet --seed S`` in a fresh
process and reads the run folder's ``metrics.jsonl``: the best member's fitness at every
generation, the best reached within the goal's budget, the global step at which the goal was
first reached, and the wall time; then the final elite's mean return over ``--elite-episodes``
episodes (``agile evaluate``, seed 1000), steadier than one generation's best fitness, which is
the best of the population over a few episodes. The last line per manifest counts the seeds that
met the goal.

    python benchmarks/defaults_benchmark.py                       # all seven, seeds 1 2 3
    python benchmarks/defaults_benchmark.py --only ddpg td3 --seeds 1 2 3 4 5

Flags after ``--`` go to every ``agile train`` (e.g. ``-- --set algorithm.tau=0.001`` to
measure an old default against the new one).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent / "defaults"


@dataclass(frozen=True)
class Goal:
    """Fitness to reach within ``steps`` global env steps (all members' steps summed)."""

    manifest: str
    fitness: float
    steps: int


GOALS = {
    "dqn": Goal("dqn_cartpole.yaml", 475.0, 100_000),
    "dqn-reference": Goal("dqn_cartpole_reference.yaml", 475.0, 400_000),
    "ddpg": Goal("ddpg_pendulum.yaml", -200.0, 150_000),
    "td3": Goal("td3_pendulum.yaml", -200.0, 150_000),
    "rainbow": Goal("rainbow_cartpole.yaml", 475.0, 400_000),
    "maddpg": Goal("maddpg_speaker_listener.yaml", -26.5, 400_000),
    "sac": Goal("sac_pendulum.yaml", -200.0, 100_000),
}


def _agile() -> str:
    return shutil.which("agile") or sys.exit("agile is not on PATH: pip install -e . first")


def train(manifest: Path, seed: int, run_dir: Path, extra: list[str]) -> float:
    """Train once in a fresh process; return its wall time in seconds."""
    command = [_agile(), "train", str(manifest), "--quiet", "--seed", str(seed),
               "--run-dir", str(run_dir), *extra]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{manifest.name} seed {seed} failed:\n{done.stderr}")
    return time.perf_counter() - start


def elite_return(run_dir: Path, episodes: int) -> float:
    """The final elite's mean return over ``episodes`` evaluation episodes."""
    command = [_agile(), "evaluate", str(run_dir), "--episodes", str(episodes), "--seed", "1000"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    found = re.search(r"mean return (-?[\d.]+)", done.stdout)
    if done.returncode != 0 or found is None:
        sys.exit(f"agile evaluate {run_dir} failed:\n{done.stdout}{done.stderr}")
    return float(found.group(1))


def best_by_generation(run_dir: Path) -> list[tuple[int, float]]:
    """(global steps, best member's fitness) of every generation."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(row["global_steps"], max(m["fitness"] for m in row["members"])) for row in rows]


def report(
    name: str, goal: Goal, seed: int, curve: list[tuple[int, float]], wall: float, elite: str
) -> bool:
    """Print one seed's line (``elite``: the elite's evaluation, or empty); return whether it
    met the goal."""
    within = [fitness for steps, fitness in curve if steps <= goal.steps]
    best = max(within, default=float("-inf"))
    reached = next((steps for steps, fitness in curve if fitness >= goal.fitness), None)
    met = best >= goal.fitness
    when = f"reached at {reached:,}" if reached is not None else "not reached"
    points = "  ".join(f"{steps // 1000}k:{fitness:.1f}" for steps, fitness in curve)
    print(f"{name:8s} seed {seed}: best {best:8.1f} within {goal.steps:,} ({when}); "
          f"{elite}{wall:5.0f} s | {points}")  # fmt: skip
    return met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(GOALS), default=sorted(GOALS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--keep", type=Path, help="keep the run folders here")
    parser.add_argument("--elite-episodes", type=int, default=200,
                        help="episodes to evaluate each final elite on (0: skip)")  # fmt: skip
    parser.add_argument("extra", nargs="*", help="after --: flags for every agile train")
    args = parser.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="agile-defaults-"))
    for name in args.only:
        goal = GOALS[name]
        met = 0
        for seed in args.seeds:
            run_dir = work / f"{name}-seed-{seed}"
            if run_dir.exists():
                shutil.rmtree(run_dir)
            wall = train(HERE / goal.manifest, seed, run_dir, args.extra)
            elite = ""
            if args.elite_episodes > 0:
                value = elite_return(run_dir, args.elite_episodes)
                elite = f"elite {value:.1f} over {args.elite_episodes} episodes; "
            met += report(name, goal, seed, best_by_generation(run_dir), wall, elite)
        print(f"{name:8s} goal {goal.fitness:g} within {goal.steps:,} global steps: "
              f"{met} of {len(args.seeds)} seeds")  # fmt: skip
    if args.keep is None:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
