"""Showing Arena's progress events and results to a person (tables, or JSON for scripts).

Every text a server sent is shown through :func:`agile_cli.helpers.printable` (JSON output
escapes it already), so an escape sequence in a name or a message cannot clear the screen or
retitle it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import click

from agile_arena.errors import clip
from agile_cli.helpers import printable


def print_event(event: Any) -> None:
    """One line per progress event of a streamed request (submission, validation)."""
    if event.error:
        message = clip(event.message)
        line = printable(f"  [{event.stage or 'arena'}] failed: {message}")
        click.secho(line, fg="red", err=True)
        return
    check = event.detail.get("check") if isinstance(event.detail, Mapping) else None
    label = f"{event.stage or 'arena'}{': ' + str(check) if check else ''}"
    dim = event.level == "secondary-info"
    click.secho(printable(f"  [{label}] {event.message or event.status}"), dim=dim)


def notice(text: str) -> None:
    """A line on stderr about what the client is doing, e.g. waiting before it retries."""
    click.echo(printable(text), err=True)


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, default=str))


def print_table(rows: Iterable[Mapping[str, Any]], columns: list[tuple[str, str]]) -> None:
    """A plain aligned table: ``columns`` is ``[(key, header), ...]``."""
    table = [[printable(header) for _, header in columns]]
    for row in rows:
        table.append([_cell(row.get(key)) for key, _ in columns])
    if len(table) == 1:
        click.echo("(none)")
        return
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    for line in table:
        cells = [cell.ljust(width) for cell, width in zip(line, widths, strict=True)]
        click.echo("  ".join(cells).rstrip())


def print_mapping(value: Mapping[str, Any]) -> None:
    """A two-column Field / Value table."""
    print_table(
        ({"field": key, "value": item} for key, item in value.items()),
        [("field", "FIELD"), ("value", "VALUE")],
    )


def union_columns(rows: list[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Every key of ``rows`` in first-seen order, as table columns."""
    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(row))
    return [(key, key.upper().replace("_", " ")) for key in keys]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, dict | list):
        return json.dumps(value)  # escapes control characters itself
    return printable(str(value))
