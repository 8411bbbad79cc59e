"""`agile schema`: a JSON Schema that editors can use to check manifests."""

from __future__ import annotations

import json

import jsonschema
import pytest

from agile_cli.loader import load_file

from .conftest import CONFIGS


@pytest.fixture(scope="module")
def schema() -> dict:
    from click.testing import CliRunner

    from agile_cli.cli import cli

    result = CliRunner().invoke(cli, ["schema"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    jsonschema.Draft202012Validator.check_schema(document)
    return document


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_manifests_satisfy_the_schema(schema, path) -> None:
    jsonschema.validate(load_file(path), schema)


def test_schema_rejects_unknown_keys_and_wrong_names(schema) -> None:
    good = {"algorithm": {"name": "DQN", "lr": 0.001}, "environment": {"name": "CartPole-v1"}}
    jsonschema.validate(good, schema)
    for bad in (
        {**good, "algorithm": {"name": "DQN", "lrr": 0.1}},
        {**good, "algorithm": {"name": "Dqn"}},
        {**good, "environment": {"name": "CartPole-v1", "num_env": 2}},
        {**good, "extra": 1},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_schema_for_one_algorithm(run) -> None:
    document = json.loads(run("schema", "--algorithm", "PPO").output)
    assert document["properties"]["algorithm"] == {"$ref": "#/$defs/PPOAlgorithm"}
    assert "DQNAlgorithm" not in document["$defs"]
    result = run("schema", "--algorithm", "ppo")
    assert result.exit_code == 2
    assert "unknown algorithm 'ppo' (did you mean 'PPO'?)" in result.output


def test_every_algorithm_is_described_by_its_specs_docstring(schema) -> None:
    from agile_cli.testing import installed_host

    for name, entry in installed_host().registry.algorithms.items():
        doc = entry.spec.__doc__  # a statement above it in the class body leaves it None
        assert doc and doc.split()[0], f"{name}'s spec has no docstring"
        described = schema["$defs"].get(f"{name}Algorithm", {}).get("description", "")
        assert described.split()[:3] == doc.split()[:3], name


def test_schema_shows_the_upper_bounds(schema) -> None:
    definitions = schema["$defs"]
    pop_size = definitions["DQNTraining"]["properties"]["pop_size"]
    assert pop_size["maximum"] == 1024 and "At most 1,024." in pop_size["description"]
    num_envs = definitions["GymnasiumEnvironment"]["properties"]["num_envs"]
    assert num_envs["maximum"] == 4096 and "At most 4,096." in num_envs["description"]
    width = definitions["MLPConfig"]["properties"]["max_mlp_nodes"]
    assert width["maximum"] == 65_536 and "At most 65,536." in width["description"]
    max_size = definitions["ReplayBufferSpec"]["properties"]["max_size"]
    assert max_size["maximum"] == 10**9
    good = {"algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**good, "training": {"pop_size": 100_000}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**good, "training": {"pop_size": True}}, schema)
    jsonschema.validate({**good, "training": {"max_steps": 1e6}}, schema)


def test_the_schema_accepts_the_aliases_validate_accepts(schema, tmp_path, run) -> None:
    recurrent = {
        "algorithm": {"name": "Recurrent PPO", "recurrent": True},
        "environment": {"name": "CartPole-v1"},
    }
    rainbow = {"algorithm": {"name": "Rainbow DQN"}, "environment": {"name": "CartPole-v1"}}
    for manifest in (recurrent, rainbow):
        jsonschema.validate(manifest, schema)
        path = tmp_path / "m.json"
        path.write_text(json.dumps(manifest))
        assert run("validate", str(path)).exit_code == 0
    contradicted = {**recurrent, "algorithm": {"name": "Recurrent PPO", "recurrent": False}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(contradicted, schema)
    path.write_text(json.dumps(contradicted))
    assert run("validate", str(path)).exit_code == 2


def test_schema_for_an_alias_is_its_algorithms(run) -> None:
    document = json.loads(run("schema", "--algorithm", "Rainbow DQN").output)
    assert document["properties"]["algorithm"] == {"$ref": "#/$defs/RainbowDQNAlgorithm"}


def test_plugins_lists_the_aliases_with_the_plugin_that_gave_them(run) -> None:
    rows = {row["name"]: row for row in json.loads(run("plugins", "--json").output)}
    assert rows["ppo"]["contributes"] == [
        "algorithm:PPO",
        "algorithm alias:Recurrent PPO",
        "algorithm alias:RecurrentPPO",
    ]
    assert "algorithm alias:Rainbow DQN" in rows["rainbow"]["contributes"]
