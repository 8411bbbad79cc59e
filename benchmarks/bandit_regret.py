"""Cumulative regret of NeuralUCB and NeuralTS on the example classification table.

Trains each shipped ``configs/training/<algorithm>/classification.yaml`` and sums, for the
best member at the end, the regret (1 - reward) of every step it trained; a uniform-random
policy's expected regret over as many steps is ``steps * (1 - 1/K)``. Run from the
repository root: ``python benchmarks/bandit_regret.py [--steps N]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agile_cli import LocalTrainer, TrainingManifest


def _regret_of(algorithm: str, steps: int, run_dir: Path) -> tuple[float, float, int]:
    path = Path("configs/training") / algorithm / "classification.yaml"
    data: dict[str, Any] = TrainingManifest.get_validated(path, mode="json")
    data["training"]["max_steps"] = steps
    trainer = LocalTrainer.from_manifest(data, device="cpu")
    population, fitnesses = trainer.train(verbose=False, run_dir=run_dir / algorithm)
    best = max(range(len(population)), key=lambda i: fitnesses[i])
    member = population[best]
    # every generation's episodes: the member's own and, for clones, its ancestors' returns
    rewards = sum(member.record.episode_returns)
    arms = int(member.action_space.n)
    return member.record.steps - rewards, member.record.steps * (1 - 1 / arms), arms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=2000, help="Training steps per member.")
    parser.add_argument("--run-dir", type=Path, default=Path("runs/bandit-regret"))
    args = parser.parse_args()
    for algorithm in ("neural_ucb", "neural_ts"):
        regret, random, arms = _regret_of(algorithm, args.steps, args.run_dir)
        print(f"{algorithm}: regret {regret:.0f} over {args.steps} steps ({arms} arms); "
              f"uniform random {random:.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
