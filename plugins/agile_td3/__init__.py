"""First-party plugin: Twin Delayed DDPG (TD3)."""
