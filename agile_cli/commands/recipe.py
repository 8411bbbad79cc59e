"""``agile recipe``: a member's lineage written as a manifest that retrains it from scratch.

The member carries its lineage (:attr:`~agile_cli.MemberRecord.lineage`): the hyperparameters,
the architecture where it changed, and the fitness of every generation it and its ancestors
trained. The recipe is the run's own manifest, narrowed to a population of one without
evolution, with that lineage as its ``recipe`` schedule (see :mod:`agile_cli.models.recipe`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import click
import yaml

from agile_cli.errors import UsageError, printable
from agile_cli.host.registry import Registry
from agile_cli.training import files

#: The evolution sections a recipe leaves out: it replays instead of evolving.
EVOLUTION = ("mutation", "tournament_selection", "selection_strategy")


def run_recipe(registry: Registry, source: Path, member: int | None, out: Path | None) -> None:
    """Write the recipe of ``source``'s elite (or of population checkpoint member ``member``)
    to ``out`` (default: ``recipe.yaml`` beside what was read), checked as a manifest."""
    from agile_cli.manifest import TrainingManifest

    state, path = _saved(source, member)
    lineage = state["record"].get("lineage") or []
    if not lineage:
        raise UsageError(
            f"member {state['index']} in {path} has no lineage recorded",
            "runs record one since agile recorded lineages; train the run again to get a recipe",
        )
    if lineage[0]["generation"] != 1:
        raise UsageError(
            f"member {state['index']}'s lineage in {path} starts at generation "
            f"{lineage[0]['generation']}: the generations before were trained by an agile that "
            "recorded no lineage",
            "a recipe replays a lineage from its first generation; train the run again to get "
            "one (docs/checkpoints.md)",
        )
    manifest = _recipe_manifest(path.parent, state, lineage)
    TrainingManifest.get_validated(manifest, registry=registry)  # trainable as written
    target = out or path.parent / "recipe.yaml"
    last = lineage[-1]
    header = (
        f"# The recipe of member {state['index']} of {path.parent}: fitness "
        f"{last['fitness']:.4g} in generation {last['generation']}.\n"
        "# Retrains it from scratch, one member without evolution, on the hyperparameters and\n"
        "# architecture its lineage had in each generation. Train it with:\n"
        f"#   agile train {target}\n"
    )
    text = header + yaml.safe_dump(manifest, sort_keys=False, width=100)
    problem = files.link_problem(target)
    if problem is not None:
        raise UsageError(
            f"{problem}: agile writes no recipe through a link", "remove it, or give --out a path"
        )
    try:
        files.write_atomically(target, text)
    except OSError as exc:
        raise UsageError(
            f"cannot write {target}: {exc.strerror}", "give --out another path"
        ) from None
    changes = sum("architecture" in entry for entry in lineage[1:])
    click.echo(printable(
        f"wrote {target}: {len(lineage)} generations of member {state['index']}'s lineage"
        + (f", {changes} architecture change" + ("s" if changes != 1 else "") if changes else "")
    ))  # fmt: skip
    click.echo(printable(f"retrain it: agile train {target}"))


def _saved(source: Path, member: int | None) -> tuple[dict[str, Any], Path]:
    """The saved member (its ``state_dict``) and the file it came from: the run's elite, or a
    population checkpoint's member ``member``."""
    from agile_cli.training import checkpoint
    from agile_cli.training.evaluation import member_state

    if source.is_dir():
        source = source / ("elite.pt" if member is None else "checkpoints/latest.pt")
    state = checkpoint.load(source, kind=(checkpoint.POPULATION, checkpoint.MEMBER))
    if "members" in state and member is None:
        count = len(state["members"])
        raise UsageError(f"{source} holds {count} members", "name one with --member N")
    return member_state(state, member, source) | {"manifest": state["manifest"]}, source


def _recipe_manifest(
    run: Path, state: dict[str, Any], lineage: list[dict[str, Any]]
) -> dict[str, Any]:
    """The run's manifest for one member without evolution, with the lineage as schedule."""
    manifest = {k: v for k, v in copy.deepcopy(state["manifest"]).items() if k not in EVOLUTION}
    training = manifest.setdefault("training", {})
    training.pop("population_size", None)
    training["pop_size"] = 1
    schedule = []
    for entry in lineage:
        step = {
            "generation": entry["generation"],
            "steps_per_member": entry["steps"],
            "fitness": entry["fitness"],
            "mutation": entry["mutation"],
            "hyperparameters": entry["hyperparameters"],
        }
        if "architecture" in entry:
            step["architecture"] = entry["architecture"]
        schedule.append(step)
    manifest["recipe"] = {"source": str(run), "member": state["index"], "schedule": schedule}
    return manifest
