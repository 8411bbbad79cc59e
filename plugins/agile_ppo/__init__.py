"""First-party plugin: Proximal Policy Optimization (PPO)."""
