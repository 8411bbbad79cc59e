"""``agile login``, ``agile logout`` and ``agile arena ...``: follow and manage Arena runs.

Only click is imported here; the client (httpx) is imported when a command runs, so
``agile --help`` stays fast and never touches the network.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from agile_arena.render import (
    notice,
    print_event,
    print_json,
    print_mapping,
    print_table,
    union_columns,
)
from agile_cli.helpers import printable

_OPTIONS = "agile.arena.options"
_SECONDS = click.FloatRange(min=0, min_open=True)


def client_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The connection options every Arena command takes."""
    decorators = [
        click.option("--api-key", help="Arena API key (else ARENA_API_KEY, else `agile login`)."),
        click.option("--base-url", help="Arena API URL (else ARENA_BASE_URL)."),
        click.option(
            "--request-timeout",
            type=_SECONDS,
            default=30.0,
            show_default=True,
            help="Seconds allowed per attempt of a request, until its reply is read whole; "
            "all attempts and waits of one request end within 3 times this.",
        ),
        click.option(
            "--upload-timeout",
            type=_SECONDS,
            default=300.0,
            show_default=True,
            help="Seconds allowed per attempt of an upload or streamed request, until its last "
            "progress line; all attempts and waits end within 3 times this.",
        ),
    ]
    return functools.reduce(lambda f, decorate: decorate(f), reversed(decorators), command)


def _remember(ctx: click.Context, options: dict[str, Any]) -> None:
    ctx.meta[_OPTIONS] = {**ctx.meta.get(_OPTIONS, {}), **options}


def _client(ctx: click.Context) -> Any:
    from agile_arena.client import ArenaClient

    return ArenaClient(**ctx.meta.get(_OPTIONS, {}), notify=notice)


def _call(ctx: click.Context, method: str, *args: Any, **kwargs: Any) -> Any:
    with _client(ctx) as client:
        return getattr(client, method)(*args, **kwargs)


json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


# -- login / logout ----------------------------------------------------------------------------


@click.command()
@click.option("--force", is_flag=True, help="Log in again even with valid credentials.")
@click.option(
    "--timeout",
    type=float,
    default=300.0,
    show_default=True,
    help="Seconds to wait for the browser sign-in, whatever polling interval the server asks for.",
)
@client_options
@click.pass_context
def login(ctx: click.Context, force: bool, timeout: float, **options: Any) -> None:
    """Sign in to Arena (OAuth device flow) and store the tokens in ~/.arena."""
    _remember(ctx, options)
    with _client(ctx) as client:
        client.login(timeout=timeout, force=force, notify=click.echo)
    click.echo("logged in to Arena")


@click.command()
@client_options
@click.pass_context
def logout(ctx: click.Context, **options: Any) -> None:
    """Sign out of Arena and delete the stored tokens."""
    _remember(ctx, options)
    _call(ctx, "logout")
    click.echo("logged out of Arena")


# -- agile arena ---------------------------------------------------------------------------------


@click.group()
@client_options
@click.pass_context
def arena(ctx: click.Context, **options: Any) -> None:
    """Follow and manage runs on Arena, the managed training platform."""
    _remember(ctx, options)


@arena.group()
def experiments() -> None:
    """Experiments (training runs) on Arena."""


@experiments.command("list")
@click.option("--project", help="Project (default: the stored default project).")
@json_option
@click.pass_context
def experiments_list(ctx: click.Context, project: str | None, as_json: bool) -> None:
    """List the experiments of a project."""
    rows = _call(ctx, "list_experiments", project)
    if as_json:
        print_json(rows)
    else:
        print_table(rows, union_columns(rows))


@experiments.command("submit")
@click.argument("manifest", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option(
    "--resource-id",
    default="arena-medium",
    show_default=True,
    help="Resource tier (see `agile arena resources list`).",
)
@click.option(
    "--num-nodes",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Nodes to train on.",
)
@click.option("--project", help="Project (default: the stored default project).")
@click.option("--experiment-name", help="Name of the experiment (default: Arena picks one).")
@click.option(
    "--reward-file",
    type=click.Path(path_type=Path),
    help="Reward module of a reasoning LLM job (default: environment.reward_file_path).",
)
@click.option(
    "--completion",
    help="A completion Arena checks the reward function against (default: the first row's answer).",
)
@click.option("--upload-env", is_flag=True, help="Upload a custom environment first.")
@click.pass_context
def experiments_submit(
    ctx: click.Context,
    manifest: Path,
    reward_file: Path | None,
    completion: str | None,
    **options: Any,
) -> None:
    """Submit MANIFEST to Arena (what `agile train MANIFEST --backend arena` does)."""
    from agile_arena.backend import submit
    from agile_arena.spec import ArenaOptions
    from agile_cli import TrainingManifest

    validated = TrainingManifest.get_validated(manifest)
    for warning in validated.warnings:
        click.echo(f"warning: {warning}", err=True)
    settings = ArenaOptions.model_validate({**ctx.meta.get(_OPTIONS, {}), **options})
    submit(validated, settings, reward_file=reward_file, completion=completion, verbose=True)


@experiments.command("stop")
@click.argument("name")
@click.pass_context
def experiments_stop(ctx: click.Context, name: str) -> None:
    """Stop an experiment."""
    _call(ctx, "stop_experiment", name)
    click.echo(f"stopping experiment '{name}'")


@experiments.command("resume")
@click.argument("name")
@click.option(
    "--max-steps",
    type=click.IntRange(min=1),
    required=True,
    help="New step budget of the resumed experiment.",
)
@click.pass_context
def experiments_resume(ctx: click.Context, name: str, max_steps: int) -> None:
    """Resume a stopped experiment with a new step budget."""
    _call(ctx, "resume_experiment", name, max_steps)
    click.echo(f"resuming experiment '{name}' up to {max_steps:,} steps")


@experiments.command("checkpoints")
@click.argument("name")
@json_option
@click.pass_context
def experiments_checkpoints(ctx: click.Context, name: str, as_json: bool) -> None:
    """List an experiment's checkpoints."""
    rows = _call(ctx, "list_checkpoints", name)
    if as_json:
        print_json(rows)
        return
    columns = [
        ("steps", "STEPS"),
        ("size_mb", "SIZE (MB)"),
        ("evaluation_score", "EVALUATION"),
        ("training_score", "TRAINING"),
    ]
    print_table(rows, columns)


@experiments.command("metrics")
@click.argument("name")
@click.option("--metric", "metrics", multiple=True, help="Only this metric (repeatable).")
@click.option(
    "--output-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Where to save the CSV (default: NAME_metrics.csv).",
)
@click.option(
    "--preview-rows",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Rows to show after downloading (0: none).",
)
@click.option("--project", help="Project (default: the stored default project).")
@click.pass_context
def experiments_metrics(
    ctx: click.Context,
    name: str,
    metrics: tuple[str, ...],
    output_file: Path | None,
    preview_rows: int,
    project: str | None,
) -> None:
    """Download an experiment's metrics as CSV and preview the first rows."""
    with _client(ctx) as client:
        path = client.download_metrics(
            name, output_file, metrics=list(metrics) or None, project=project
        )
    click.echo(f"metrics saved to {path}")
    if preview_rows:
        _preview_csv(path, preview_rows)


def _preview_csv(path: Path, rows: int) -> None:
    import csv

    with path.open(newline="") as stream:
        reader = csv.DictReader(stream)
        records = [record for _, record in zip(range(rows), reader, strict=False)]
        columns = [(field, field.upper()) for field in reader.fieldnames or []]
    click.echo(f"first {len(records)} rows:")
    print_table(records, columns)


@arena.group()
def resources() -> None:
    """Compute tiers you can train on, and what they cost."""


@resources.command("list")
@json_option
@click.pass_context
def resources_list(ctx: click.Context, as_json: bool) -> None:
    """List resource tiers with their credits per node-hour."""
    tiers = list(_call(ctx, "list_resources").get("tiers", {}).values())
    if as_json:
        print_json(tiers)
        return
    for tier in tiers:
        kind = tier.get("gpu_type")
        tier["gpus"] = f"{tier.get('num_gpus', 0)}x {kind}" if kind else "-"
    columns = [
        ("name", "RESOURCE ID"),
        ("gpus", "GPUS"),
        ("num_cpus", "CPUS"),
        ("ram_gb", "RAM (GB)"),
        ("price_per_node_hour", "CREDITS/NODE-HOUR"),
    ]
    print_table(sorted(tiers, key=lambda t: t.get("price_per_node_hour") or 0), columns)


@arena.group()
def projects() -> None:
    """Projects group experiments; one can be your default."""


@projects.command("list")
@json_option
@click.pass_context
def projects_list(ctx: click.Context, as_json: bool) -> None:
    """List your projects."""
    rows = _call(ctx, "list_projects")
    if as_json:
        print_json(rows)
    else:
        print_table(rows, [("name", "NAME"), ("type", "TYPE"), ("description", "DESCRIPTION")])


@projects.command("create")
@click.argument("name")
@click.option("--description", help="What the project is for.")
@click.option("--llm-based", is_flag=True, help="A project for LLM finetuning.")
@click.pass_context
def projects_create(
    ctx: click.Context, name: str, description: str | None, llm_based: bool
) -> None:
    """Create a project."""
    _call(ctx, "create_project", name, description, llm_based)
    click.echo(f"created project '{name}'")


@projects.command("set-default")
@click.argument("name")
@click.pass_context
def projects_set_default(ctx: click.Context, name: str) -> None:
    """Make NAME the project used when --project is not given."""
    _call(ctx, "set_default_project", name)
    click.echo(f"default project: {name}")


@projects.command("get-default")
@click.pass_context
def projects_get_default(ctx: click.Context) -> None:
    """Show the default project (no request is sent)."""
    name = _call(ctx, "get_default_project")
    click.echo(
        printable(name)
        if name
        else "no default project; set one with `agile arena projects set-default NAME`"
    )


@arena.group()
def environments() -> None:
    """Custom environments registered on Arena."""


@environments.command("list")
@click.option("--name", help="Only this environment.")
@click.option("--include-arena", is_flag=True, help="Include Arena's built-in environments.")
@json_option
@click.pass_context
def environments_list(
    ctx: click.Context, name: str | None, include_arena: bool, as_json: bool
) -> None:
    """List environments and their versions."""
    catalogue = _call(ctx, "list_environments", name, include_arena)
    if as_json:
        print_json(catalogue)
        return
    rows = [
        {
            "name": env,
            "version": version,
            "validated": state.get("validated"),
            "profiled": state.get("profiled"),
        }
        for env, versions in catalogue.items()
        for version, state in versions.items()
    ]
    print_table(
        rows,
        [
            ("name", "ENVIRONMENT"),
            ("version", "VERSION"),
            ("validated", "VALIDATED"),
            ("profiled", "PROFILED"),
        ],
    )


@environments.command("validate")
@click.argument("name")
@click.option("--version", help="Version (default: latest).")
@click.option("--do-rollouts", is_flag=True, help="Also run random episodes.")
@click.pass_context
def environments_validate(
    ctx: click.Context, name: str, version: str | None, do_rollouts: bool
) -> None:
    """Validate an environment already on Arena."""
    _call(
        ctx,
        "validate_environment",
        name,
        version=version,
        do_rollouts=do_rollouts,
        on_event=print_event,
    )
    click.echo(f"environment '{name}' is valid")


@environments.command("upload")
@click.argument("name")
@click.option(
    "--source",
    type=click.Path(path_type=Path, exists=True),
    required=True,
    help="A directory, a .py file or a .tar.gz archive.",
)
@click.option("--version", help="Version to create (default: v1).")
@click.option(
    "--env-config",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="Constructor keyword arguments (YAML or JSON).",
)
@click.option(
    "--requirements",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="requirements.txt of the environment.",
)
@click.option("--entrypoint", help="module:Class to build the environment.")
@click.option("--description", help="What the environment is.")
@click.option("--multi-agent", is_flag=True, help="A PettingZoo environment.")
@click.option("--do-rollouts", is_flag=True, help="Also run random episodes.")
@click.pass_context
def environments_upload(ctx: click.Context, name: str, source: Path, **options: Any) -> None:
    """Upload a custom environment and validate it."""
    _call(ctx, "validate_environment", name, source=source, on_event=print_event, **options)
    click.echo(f"environment '{name}' uploaded and validated")


@arena.group()
def user() -> None:
    """Your Arena account."""


@user.command("profile")
@json_option
@click.pass_context
def user_profile(ctx: click.Context, as_json: bool) -> None:
    """Who you are logged in as."""
    profile = _call(ctx, "get_current_user")
    if as_json:
        print_json(profile)
        return
    name = f"{profile.get('first_name', '')} {profile.get('last_name', '')}".strip()
    click.echo(printable(f"user:  {name}".rstrip()))
    click.echo(printable(f"email: {profile.get('email', '-')}"))


@user.command("credits")
@json_option
@click.pass_context
def user_credits(ctx: click.Context, as_json: bool) -> None:
    """Your remaining training credits."""
    credits = _call(ctx, "get_user_credits")
    if as_json:
        print_json(credits)
    elif isinstance(credits, dict):
        print_mapping(credits)
    else:
        click.echo(printable(str(credits)))
