"""First-party plugin: Rainbow DQN."""
