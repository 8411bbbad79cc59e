"""First-party plugin: Conservative Q-Network (CQN), offline Q-learning from a fixed dataset."""
