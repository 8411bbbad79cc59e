"""First-party plugin: Deep Q-Network (DQN)."""
