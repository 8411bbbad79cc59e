"""Evolutionary hyperparameter optimisation: mutation and selection of a population."""
