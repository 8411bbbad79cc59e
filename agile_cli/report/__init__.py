"""`agile report`: learning curves, lineage and hyperparameter trajectories of run folders."""
