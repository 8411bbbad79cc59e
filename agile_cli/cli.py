"""The ``agile`` command line: a small click core plus commands contributed by plugins.

Errors raised as :class:`~agile_cli.errors.AgileError` are rendered here, in one place: one line
per problem, exit code 2 for a user's mistake (invalid manifest or usage), 1 at run time. Ctrl-C
(SIGINT) ends every command with one line and exit code 130, whatever it was doing.
"""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path
from typing import Any

import click

from agile_cli import __version__
from agile_cli.errors import (
    EXIT_INTERRUPTED,
    AgileError,
    ManifestError,
    TrainingError,
    printable,
)
from agile_cli.host.plugins import (
    TABLES,
    LoadingControls,
    PluginHost,
    PluginInfo,
    build_host,
    warning,
)

CORE_COMMANDS = (
    "validate", "plugins", "schema", "train", "evaluate", "export", "init", "recipe",
)  # fmt: skip


# Options of every command that loads a saved agent.
member_option = click.option("--member", type=int, help="Member index (population checkpoints).")
trust_code_option = click.option(
    "--trust-code", is_flag=True,
    help="Import the code the run names (environment file, wrappers, reward file) though your "
    "agile did not seal it, or a file it names changed since.",
)  # fmt: skip


class Interrupted(click.ClickException):
    """Ctrl-C on its way out through click: one line (the interruption's own words, else
    "interrupted") and exit status 130, in place of click's ``Aborted!`` and status 1."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, interrupt: KeyboardInterrupt) -> None:
        super().__init__(str(interrupt) or "interrupted")

    def show(self, file: Any = None) -> None:
        if sys.stderr.isatty():
            click.echo(err=True)  # off the line where the terminal echoed ^C
        click.echo(printable(self.message), err=True)


class ReportedError(click.ClickException):
    """An AgileError on its way out through click, printed without a traceback."""

    def __init__(self, error: AgileError) -> None:
        super().__init__(error.message)
        self.error = error
        self.exit_code = error.exit_code  # type: ignore[misc]  # a ClassVar in click's stubs

    def show(self, file: Any = None) -> None:
        lines = self.error.lines()
        if isinstance(self.error, ManifestError):
            lines = [self.error.message, *("  " + line for line in lines)]
        for number, line in enumerate(lines):  # text from files and servers, made harmless
            line = printable(line, keep_newlines=True)
            click.echo(line if number else f"error: {line}", err=True)


#: What to do when a file cannot be written or read, by errno.
_FILE_SYSTEM_HINTS = {
    errno.ENOSPC: "free some space or choose a folder on another disk, then run it again",
    errno.EDQUOT: "free some of your disk quota or choose another folder, then run it again",
    errno.EROFS: "choose a folder on a writable file system (e.g. with --run-dir or --out)",
    errno.EACCES: "choose a folder you may write to, or change its permissions",
    errno.EPERM: "choose a folder you may write to, or change its permissions",
}


def file_system_error(error: OSError) -> TrainingError | None:
    """A full disk, a read-only file system or a denied permission as one sentence (None for
    other errors, which are bugs to show whole)."""
    hint = _FILE_SYSTEM_HINTS.get(error.errno or 0)
    if hint is None:
        return None
    where = f"{printable(str(error.filename))}: " if error.filename else ""
    return TrainingError(f"{where}{error.strerror or 'cannot be written'}", hint)


_INTERRUPTED_LOADING = "interrupted while plugins were loading; nothing was written"


def loaded_host(ctx: click.Context) -> PluginHost:
    """The plugin host of this invocation, built on first use (tests pass one as ``obj``).

    It is lazy: what plugins name by reference (their specs) loads when a command first asks
    for it, and their commands when commands are listed or one of them is run
    (:func:`loaded_parts` loads the rest). It is returned even when strict loading refuses it:
    help and ``agile plugins`` use it. Broken plugins are warned about here, once, unless
    loading is strict (the strict error, or ``--help``, lists them instead).
    """
    root = ctx.find_root()
    if isinstance(root.obj, PluginHost):
        return root.obj
    host = root.meta.get("agile.host")
    if host is None:
        disabled = root.params.get("disable_plugin") or ()
        controls = LoadingControls.from_environment(disabled=disabled)
        try:
            host = build_host(reserved_commands=CORE_COMMANDS, controls=controls, lazy=True)
        except KeyboardInterrupt:
            raise KeyboardInterrupt(_INTERRUPTED_LOADING) from None
        root.meta["agile.host"] = host
        if not host.strict:
            _warn(host.failed)
    return host


def loaded_parts(ctx: click.Context, tables: tuple[str, ...] = TABLES) -> PluginHost:
    """The plugin host, with everything plugins registered in ``tables`` loaded (default: all
    of it, for ``agile plugins`` and ``agile schema``); a plugin found broken now is warned
    about, as at start-up, and dropped."""
    host = loaded_host(ctx)
    try:
        failed = host.load(tables)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(_INTERRUPTED_LOADING) from None
    if not host.strict:
        _warn(failed)
    return host


def plugin_host(ctx: click.Context) -> PluginHost:
    """The plugin host, for a command that uses its registry.

    :raises ReportedError: (exit 2) under ``AGILE_STRICT_PLUGINS`` when a plugin failed,
        naming every broken plugin.
    """
    host = loaded_host(ctx)
    try:
        host.check()
    except AgileError as error:
        raise ReportedError(error) from None
    return host


def _warn(failed: list[PluginInfo]) -> None:
    for info in failed:
        click.echo(f"warning: {printable(warning(info), keep_newlines=True)}", err=True)


class AgileGroup(click.Group):
    """The root group: core commands, then those plugins registered."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        host = loaded_parts(ctx, ("commands",))
        if host.strict:  # help still works under strict loading, and names every failure
            _warn(host.failed)
        return [*super().list_commands(ctx), *sorted(host.registry.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None and cmd_name == "train":
            from agile_cli.commands.train import with_backend_options

            # its options are those of every backend
            return with_backend_options(command, loaded_parts(ctx, ("backends",)).registry)
        if command is not None:
            return command
        entry = loaded_parts(ctx, ("commands",)).registry.commands.get(cmd_name)
        return entry.command if entry is not None else None

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name is not None and name not in CORE_COMMANDS and not ctx.resilient_parsing:
            plugin_host(ctx)  # a plugin's command runs only on a registry strict loading accepts
        return name, command, rest

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:  # --help lists plugins' commands here, loading them
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt as interrupt:
            raise Interrupted(interrupt) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as interrupt:
            raise Interrupted(interrupt) from None
        except AgileError as error:
            raise ReportedError(error) from None
        except OSError as error:  # the machine's situation, where no command foresaw it
            situation = file_system_error(error)
            if situation is None:
                raise
            raise ReportedError(situation) from None


@click.group(cls=AgileGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="agile")
@click.option(
    "--disable-plugin",
    multiple=True,
    metavar="NAME",
    help="Do not load this plugin (repeatable; also AGILE_DISABLE_PLUGINS=a,b).",
)
def cli(disable_plugin: tuple[str, ...]) -> None:
    """Train populations of RL agents with evolutionary hyperparameter optimisation.

    Describe a run in a YAML or JSON manifest, check it with `agile validate`, and train it
    with `agile train`. Shell completion: eval "$(_AGILE_COMPLETE=bash_source agile)".

    Plugins: AGILE_PLUGINS=a,b loads only those, AGILE_DISABLE_PLUGINS=a,b skips those, and
    AGILE_STRICT_PLUGINS=1 makes a broken plugin an error (exit 2) instead of a warning for
    the commands that use plugins; --help and `agile plugins` still list every failure.
    """


SET_HELP = (
    "Change a manifest value before validation (repeatable; VALUE is YAML, a dotted PATH "
    "goes into sections and a number into a list), e.g. --set training.pop_size=8 --set "
    "algorithm.lr=3e-4 --set 'network.encoder_config.hidden_size=[64, 64]'."
)


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the resolved manifest(s) as JSON.")
@click.option(
    "--check-env",
    is_flag=True,
    help="Also resolve each environment (imports its package) and build one member of the "
    "algorithm on it, on the CPU, so that spaces it cannot handle are reported.",
)
@click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE", help=SET_HELP)
@click.option(
    "--reference",
    is_flag=True,
    help="Print the resolved manifest(s) as JSON in the form agilerl 2.58 reads and writes, "
    "noting on stderr what that form cannot carry.",
)
@click.pass_context
def validate(ctx: click.Context, files: tuple[Path, ...], as_json: bool, check_env: bool,
             overrides: tuple[str, ...], reference: bool) -> None:  # fmt: skip
    """Check manifests and report every problem with its field path.

    Exit status: 0 when every file is valid, 2 when any is invalid or unreadable.
    """
    from agile_cli.commands.validate import run_validate

    ctx.exit(run_validate(plugin_host(ctx), files, as_json=as_json, check_env=check_env,
                          overrides=overrides, reference=reference))  # fmt: skip


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def plugins(ctx: click.Context, as_json: bool) -> None:
    """List plugins: distribution, version, contributions, and failures.

    Exit status: 0, or 2 after the list when AGILE_STRICT_PLUGINS is set and a plugin failed.
    """
    from agile_cli.commands.plugins import show_plugins

    host = loaded_parts(ctx)  # every spec, so that a broken one shows as a failed row
    show_plugins(host, as_json=as_json)
    host.check()


@cli.command()
@click.option("--algorithm", "algorithm", metavar="NAME", help="Only this algorithm.")
@click.option("--indent", default=2, show_default=True, help="JSON indentation.")
@click.pass_context
def schema(ctx: click.Context, algorithm: str | None, indent: int) -> None:
    """Print the JSON Schema of the manifest, for editors and the YAML language server."""
    from agile_cli.schema import manifest_schema

    plugin_host(ctx)  # refused under strict loading when a plugin failed
    document = manifest_schema(loaded_parts(ctx).registry, algorithm=algorithm)
    click.echo(json.dumps(document, indent=indent))


@cli.command()
@click.argument("algorithm", required=False)
@click.argument("environment", required=False)
@click.option(
    "--out", type=click.Path(path_type=Path, dir_okay=False), help="Write here, not to stdout."
)
@click.option("--force", is_flag=True, help="Overwrite the --out file if it exists.")
@click.pass_context
def init(ctx: click.Context, algorithm: str | None, environment: str | None, out: Path | None,
         force: bool) -> None:  # fmt: skip
    """Write a commented starter manifest for ALGORITHM (on ENVIRONMENT, default: one its
    family suits); without ALGORITHM, list the registered algorithms.

    Every section is written from the registered specs: each field at its default with its
    description, and the algorithm's mutable hyperparameters as mutation.rl_hp_selection
    candidates. The manifest validates as written (notes on stderr say when it cannot).
    """
    from agile_cli.commands.init import run_init

    registry = plugin_host(ctx).registry
    ctx.exit(run_init(registry, algorithm, environment, out=out, force=force))


@cli.command()
@click.argument("manifest", required=False, type=click.Path(path_type=Path))
@click.option("--backend", default="local", show_default=True, help="Where to train.")
@click.option(
    "--resume", type=click.Path(path_type=Path, file_okay=False), help="Continue a run folder."
)
@click.option("--verbose/--quiet", default=True, help="Live progress, or plain log lines.")
@click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE",
              help=SET_HELP + " Recorded in the run folder's command.txt and manifest.yaml; "
              "not with --resume.")  # fmt: skip
@click.pass_context
def train(ctx: click.Context, /, manifest: Path | None, backend: str, resume: Path | None,
          verbose: bool, overrides: tuple[str, ...], **flags: Any) -> None:  # fmt: skip
    """Train the population a MANIFEST describes (or --resume a run folder).

    The other options belong to the backends (in brackets); each backend accepts only its
    own. Locally, Ctrl-C saves a checkpoint and exits with status 130; continue with
    --resume RUN_DIR.
    """
    from agile_cli.commands.train import run_train

    status = run_train(
        plugin_host(ctx), manifest, backend_name=backend, resume=resume, flags=flags,
        verbose=verbose, overrides=overrides,
    )  # fmt: skip
    ctx.exit(status)


@cli.command()
@click.argument("source", type=click.Path(path_type=Path, exists=True))
@click.option("--episodes", default=10, show_default=True, help="Episodes to play.")
@member_option
@click.option("--device", default="auto", show_default=True, help="cpu, cuda or auto.")
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed of the evaluation episodes (default 0; with --top, the fresh seed the "
    "run's end used).",
)
@click.option(
    "--top",
    type=int,
    default=None,
    metavar="K",
    help="Score the K best members of a run folder's population (or a checkpoint's) "
    "again on fresh episodes, with a 95% interval each.",
)
@click.option("--video", type=click.Path(path_type=Path, dir_okay=False),
              help="Record the episodes, one after another, to this .mp4 file.")  # fmt: skip
@click.option("--render", is_flag=True, help="Show the episodes in a window.")
@trust_code_option
@click.pass_context
def evaluate(ctx: click.Context, source: Path, episodes: int, member: int | None, device: str,
             seed: int | None, top: int | None, video: Path | None, render: bool,
             trust_code: bool) -> None:  # fmt: skip
    """Score a trained agent: a run folder's elite, elite.pt, or a checkpoint's member.

    With --video or --render, the episodes are played one at a time in one copy of the
    environment (episode i reset with seed SEED + i), drawn by it.
    """
    from agile_cli.commands.evaluate import EvaluateOptions, run_evaluate

    options = EvaluateOptions(
        episodes=episodes, member=member, device=device, seed=seed, top=top,
        trust_code=trust_code, video=video, render=render,
    )  # fmt: skip
    run_evaluate(plugin_host(ctx).registry, source, options)


@cli.command()
@click.argument("source", type=click.Path(path_type=Path, exists=True))
@member_option
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False),
              help="Where to write it; default recipe.yaml beside what was read.")  # fmt: skip
@click.pass_context
def recipe(ctx: click.Context, source: Path, member: int | None, out: Path | None) -> None:
    """Write the hyperparameter and architecture schedule a member's lineage followed, as a
    manifest that retrains it from scratch (agile train RECIPE).

    SOURCE: a run folder (its elite; with --member, that member of its latest checkpoint),
    elite.pt or a population checkpoint. `agile report` compares the retrained run with the
    lineage it replays.
    """
    from agile_cli.commands.recipe import run_recipe

    run_recipe(plugin_host(ctx).registry, source, member, out)


@cli.command()
@click.argument("source", type=click.Path(path_type=Path, exists=True))
@click.option("--format", "fmt", required=True, type=click.Choice(["onnx", "torchscript"]),
              help="onnx (onnxruntime) or torchscript (torch.jit.load).")  # fmt: skip
@member_option
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False),
              help="Write here (default: elite.onnx or elite.ts beside the agent).")  # fmt: skip
@click.option("--force", is_flag=True, help="Overwrite the file if it exists.")
@trust_code_option
@click.pass_context
def export(ctx: click.Context, source: Path, fmt: str, member: int | None, out: Path | None,
           force: bool, trust_code: bool) -> None:  # fmt: skip
    """Export a trained agent's greedy policy as an ONNX or TorchScript file.

    SOURCE is a run folder (its elite), elite.pt, or a checkpoint (the best member, or
    --member). The file maps a batch of observations to the actions `agile evaluate` takes
    (no exploration) and runs without agile.
    """
    from agile_cli.commands.export import run_export

    run_export(plugin_host(ctx).registry, source, fmt, member=member, out=out, force=force,
               trust_code=trust_code)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    cli.main(args=argv, prog_name="agile")


if __name__ == "__main__":  # pragma: no cover
    main()
    sys.exit()
