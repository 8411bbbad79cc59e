"""agile-runs: the `agile runs` command."""
