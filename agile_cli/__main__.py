"""``python -m agile_cli`` runs the CLI."""

from agile_cli.cli import main

if __name__ == "__main__":
    main()
