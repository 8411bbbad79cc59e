"""``ArenaTrainer``: the brief's Python way to train on Arena."""

from __future__ import annotations

from typing import Any

from agile_cli import BackendTrainer


class ArenaTrainer(BackendTrainer):
    """Submits the manifest to Arena: ``ArenaTrainer.from_manifest("dqn.yaml").train(
    resource_id="arena-medium", num_nodes=2, project="my-project", experiment_name="x")``.

    :meth:`client` gives the Arena client for everything the CLI does afterwards.
    """

    backend = "arena"

    def client(self, **options: Any) -> Any:
        """The backend's Arena client (``api_key=``, ``base_url=``, timeouts as for train)."""
        entry = self.registry.backends[self.backend]
        return entry.load().client(entry.options.model_validate(options))

    def list_experiments(self, project: str | None = None) -> list[dict[str, Any]]:
        with self.client() as client:
            return client.list_experiments(project)

    def list_checkpoints(self, experiment_name: str) -> list[dict[str, Any]]:
        with self.client() as client:
            return client.list_checkpoints(experiment_name)

    def resume_from_checkpoint(self, experiment_name: str, max_steps: int) -> Any:
        with self.client() as client:
            return client.resume_experiment(experiment_name, max_steps)
