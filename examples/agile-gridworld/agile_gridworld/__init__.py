"""agile-gridworld: grid worlds drawn in text files, as an agile environment builder."""
