"""Rolling out a saved agent into the HDF5 layout of :mod:`agile_offline.dataset`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from agile_cli import TrainingError, UsageError
from agile_offline.dataset import _h5py


def collect_episodes(
    source: Path, registry: Any, *, episodes: int, member: int | None, epsilon: float,
    seed: int, device: str, trust_code: bool = False,
) -> tuple[dict[str, np.ndarray], list[float]]:  # fmt: skip
    """The columns of ``episodes`` episodes played by a saved agent, and their returns."""
    from agile_cli import load_agent
    from agile_cli.helpers import build_environment_from

    agent, manifest = load_agent(
        source, registry, member=member, device=device, trust_code=trust_code
    )
    if manifest.paradigm is not None and manifest.paradigm.multi_agent:
        raise UsageError(
            f"{manifest.algorithm_name} is a multi-agent algorithm",
            "agile dataset collect records single-agent runs",
        )
    fields = type(manifest.environment).model_fields
    updates = {key: value for key, value in (("num_envs", 1), ("sync", True)) if key in fields}
    spec = manifest.environment.model_copy(update=updates)
    env = build_environment_from(spec, manifest, registry, seed)
    # independent streams for the epsilon coin and the random actions, both from the seed
    coin, actions = np.random.SeedSequence(seed).spawn(2)
    rng = np.random.default_rng(coin)
    env.single_action_space.seed(int(actions.generate_state(1)[0]))
    try:
        rows: list[tuple[Any, ...]] = []
        returns = [_episode(agent, env, rng, epsilon, rows, seed + i) for i in range(episodes)]
    finally:
        env.close()
    names = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")
    stacked = (np.stack(column) for column in zip(*rows, strict=True))
    columns = dict(zip(names, stacked, strict=True))
    return columns, returns


def _episode(
    agent: Any, env: Any, rng: np.random.Generator, epsilon: float, rows: list[Any], seed: int
) -> float:
    obs, _ = env.reset(seed=seed)
    agent.reset_state()
    total = 0.0
    while True:
        action = np.asarray(agent.act(obs, explore=False))
        if rng.random() < epsilon:
            action = np.asarray([env.single_action_space.sample()], dtype=action.dtype)
        next_obs, rewards, terminated, truncated, _ = env.step(action)
        rows.append((obs[0], action[0], rewards[0], next_obs[0], terminated[0], truncated[0]))
        total += float(rewards[0])
        if terminated[0] or truncated[0]:
            return total
        obs = next_obs


def write_hdf5(path: Path, columns: dict[str, np.ndarray]) -> None:
    """Write the columns as datasets of one HDF5 file (parents created)."""
    h5py = _h5py()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with h5py.File(path, "w") as file:
            for name, column in columns.items():
                file.create_dataset(name, data=column)
    except OSError as exc:
        raise TrainingError(f"cannot write {path}: {exc}") from None
