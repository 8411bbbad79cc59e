"""`--set PATH=VALUE` on `agile validate` and `agile train`: typed values, errors, provenance."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pytest
import yaml

from agile_cli.errors import ManifestError, UsageError
from agile_cli.overrides import apply_overrides, parse_override, parse_overrides

from .conftest import MINIMAL
from .test_cli_basics import _heavy_imports

TINY = """\
algorithm: {name: DQN, batch_size: 16}
environment: {name: CartPole-v1, num_envs: 2}
training: {max_steps: 128, evo_steps: 64, pop_size: 2}
mutation: {}
tournament_selection: {}
"""


def _resolved(run, write, *sets: str, text: str = MINIMAL) -> dict[str, Any]:
    args = [arg for value in sets for arg in ("--set", value)]
    result = run("validate", "--json", str(write("m.yaml", text)), *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _refused(result) -> list[str]:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return [line.strip() for line in result.output.splitlines()]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8", 8), ("3e-4", 3e-4), ("1E6", 1e6), ("-2.5", -2.5), ("true", True), ("off", False),
        ("null", None), ("", None), ("[64, 64]", [64, 64]), ("CartPole-v1", "CartPole-v1"),
        ("'8'", "8"), ("{min: 1e-5, max: 1.0e-2}", {"min": 1e-5, "max": 1e-2}),
        ("a=b", "a=b"),
    ],
)  # fmt: skip
def test_values_are_typed_as_a_manifest_file_types_them(text: str, expected: Any) -> None:
    override = parse_override(f"algorithm.x={text}")
    assert override.keys == ("algorithm", "x")
    assert override.value == expected
    assert type(override.value) is type(expected)


def test_paths_create_missing_mappings_and_index_existing_lists() -> None:
    data: dict[str, Any] = {
        "network": {"encoder_config": {"hidden_size": [64, 64]}},
        "mutation": None,
    }
    written = apply_overrides(
        data,
        parse_overrides([
            "mutation.rl_hp_selection.lr.min=1e-5",
            "network.encoder_config.hidden_size.1=32",
            "training.pop_size=4",
            "training.pop_size=6",  # a later one wins
        ]),
    )  # fmt: skip
    assert data["mutation"] == {"rl_hp_selection": {"lr": {"min": 1e-5}}}
    assert data["network"]["encoder_config"]["hidden_size"] == [64, 32]
    assert data["training"] == {"pop_size": 6}
    assert written == [
        "mutation",  # the outermost mapping --set created (null counts as missing)
        "network.encoder_config.hidden_size[1]",
        "training",
        "training.pop_size",  # training exists by now
    ]


def test_validate_json_shows_the_overridden_values(run, write) -> None:
    data = _resolved(
        run, write,
        "training.pop_size=3", "algorithm.lr=3e-4", "algorithm.double=true",
        "network.encoder_config.hidden_size=[32, 48]", "training.target_score=1e3",
        "mutation.rl_hp_selection.lr.min=1e-5", "mutation.rl_hp_selection.lr.max=1e-3",
        "tournament_selection.tournament_size=3", "environment.name=Acrobot-v1",
    )  # fmt: skip
    assert data["training"]["pop_size"] == 3
    assert data["algorithm"]["lr"] == 3e-4 and data["algorithm"]["double"] is True
    assert data["network"]["encoder_config"]["hidden_size"] == [32, 48]
    assert data["training"]["target_score"] == 1000
    bounds = data["mutation"]["rl_hp_selection"]["lr"]
    assert (bounds["min"], bounds["max"]) == (1e-5, 1e-3)
    assert data["tournament_selection"]["tournament_size"] == 3
    assert data["environment"]["name"] == "Acrobot-v1"


def test_null_removes_an_optional_section(run, write) -> None:
    assert "mutation" in _resolved(run, write, text=TINY)
    assert "mutation" not in _resolved(run, write, "mutation=null", text=TINY)


def test_validate_applies_the_overrides_to_every_file(run, write) -> None:
    first = write("a.yaml", TINY)
    second = write("b.yaml", TINY.replace("pop_size: 2", "pop_size: 4"))
    result = run("validate", str(first), str(second), "--set", "training.pop_size=5")
    assert result.exit_code == 0, result.output
    assert result.output.count("pop 5,") == 2


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("training.pop_size", "--set training.pop_size: expected PATH=VALUE, with '='"),
        ("=3", "--set =3: the path before '=' is empty"),
        ("training..pop_size=3", "--set training..pop_size=3: the path 'training..pop_size' has "
                                 "an empty key"),
        ("traning.pop_size=3", "--set traning.pop_size=3: unknown section 'traning' "
                               "(did you mean 'training'?)"),
        ("bogus=3", "--set bogus=3: unknown section 'bogus' (valid sections: algorithm, "),
        ("algorithm.lr=[1", "--set algorithm.lr=[1: the value is not valid YAML: "),
    ],
)  # fmt: skip
def test_malformed_overrides_are_usage_errors(run, write, given: str, expected: str) -> None:
    for command in ("validate", "train"):
        lines = _refused(run(command, str(write("m.yaml", MINIMAL)), "--set", given))
        assert lines[0].startswith("error: " + expected), lines


def test_an_unknown_section_lists_every_accepted_one(run, write) -> None:
    lines = _refused(run("validate", str(write("m.yaml", MINIMAL)), "--set", "bogus=3"))
    listed = lines[0].split("valid sections: ")[1]
    for section in ("algorithm", "tournament_selection", "replay_buffer"):
        assert section in listed
    assert "selection_strategy (alias of tournament_selection)" in listed


def test_a_path_deeper_than_any_manifest_is_refused_at_once(run, write) -> None:
    path = "training." + ".".join(["a"] * 20_000)
    started = time.perf_counter()
    lines = _refused(run("validate", str(write("m.yaml", MINIMAL)), "--set", f"{path}=1"))
    assert time.perf_counter() - started < 5
    assert lines[0].startswith("error: --set training.a.a.a")
    assert "the path has 20,001 keys; a manifest's fields are at most 16 deep" in lines[0]
    assert len(lines[0]) < 300


def test_a_path_through_a_value_that_is_not_a_mapping_is_refused(run, write) -> None:
    text = MINIMAL + "network: {encoder_config: {hidden_size: [64, 64]}}\n"
    cases = {
        "algorithm.name.x=1": "algorithm.name: is a string ('DQN'), not a mapping: --set "
        "algorithm.name.x=1 cannot set a key in it (set it whole instead, e.g. --set "
        "algorithm.name=VALUE)",
        "network.encoder_config.hidden_size.2=8": "network.encoder_config.hidden_size: has 2 "
        "items; --set network.encoder_config.hidden_size.2=8 names item 2",
        "network.encoder_config.hidden_size.x=8": "network.encoder_config.hidden_size: is a list;",
        "network.head_config.hidden_size.0=8": "network.head_config.hidden_size: is not in the "
        "manifest, so --set network.head_config.hidden_size.0=8 cannot name its item 0",
    }
    for given, expected in cases.items():
        lines = _refused(run("validate", str(write("m.yaml", text)), "--set", given))
        assert lines[0].endswith("m.yaml: invalid, 1 error")
        assert lines[1].startswith(expected), lines


def test_a_misspelled_key_gets_the_same_suggestion_as_in_a_file(run, write) -> None:
    in_file = _refused(run("validate", str(write("f.yaml", MINIMAL + "training: {pop_sise: 8}\n"))))
    by_set = _refused(
        run("validate", str(write("m.yaml", MINIMAL)), "--set", "training.pop_sise=8")
    )
    assert in_file[1] == "training.pop_sise: unknown field (did you mean 'pop_size'?)"
    assert by_set[1] == in_file[1] + " (from --set)"


def test_only_errors_in_what_set_wrote_are_marked(run, write) -> None:
    text = MINIMAL + "network: {latnt_dim: 3}\n"
    args = ["--set", "training.pop_size=0", "--set", "network.encoder_config.hidden_size=[64, x]"]
    lines = _refused(run("validate", str(write("m.yaml", text)), *args))
    assert lines[0].endswith("m.yaml: invalid, 3 errors")
    assert set(lines[1:]) == {
        "training.pop_size: input should be greater than or equal to 1 (got 0) (from --set)",
        "network.encoder_config.hidden_size[1]: expected an integer, got a string (got 'x') "
        "(from --set)",
        "network.latnt_dim: unknown field (did you mean 'latent_dim'?)",
    }


def test_a_created_mapping_marks_what_it_lacks(run, write) -> None:
    lines = _refused(
        run("validate", str(write("m.yaml", MINIMAL)), "--set", "mutation.rl_hp_selection.lr.min=0")
    )
    assert (
        "mutation.rl_hp_selection.lr.max: required field is missing (add it) (from --set)" in lines
    )


def test_parse_and_apply_raise_agile_errors() -> None:
    with pytest.raises(UsageError, match="expected PATH=VALUE"):
        parse_override("training")
    with pytest.raises(ManifestError) as raised:
        apply_overrides({"algorithm": "DQN"}, parse_overrides(["algorithm.name=PPO"]), "m.yaml")
    assert raised.value.source == "m.yaml"
    assert raised.value.errors[0].path == "algorithm"


def test_help_shows_the_option_with_an_example(run) -> None:
    for command in ("validate", "train"):
        result = run(command, "--help")
        assert result.exit_code == 0
        flat = " ".join(result.output.split())
        assert "--set PATH=VALUE" in flat and "--set training.pop_size=8" in flat


def test_validate_with_set_stays_light(write) -> None:
    manifest = write("m.yaml", MINIMAL)
    assert _heavy_imports("validate", str(manifest), "--set", "training.pop_size=3") == "HEAVY:"


def test_train_records_the_overrides_and_resume_refuses_them(
    run, write, tmp_path, monkeypatch
) -> None:
    run_dir = tmp_path / "run"
    args = ["train", str(write("m.yaml", TINY)), "--quiet", "--device", "cpu", "--run-dir",
            str(run_dir), "--set", "training.pop_size=3", "--set", "algorithm.lr=3e-4"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", ["agile", *args])  # what command.txt records
    result = run(*args)
    assert result.exit_code == 0, result.output
    saved = yaml.safe_load((run_dir / "manifest.yaml").read_text())
    assert saved["training"]["pop_size"] == 3 and saved["algorithm"]["lr"] == 3e-4
    (line,) = (run_dir / "command.txt").read_text().splitlines()
    assert "--set training.pop_size=3 --set algorithm.lr=3e-4" in line
    resumed = run("train", "--resume", str(run_dir), "--set", "training.max_steps=256")
    lines = _refused(resumed)
    assert lines[0].startswith("error: --set cannot change a resumed run")
    assert "manifest.yaml" in lines[0]
    assert len((run_dir / "command.txt").read_text().splitlines()) == 1


def test_train_refuses_an_invalid_override_before_making_a_run_folder(run, write, tmp_path) -> None:
    run_dir = tmp_path / "run"
    result = run("train", str(write("m.yaml", TINY)), "--run-dir", str(run_dir), "--set",
                 "training.pop_size=0")  # fmt: skip
    lines = _refused(result)
    assert (
        "training.pop_size: input should be greater than or equal to 1 (got 0) (from --set)"
        in lines
    )
    assert any(line.endswith("m.yaml: 1 error") for line in lines)
    assert not run_dir.exists()
