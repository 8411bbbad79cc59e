"""``RayTrainer``: train a manifest on a Ray cluster from Python."""

from __future__ import annotations

from agile_cli import BackendTrainer


class RayTrainer(BackendTrainer):
    """``RayTrainer.from_manifest("dqn.yaml").train(address="auto", run_dir="runs/dqn")``
    returns the :class:`~agile_cli.RunResult` the local backend would; without ``address``
    it starts a Ray instance on this machine for the run. Options are the ray backend's
    (``cpus_per_member=``, ``members_per_worker=``, ``seed=``, ``device=``...)."""

    backend = "ray"
