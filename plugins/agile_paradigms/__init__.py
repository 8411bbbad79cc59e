"""agile's reinforcement-learning paradigms: single- and multi-agent, on- and off-policy."""
