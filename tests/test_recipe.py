"""A member's lineage as a recipe: recorded every generation, written by `agile recipe`, and
replayed by `agile train RECIPE` on one member without evolution."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result

from agile_cli.training import checkpoint

# Architecture mutations often, so that lineages change their networks.
MANIFEST = """\
algorithm: {name: DQN, batch_size: 16}
environment: {name: CartPole-v1, num_envs: 2}
training: {max_steps: 192, evo_steps: 64, pop_size: 3}
network: {latent_dim: 16, encoder_config: {hidden_size: [16]}, head_config: {hidden_size: [16]}}
mutation:
  probabilities:
    {no_mut: 0.1, arch_mut: 0.5, new_layer: 0.2, params_mut: 0.0, act_mut: 0.0, rl_hp_mut: 0.4}
  rand_seed: 3
tournament_selection: {tournament_size: 2, elitism: true}
"""

Run = Callable[..., Result]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three generations of three members, evolving."""
    from click.testing import CliRunner

    from agile_cli.cli import cli

    base = tmp_path_factory.mktemp("recipe")
    (base / "m.yaml").write_text(MANIFEST, encoding="utf-8")
    args = ["train", str(base / "m.yaml"), "--quiet", "--device", "cpu", "--run-dir",
            str(base / "run"), "--elite-top", "0"]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return base / "run"


def _generations(run: Path) -> list[dict[str, Any]]:
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _ancestry(run: Path, index: int) -> list[dict[str, Any]]:
    """The metrics rows of member ``index``'s lineage, generation 1 first, following the
    parents that the report's rows name."""
    rows = []
    for generation in reversed(_generations(run)):
        row = next(m for m in generation["members"] if m["index"] == index)
        rows.append(row)
        index = row["parent"] if row["parent"] is not None else index
    return rows[::-1]


def test_the_elite_carries_its_lineage_through_clones_and_mutations(trained: Path) -> None:
    saved = checkpoint.load(trained / "elite.pt")["member"]
    lineage = saved["record"]["lineage"]
    ancestry = _ancestry(trained, saved["index"])
    assert [entry["generation"] for entry in lineage] == [1, 2, 3]
    assert [entry["steps"] for entry in lineage] == [64, 128, 192]
    assert [entry["fitness"] for entry in lineage] == [row["fitness"] for row in ancestry]
    for entry, row in zip(lineage, ancestry, strict=True):
        shown = {name: entry["hyperparameters"][name] for name in row["hyperparameters"]}
        assert shown == row["hyperparameters"]
    assert "architecture" in lineage[0]


def test_agile_recipe_writes_a_manifest_of_one_member_without_evolution(
    run: Run, trained: Path
) -> None:
    result = run("recipe", str(trained))
    assert result.exit_code == 0, result.output
    written = yaml.safe_load((trained / "recipe.yaml").read_text(encoding="utf-8"))
    assert written["training"]["pop_size"] == 1
    assert "mutation" not in written and "tournament_selection" not in written
    lineage = checkpoint.load(trained / "elite.pt")["member"]["record"]["lineage"]
    schedule = written["recipe"]["schedule"]
    assert [step["hyperparameters"] for step in schedule] == [e["hyperparameters"] for e in lineage]
    assert [step["fitness"] for step in schedule] == [e["fitness"] for e in lineage]
    assert run("validate", str(trained / "recipe.yaml")).exit_code == 0


def test_training_a_recipe_follows_its_schedule(run: Run, trained: Path, tmp_path: Path) -> None:
    assert run("recipe", str(trained), "--out", str(tmp_path / "r.yaml")).exit_code == 0
    recipe = yaml.safe_load((tmp_path / "r.yaml").read_text(encoding="utf-8"))
    schedule = recipe["recipe"]["schedule"]
    first = next(step["architecture"] for step in schedule if "architecture" in step)
    wider = copy.deepcopy(first)
    wider["encoder"]["hidden_size"] = [24, 8]
    rates = [1e-3, 2e-3, 3e-3]
    for step, rate in zip(schedule, rates, strict=True):
        step["hyperparameters"]["lr"] = rate
        step.pop("architecture", None)
    schedule[0]["architecture"], schedule[1]["architecture"] = first, wider
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    result = run("train", str(tmp_path / "r.yaml"), "--quiet", "--run-dir", str(tmp_path / "re"))
    assert result.exit_code == 0, result.output
    rows = [generation["members"] for generation in _generations(tmp_path / "re")]
    assert [len(members) for members in rows] == [1, 1, 1]
    assert [members[0]["hyperparameters"]["lr"] for members in rows] == rates
    assert [members[0]["arch"].split(" ->")[0] for members in rows] == [
        "mlp[" + ",".join(map(str, first["encoder"]["hidden_size"])) + "]",
        "mlp[24,8]",
        "mlp[24,8]",
    ]


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (lambda m: m["training"].update(pop_size=2), "training.pop_size"),
        (lambda m: m.update(mutation={}), "mutation"),
        (
            lambda m: m["recipe"]["schedule"][0]["hyperparameters"].update(lrr=1.0),
            "recipe.schedule[0].hyperparameters.lrr",
        ),
        (
            lambda m: m["recipe"]["schedule"][1].update(generation=5),
            "recipe.schedule[1].generation",
        ),
    ],
)
def test_a_recipe_that_cannot_replay_is_refused_by_field(
    run: Run, trained: Path, tmp_path: Path, edit: Callable[[dict], None], path: str
) -> None:
    assert run("recipe", str(trained), "--out", str(tmp_path / "r.yaml")).exit_code == 0
    recipe = yaml.safe_load((tmp_path / "r.yaml").read_text(encoding="utf-8"))
    edit(recipe)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    result = run("validate", str(tmp_path / "r.yaml"))
    assert result.exit_code == 2 and path in result.output, result.output
    assert "Traceback" not in result.output


def test_recipe_names_what_it_needs(run: Run, trained: Path) -> None:
    whole = run("recipe", str(trained / "checkpoints" / "latest.pt"))
    assert whole.exit_code == 2 and "name one with --member N" in whole.output
    missing = run("recipe", str(trained), "--member", "99")
    assert missing.exit_code == 2 and "no member 99" in missing.output
    held = checkpoint.load(trained / "checkpoints" / "latest.pt")["members"][0]["index"]
    one = run("recipe", str(trained), "--member", str(held), "--out", str(trained / "one.yaml"))
    assert one.exit_code == 0, one.output
    assert f"member {held}" in one.output


def test_an_architecture_the_member_cannot_take_is_refused_by_field(
    run: Run, trained: Path, tmp_path: Path
) -> None:
    """Refused as the manifest is validated (exit 2), before a run folder is made."""
    assert run("recipe", str(trained), "--out", str(tmp_path / "r.yaml")).exit_code == 0
    recipe = yaml.safe_load((tmp_path / "r.yaml").read_text(encoding="utf-8"))
    recipe["recipe"]["schedule"][1]["architecture"] = {"encoder": "a sketch"}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    result = run("train", str(tmp_path / "r.yaml"), "--quiet", "--run-dir", str(tmp_path / "re"))
    assert result.exit_code == 2, result.output
    assert "recipe.schedule[1].architecture: not a network architecture" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "re").exists()


def test_a_lineage_recorded_only_after_a_resume_is_refused_with_the_reason(
    run: Run, trained: Path, tmp_path: Path
) -> None:
    state = checkpoint.load(trained / "elite.pt")
    state["member"]["record"]["lineage"] = state["member"]["record"]["lineage"][1:]
    checkpoint.save_atomically(state, tmp_path / "elite.pt")
    result = run("recipe", str(tmp_path / "elite.pt"))
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "starts at generation 2: the generations before were trained by an agile" in said
