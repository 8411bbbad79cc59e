"""First-party plugin: contextual bandits (a dataset bandit environment, NeuralUCB, NeuralTS)."""
