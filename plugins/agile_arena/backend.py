"""The Arena backend: the same validated manifest, trained on Arena's cluster."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

import click

from agile_arena import llm
from agile_arena.errors import ArenaConfigError, ArenaError
from agile_arena.render import notice, print_event
from agile_arena.spec import ARENA_ALGORITHMS, ArenaOptions
from agile_cli import (
    Backend,
    EnvironmentSpec,
    FieldError,
    ManifestError,
    RunResult,
    Spec,
    TrainingManifest,
    UsageError,
)
from agile_cli.helpers import Registry, printable


def make_client(options: ArenaOptions) -> Any:
    """An Arena client configured from the backend options (imports httpx)."""
    from agile_arena.client import ArenaClient

    return ArenaClient(
        api_key=options.api_key,
        base_url=options.base_url,
        request_timeout=options.request_timeout,
        upload_timeout=options.upload_timeout,
        notify=notice,
    )


def check_eligible(manifest: TrainingManifest) -> None:
    """Refuse, before any request, what Arena cannot run."""
    name = manifest.algorithm_name
    if name not in ARENA_ALGORITHMS:
        raise ManifestError(
            [
                FieldError(
                    "algorithm.name", f"{name} cannot run on Arena", "train it with --backend local"
                )
            ],
        )
    if manifest.recipe is not None:
        raise ManifestError(
            [FieldError("recipe", "Arena does not replay recipes", "train it with --backend local")]
        )
    selection = manifest.tournament_selection
    if selection is not None and selection.strategy != "tournament":
        raise ManifestError(
            [
                FieldError(
                    "selection_strategy.strategy",
                    f"Arena trains with tournament selection only, not {selection.strategy}",
                    "train it with --backend local or --backend ray",
                )
            ],
        )
    if llm.is_llm(manifest):
        errors = llm.eligibility_errors(manifest)
        if errors:
            raise ManifestError(errors)
        return
    if manifest.environment_builder not in (None, "gymnasium"):
        raise ManifestError(
            [
                FieldError(
                    "environment.builder",
                    f"Arena cannot use the '{manifest.environment_builder}' builder",
                    "train it locally",
                )
            ],
        )


def arena_manifest(manifest: TrainingManifest) -> dict[str, Any]:
    """The payload Arena expects: defaults filled in, nulls left out, environment by name.

    An LLM job's environment names its dataset and its network is a finetuning spec (see
    :mod:`agile_arena.llm`); fields Arena does not know are left out.
    """
    data = manifest.to_dict()
    if llm.is_llm(manifest):
        sections = llm.llm_payload(data, manifest)
    else:
        sections = {
            "algorithm": data["algorithm"],
            "environment": arena_environment(manifest.environment),
            "training": data["training"],
            "network": data.get("network", {}),
        }
    payload: dict[str, Any] = _without_none(
        {
            **sections,
            "mutation": data.get("mutation") or {},
            "tournament_selection": data.get("tournament_selection") or {},
        }
    )
    if "replay_buffer" in data and not llm.is_llm(manifest):  # an LLM job's is agile's queue
        payload["replay_buffer"] = _without_none(data["replay_buffer"])
    return payload


def arena_environment(environment: EnvironmentSpec) -> dict[str, Any]:
    """An RL job's environment as Arena names it: ``name``, ``num_envs`` and, when given,
    ``version`` (left out, Arena uses the latest). What says how to build it locally
    (entrypoint, config, wrappers) is not sent: a custom environment is uploaded instead."""
    section: dict[str, Any] = {
        "name": environment.name,
        "num_envs": getattr(environment, "num_envs", 1),
    }
    if environment.version is not None:
        section["version"] = environment.version
    return section


def _without_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_none(item) for key, item in value.items() if item is not None}
    return value


class ArenaBackend(Backend):
    """Submits to Arena; the run is followed with `agile arena experiments ...`."""

    @staticmethod
    def client(options: ArenaOptions) -> Any:
        """An :class:`~agile_arena.client.ArenaClient` for these options."""
        return make_client(options)

    def train(
        self,
        manifest: TrainingManifest,
        options: Spec,
        registry: Registry,
        *,
        verbose: bool,
    ) -> RunResult:
        options = cast(ArenaOptions, options)  # the CLI validated them against ArenaOptions
        return submit(manifest, options, verbose=verbose)


def submit(
    manifest: TrainingManifest,
    options: ArenaOptions,
    *,
    reward_file: Path | None = None,
    completion: str | None = None,
    verbose: bool = False,
) -> RunResult:
    """Check, build and submit the manifest's Arena job (what ``train`` and
    ``agile arena experiments submit`` do).

    :param reward_file: the reward module of a reasoning job, instead of
        ``environment.rubric_file_path``.
    :param completion: a completion Arena checks the reward function against.
    """
    check_eligible(manifest)
    payload = arena_manifest(manifest)
    reward = _reward_file(manifest, payload, reward_file)
    if llm.is_llm(manifest):
        for warning in llm.left_out(manifest):
            click.echo(f"warning: {warning}", err=True)
    with make_client(options) as client:
        project = _project(client, options)
        if not client.is_authenticated:
            from agile_arena.errors import ArenaAuthError

            raise ArenaAuthError("not logged in to Arena", "run `agile login`")
        _upload_custom_environment(client, manifest, options, verbose)
        if llm.is_llm(manifest):
            _warn_unless_llm_project(client, project)
        click.echo(f"submitting {manifest.summary()} to Arena project '{project}'")
        result = client.submit_experiment(
            payload,
            resource_id=options.resource_id,
            num_nodes=options.num_nodes,
            project=project,
            experiment_name=options.experiment_name,
            reward_file=reward,
            completion=completion,
            on_event=print_event if verbose else None,
        )
    return _submitted(result, options, project)


def _reward_file(
    manifest: TrainingManifest, payload: dict[str, Any], given: Path | None
) -> Path | None:
    """The reward file to send: ``given`` (named in the payload too), else the manifest's."""
    if given is None:
        return llm.reward_file(manifest)
    if not llm.is_reasoning(manifest):
        raise UsageError(
            f"--reward-file: {manifest.algorithm_name} on this environment learns from no "
            "reward function",
            "leave --reward-file out; it is for GRPO, GSPO, CISPO, LLMPPO and LLMREINFORCE "
            "on reasoning data",
        )
    path = llm.checked_reward_file(given)
    payload["environment"]["reward_file_path"] = path.name
    return path


def _project(client: Any, options: ArenaOptions) -> str:
    try:
        return client.resolve_project(options.project)
    except ArenaConfigError as error:  # a usage mistake: nothing has been sent
        raise UsageError(error.message, error.hint) from None


def _warn_unless_llm_project(client: Any, project: str) -> None:
    """Warn when the project is listed as another kind than an LLM project (best effort:
    the reference does not say what Arena does with such a job, so it is still sent)."""
    try:
        projects = client.list_projects()
    except ArenaError:
        return
    warning = llm.project_warning(projects, project)
    if warning:
        click.echo(printable(f"warning: {warning}"), err=True)


def _submitted(result: dict[str, Any], options: ArenaOptions, project: str) -> RunResult:
    name = printable(
        str(
            result.get("experiment_name")
            or options.experiment_name
            or result.get("experiment_id", "?")
        )
    )
    metrics = f"agile arena experiments metrics {name}"
    click.echo(f"submitted experiment '{name}' to project '{project}'")
    click.echo(f"follow it with: agile arena experiments list --project {project}")
    click.echo(f"metrics:        {metrics}")
    summary = {
        "backend": "arena",
        "project": project,
        "resource_id": options.resource_id,
        "num_nodes": options.num_nodes,
        **result,
    }
    return RunResult(name=name, status="submitted", metrics=metrics, summary=summary)


def _upload_custom_environment(
    client: Any, manifest: TrainingManifest, options: ArenaOptions, verbose: bool
) -> None:
    environment = manifest.environment
    entrypoint = getattr(environment, "entrypoint", None)
    if not entrypoint:
        return
    source, arena_entrypoint = _source_of(environment)
    wants = options.upload_env or (
        sys.stdin.isatty()
        and click.confirm(f"environment '{environment.name}' is custom; upload {source} to Arena?")
    )
    if not wants:
        raise UsageError(
            f"environment '{environment.name}' is a custom environment Arena does not have",
            "pass --upload-env, or upload it with `agile arena environments upload "
            f"{environment.name} --source {source}`",
        )
    with tempfile.TemporaryDirectory() as folder:
        env_config = None
        config = getattr(environment, "config", None)
        if config:
            env_config = Path(folder) / "env_config.json"
            env_config.write_text(json.dumps(config))
        client.validate_environment(
            environment.name,
            source=source,
            env_config=env_config,
            entrypoint=arena_entrypoint,
            on_event=print_event if verbose else None,
        )


def _source_of(environment: Any) -> tuple[Path, str]:
    """What to upload for a custom environment, and its entry point inside the upload."""
    module, _, attribute = str(environment.entrypoint).rpartition(":")
    module_name = module[:-3] if module.endswith(".py") else module
    base = Path(environment.path) if environment.path else Path.cwd()
    if environment.path is None and Path(module).is_file():
        return Path(module), f"{Path(module_name).name}:{attribute}"
    return base, f"{module_name.replace('/', '.')}:{attribute}"
