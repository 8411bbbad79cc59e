"""Bodies of the CLI commands, imported when the command runs."""
