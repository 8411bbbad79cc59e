"""First-party plugin: Multi-Agent Twin Delayed DDPG (MATD3)."""
