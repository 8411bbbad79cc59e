"""The run-folder readers' commands: ``agile report`` (learning curves, lineage and
hyperparameter trajectories of run folders) and ``agile diff`` (what differs between two)."""
