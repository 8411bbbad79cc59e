"""First-party plugin: the ``local`` backend (train on this machine)."""
