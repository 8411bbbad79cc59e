"""First-party plugin: Multi-Agent Deep Deterministic Policy Gradient (MADDPG)."""
