"""First-party plugin: Deep Deterministic Policy Gradient (DDPG)."""
