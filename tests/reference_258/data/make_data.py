"""Write the small data files the agilerl 2.58 manifests of tests/reference_258 point at.

Run from the repository root (``.venv/bin/python tests/reference_258/data/make_data.py``);
it rewrites, with fixed seeds, the same files every time:

- ``cartpole_random.h5``: 400 CartPole-v1 steps of a uniformly random policy, in the HDF5
  layout both agile's offline builder and agilerl's CQN read (observations, actions, rewards,
  terminals, timeouts);
- ``arms_features.csv`` / ``arms_targets.csv``: 90 contexts of 4 features drawn around three
  centres, and the centre each came from as a text label (one arm per label).
"""

from __future__ import annotations

import csv
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np

HERE = Path(__file__).resolve().parent
OFFLINE_ROWS = 400
BANDIT_ROWS = 90
ARMS = {
    "left": (-2.0, 0.0, 1.0, -1.0),
    "middle": (0.0, 2.0, -1.0, 0.0),
    "right": (2.0, -1.0, 0.0, 1.5),
}


def write_offline_dataset(path: Path) -> None:
    """Record ``OFFLINE_ROWS`` steps of a random CartPole policy, episode after episode."""
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(0)
    columns: dict[str, list[object]] = {
        key: [] for key in ("observations", "actions", "rewards", "terminals", "timeouts")
    }
    observation, _ = env.reset(seed=0)
    for _ in range(OFFLINE_ROWS):
        action = int(rng.integers(2))
        next_observation, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(
            columns, (observation, action, reward, terminated, truncated), strict=True
        ):
            columns[key].append(value)
        observation = next_observation
        if terminated or truncated:
            observation, _ = env.reset()
    env.close()
    dtypes = {"observations": np.float32, "actions": np.int64, "rewards": np.float32}
    with h5py.File(path, "w") as file:
        for key, values in columns.items():
            file.create_dataset(key, data=np.asarray(values, dtype=dtypes.get(key, np.bool_)))


def write_bandit_tables(features_path: Path, targets_path: Path) -> None:
    """Draw ``BANDIT_ROWS`` labelled contexts, a third around each of the ``ARMS`` centres."""
    rng = np.random.default_rng(1)
    labels = [name for name in ARMS for _ in range(BANDIT_ROWS // len(ARMS))]
    rng.shuffle(labels)
    with (
        features_path.open("w", newline="") as features,
        targets_path.open("w", newline="") as targets,
    ):
        feature_rows, target_rows = csv.writer(features), csv.writer(targets)
        feature_rows.writerow(["f1", "f2", "f3", "f4"])
        target_rows.writerow(["arm"])
        for label in labels:
            point = np.asarray(ARMS[label]) + rng.normal(0.0, 0.7, size=4)
            feature_rows.writerow([f"{value:.4f}" for value in point])
            target_rows.writerow([label])


if __name__ == "__main__":
    write_offline_dataset(HERE / "cartpole_random.h5")
    write_bandit_tables(HERE / "arms_features.csv", HERE / "arms_targets.csv")
