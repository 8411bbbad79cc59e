"""What an off-policy member learns from gymnasium's autoreset steps: an experiment.

With next-step autoreset, the vector step after an episode ends only resets that
sub-environment: its observation is the episode's final one, its next observation the new
episode's first, its reward 0, and it is not terminal. agile leaves those steps out of the
replay buffer (``skip``). AgileRL 2.58's off-policy loop stores them as ordinary transitions
(``reference``). ``absorbing`` stores them as terminal steps of reward 0 out of the final
observation (an absorbing state worth nothing). The script trains MANIFEST (by default one DQN
member alone on CartPole, 8 environments, 20,000 steps, every default) with each chosen
variant and seed and prints each generation's best greedy fitness::

    .venv/bin/python benchmarks/dqn_autoreset_steps.py --variant reference --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

DEFAULT = {
    "algorithm": {"name": "DQN"},
    "environment": {"name": "CartPole-v1", "num_envs": 8},
    "training": {"max_steps": 20_000, "pop_size": 1},
}


def store_autoreset_steps(variant: str) -> None:
    """Make the off-policy runner store autoreset steps as ``variant`` says (this process)."""
    from agile_rl.training import runners

    store = runners.OffPolicyRunner._store

    def _store(
        self: Any, obs: Any, actions: Any, rewards: np.ndarray, next_obs: Any,
        terminated: np.ndarray, valid: np.ndarray, infos: dict[str, Any],
    ) -> None:  # fmt: skip
        if variant == "reference":
            valid = np.ones_like(valid)
        store(self, obs, actions, rewards, next_obs, terminated, valid, infos)
        if variant == "absorbing" and not valid.all():
            zero, ends = np.zeros_like(rewards), np.ones_like(terminated)
            self.buffer.add(obs, actions, zero, next_obs, ends, mask=~valid)

    runners.OffPolicyRunner._store = _store


def best_per_generation(manifest: Path, seed: int, run_dir: Path) -> list[float]:
    from agile_cli.cli import main

    try:
        main(["train", str(manifest), "--quiet", "--seed", str(seed), "--run-dir", str(run_dir)])
    except SystemExit as exit_:
        if exit_.code:
            raise
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [max(m["fitness"] for m in json.loads(line)["members"]) for line in lines]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, help="default: one DQN member on CartPole")
    parser.add_argument("--variant", choices=("skip", "reference", "absorbing"), default="skip")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    store_autoreset_steps(args.variant)
    with tempfile.TemporaryDirectory() as folder:
        manifest = args.manifest
        if manifest is None:
            manifest = Path(folder) / "dqn.yaml"
            manifest.write_text(yaml.safe_dump(DEFAULT))
        for seed in args.seeds:
            best = best_per_generation(manifest, seed, Path(folder) / f"run-{seed}")
            print(f"{args.variant} seed {seed}: best per generation", [round(b, 1) for b in best])


if __name__ == "__main__":
    main()
