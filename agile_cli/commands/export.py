"""``agile export``: a trained agent's greedy policy as a TorchScript or ONNX file."""

from __future__ import annotations

from pathlib import Path

import click

from agile_cli.errors import UsageError, printable
from agile_cli.host.registry import Registry
from agile_cli.training import files
from agile_cli.training.run_folder import RUN_FILES, RunFolder, check_writable


def run_export(
    registry: Registry,
    source: Path,
    fmt: str,
    *,
    member: int | None = None,
    out: Path | None = None,
    force: bool = False,
    trust_code: bool = False,
) -> None:
    """Load the agent ``source`` names (as ``agile evaluate`` does, on the CPU), write its
    greedy policy as ``fmt`` to ``out`` (default: ``elite.<suffix>`` beside the agent), and
    print what was written and how to run it.

    :raises UsageError: the file exists (without ``force``), or the agent cannot be exported.
    """
    from agile_cli import export
    from agile_cli.training.evaluation import load_agent

    path = out or export.default_path(source, fmt)
    if path.is_dir():
        raise UsageError(f"{path} is a folder", "give --out a file name")
    _refuse_run_files(path, source)
    _refuse_link(path)
    check_writable(path, f"--out {path}")
    if path.exists() and not force:
        raise UsageError(f"{path} already exists", "pass --force to overwrite it, or --out")
    agent, manifest = load_agent(
        source, registry, member=member, device="cpu", trust_code=trust_code
    )
    policy = export.exported_policy(agent, manifest.algorithm_name)
    export.write(policy, fmt, path)
    who = f"{manifest.algorithm_name} member {agent.index} on {manifest.environment.name}"
    click.echo(printable(f"wrote {path} ({fmt}): the greedy policy of {who}"))
    for line in export.describe(policy, fmt, path):
        click.echo(line)


def _refuse_run_files(path: Path, source: Path) -> None:
    """Never write an export over the agent it is made from, nor over a run folder's own
    files (its manifest, metrics, elite, checkpoints), ``--force`` or not.

    :raises UsageError: ``path`` is one of them.
    """
    folder = path.parent
    ours = path.name in RUN_FILES and RunFolder(folder).holds_run()
    if folder.name == "checkpoints" and RunFolder(folder.parent).holds_run():
        ours, folder = True, folder.parent
    agent = source / "elite.pt" if source.is_dir() else source
    if ours or path.resolve() == agent.resolve():
        raise UsageError(
            f"--out {path}: that file belongs to the run in {folder}, and the export would "
            "replace it",
            "write the export elsewhere, e.g. --out policy.onnx",
        )


def _refuse_link(path: Path) -> None:
    """Never write an export through a symbolic link (a dangling one included), which could
    carry it anywhere.

    :raises UsageError: ``path`` is a link.
    """
    problem = files.link_problem(path)
    if problem is not None:
        raise UsageError(
            f"--out {problem}: agile writes no export through a link",
            "remove the link, or give --out another path",
        )
