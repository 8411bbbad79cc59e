"""Building offline environments: a Gymnasium vector env to evaluate on, with the dataset.

:meth:`OfflineBuilder.build` returns the vector environment :func:`agile_rl.gym_vector_env`
builds, with two attributes added: ``load_dataset``, a callable taking no argument that reads
the whole dataset and returns an :class:`~agile_offline.dataset.OfflineDataset` of numpy arrays
(``obs``, ``actions``, ``rewards``, ``next_obs``, ``terminated``); and ``dataset_nbytes``, the
host memory loading it takes (0 when not known), which the run's memory estimate counts.
Building checks the dataset (an HDF5 file's shapes and dtypes, and that its rows fit in the
memory available; or that a Minari dataset is present) but reads no data; the offline runner
calls ``load_dataset`` when it fills the replay buffer. The HDF5 layout is described in
:mod:`agile_offline.dataset`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym

from agile_cli import EnvironmentBuilder
from agile_offline import dataset
from agile_offline.spec import OfflineEnvSpec
from agile_rl import gym_env_factory, gym_vector_env


class OfflineBuilder(EnvironmentBuilder[OfflineEnvSpec]):
    """Evaluation environments from Gymnasium; transitions from an HDF5 file or Minari."""

    def check(self, spec: OfflineEnvSpec) -> None:
        """Resolve the environment and check the dataset against its spaces."""
        env = gym_env_factory(spec)()
        try:
            _check_dataset(spec, env.observation_space, env.action_space)
        finally:
            env.close()

    def build(self, spec: OfflineEnvSpec, *, seed: int | None = None) -> gym.vector.VectorEnv:
        """The evaluation vector env, with ``load_dataset`` attached (module docstring)."""
        envs = gym_vector_env(spec, seed=seed)
        observation_space, action_space = envs.single_observation_space, envs.single_action_space
        try:
            nbytes = _check_dataset(spec, observation_space, action_space)
        except BaseException:
            envs.close()
            raise

        def load_dataset() -> dataset.OfflineDataset:
            if spec.minari_dataset_id is not None:
                return dataset.read_minari(spec.minari_dataset_id, action_space)
            assert spec.dataset_path is not None
            return dataset.read_hdf5(
                Path(spec.dataset_path), observation_space, action_space, spec.name
            )

        envs.load_dataset, envs.dataset_nbytes = load_dataset, nbytes  # type: ignore[attr-defined]  # see the docstring
        return envs


def _check_dataset(spec: OfflineEnvSpec, observation_space: Any, action_space: Any) -> int:
    """Check the dataset; return the host memory loading it takes (0: not known)."""
    if spec.minari_dataset_id is not None:
        dataset.check_minari(spec.minari_dataset_id)
        return 0
    assert spec.dataset_path is not None
    path = Path(spec.dataset_path)
    return dataset.check_hdf5_file(path, observation_space, action_space, spec.name)
