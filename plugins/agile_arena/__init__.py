"""First-party plugin: the ``arena`` backend (train on Arena, AgileRL's managed platform)."""
