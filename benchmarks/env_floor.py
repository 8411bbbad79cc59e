"""The environment floor: how fast the manifest's population environment steps by itself.

Builds the environment a population of ``--population`` members trains in (the
manifest's builder, ``num_envs`` copies per member, as ``agile train`` builds it) and steps it
with fixed random actions (drawn once, so that drawing them costs nothing), resetting copies
as the vector environment does. Prints env steps per second (each copy's step counts as one,
as ``agile train`` counts them): no training run can step faster, so a run's steps/s divided by
this figure is at least the share of its time the environment takes.

    python benchmarks/env_floor.py configs/training/maddpg/speaker_listener.yaml --population 4 16
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np


def fixed_actions(env: Any, rng: np.random.Generator) -> Any:
    """One random action per copy (a team's: per agent), drawn once."""
    spaces = getattr(env, "single_action_spaces", None)
    if spaces is None:
        env.action_space.seed(int(rng.integers(2**31)))
        return env.action_space.sample()
    actions = {}
    for agent, space in spaces.items():
        space.seed(int(rng.integers(2**31)))
        actions[agent] = np.stack([space.sample() for _ in range(env.num_envs)])
    return actions


def steps_per_second(manifest: Path, population: int, seconds: float) -> tuple[float, int]:
    """Env steps per second of the population environment, and its number of copies."""
    from agile_cli.manifest import TrainingManifest
    from agile_cli.testing import installed_host
    from agile_cli.training.setup import build_environment

    registry = installed_host().registry
    validated = TrainingManifest.get_validated(manifest, registry=registry)
    env = build_environment(validated, registry, seed=0, members=population)
    try:
        env.reset(seed=0)
        actions = fixed_actions(env, np.random.default_rng(0))
        for _ in range(10):  # warm-up
            env.step(actions)
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            env.step(actions)
            calls += 1
        return calls * env.num_envs / (time.perf_counter() - start), env.num_envs
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--population", type=int, nargs="+", default=[4])
    parser.add_argument("--seconds", type=float, default=5.0, help="How long to step each size.")
    args = parser.parse_args()
    print(f"{'pop':>4} {'copies':>7} {'env steps/s':>12}")
    for size in args.population:
        rate, copies = steps_per_second(args.manifest, size, args.seconds)
        print(f"{size:>4} {copies:>7} {rate:>12,.0f}")


if __name__ == "__main__":
    main()
