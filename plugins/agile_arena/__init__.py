"""First-party plugin: the ``arena`` backend (train on Arena, AgileRL's managed platform) and
``ArenaTrainer``, the Python way to use it."""

from agile_arena.trainer import ArenaTrainer

__all__ = ["ArenaTrainer"]
