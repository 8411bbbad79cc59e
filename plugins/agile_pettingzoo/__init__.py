"""First-party plugin: PettingZoo parallel environments for multi-agent algorithms."""
