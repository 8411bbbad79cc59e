"""``agile plugins``: what is installed, what it contributes, and what failed."""

from __future__ import annotations

import dataclasses
import json

import click

from agile_cli.host.plugins import PluginHost


def show_plugins(host: PluginHost, *, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(info) for info in host.plugins], indent=2))
        return
    if not host.plugins:
        click.echo("no plugins installed")
        return
    rows = [("PLUGIN", "DISTRIBUTION", "STATUS", "CONTRIBUTES")]
    for info in host.plugins:
        dist = f"{info.distribution} {info.version}" if info.distribution else "-"
        what = info.error if info.status == "failed" else ", ".join(info.contributes) or "-"
        rows.append((info.name, dist, info.status, what or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)]
        click.echo("  ".join([*cells, row[3]]))
