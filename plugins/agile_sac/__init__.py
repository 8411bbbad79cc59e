"""Soft Actor-Critic for agile, batched across the population from the start."""
