"""Code a run folder names runs only as its seal says: the code that will actually run is what
is checked, a file by its resolved path and content, relative names resolve where the run was
trained (never the current directory), and an edit to a field naming code is never accepted
on resume."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agile_cli import TrainingManifest, UsageError
from agile_cli.training import checkpoint, trust

ENV = """\
import gymnasium


def make(**kwargs):
    return gymnasium.make("CartPole-v1")
"""

EVIL = """\
from pathlib import Path

import gymnasium


def make(**kwargs):
    Path({marker!r}).write_text("pwned")
    return gymnasium.make("CartPole-v1")
"""

MANIFEST = """\
algorithm: {name: DQN, batch_size: 16}
environment: {name: Toy, entrypoint: "env.py:make", num_envs: 1}
training: {max_steps: 64, evo_steps: 64, pop_size: 2}
"""


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This user's config folder (the trust key), shared by the module's runs."""
    return tmp_path_factory.mktemp("config")


@pytest.fixture(autouse=True)
def _own_key(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, config: Path) -> Path:
    """A project folder holding env.py, and a run trained there with its relative
    ``entrypoint: env.py:make`` (no path): ``home / "run"``."""
    from click.testing import CliRunner

    from agile_cli.cli import cli

    home = tmp_path_factory.mktemp("home")
    (home / "env.py").write_text(ENV, encoding="utf-8")
    (home / "m.yaml").write_text(MANIFEST, encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CONFIG_HOME", str(config))
        patch.chdir(home)
        args = ["train", "m.yaml", "--quiet", "--device", "cpu", "--run-dir", "run"]
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return home


@pytest.fixture
def own_run(home: Path, tmp_path: Path) -> Path:
    """A copy of the run trained in ``home`` (its code stays there)."""
    shutil.copytree(home / "run", tmp_path / "run")
    return tmp_path / "run"


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Another working directory, holding an env.py of its own that leaves a marker."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "env.py").write_text(EVIL.format(marker=str(tmp_path / "pwned")), encoding="utf-8")
    monkeypatch.chdir(folder)
    return folder


def _raise_max_steps(run: Path, steps: int) -> None:
    manifest = yaml.safe_load((run / "manifest.yaml").read_text(encoding="utf-8"))
    manifest["training"]["max_steps"] = steps
    (run / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), "utf-8")


def test_an_own_run_evaluates_and_resumes_from_another_directory(run, own_run, elsewhere):
    """Its env.py is found where it was trained, twice resumed from elsewhere included; the
    same-named file in the working directory is never imported."""
    evaluated = run("evaluate", str(own_run), "--episodes", "1")
    assert evaluated.exit_code == 0, evaluated.output
    for steps in (128, 192):  # a resumed run's checkpoints resume again
        _raise_max_steps(own_run, steps)
        resumed = run("train", "--resume", str(own_run), "--quiet")
        assert resumed.exit_code == 0, resumed.output
    assert (
        checkpoint.load(own_run / "checkpoints" / "latest.pt")["state"]["steps_per_member"] == 192
    )
    evaluated = run("evaluate", str(own_run / "checkpoints" / "latest.pt"), "--episodes", "1")
    assert evaluated.exit_code == 0, evaluated.output
    assert not (elsewhere.parent / "pwned").exists()


def test_export_and_collect_find_the_run_s_code_where_it_was_trained(run, own_run, elsewhere):
    exported = run(
        "export", str(own_run), "--format", "torchscript", "--out", str(elsewhere / "policy.pt")
    )
    assert exported.exit_code == 0, exported.output
    out = elsewhere / "data.h5"
    collected = run("dataset", "collect", str(own_run), "--episodes", "1", "--out", str(out))
    assert collected.exit_code == 0, collected.output
    assert not (elsewhere.parent / "pwned").exists()


def test_a_path_edited_in_a_sealed_elite_is_refused(run, own_run, elsewhere, tmp_path):
    """The seal covered the string ``env.py:make``, so another ``path`` ran another file."""
    elite = own_run / "elite.pt"
    state = checkpoint.load(elite)
    state["manifest"]["environment"]["path"] = str(elsewhere)
    checkpoint.save_atomically(state, elite)
    for args in (
        ["evaluate", str(elite), "--episodes", "1"],
        ["export", str(elite), "--format", "torchscript", "--out", str(tmp_path / "p.pt")],
        ["dataset", "collect", str(elite), "--episodes", "1", "--out", str(tmp_path / "d.h5")],
    ):
        result = run(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "does not cover" in result.output
        assert f"environment.entrypoint now imports {elsewhere / 'env.py'}" in result.output
        assert "--trust-code" in result.output and "Traceback" not in result.output
        assert not (tmp_path / "pwned").exists(), args


def test_a_changed_file_is_refused_until_trusted(run, own_run, home, tmp_path):
    original = (home / "env.py").read_text(encoding="utf-8")
    try:
        (home / "env.py").write_text(EVIL.format(marker=str(tmp_path / "pwned")), "utf-8")
        refused = run("evaluate", str(own_run), "--episodes", "1")
        assert refused.exit_code == 2, refused.output
        assert f"{home / 'env.py'} (environment.entrypoint) changed since" in refused.output
        _raise_max_steps(own_run, 128)
        refused = run("train", "--resume", str(own_run))
        assert refused.exit_code == 2 and "changed since" in refused.output, refused.output
        assert not (tmp_path / "pwned").exists()
        trusted = run("evaluate", str(own_run), "--episodes", "1", "--trust-code")
        assert trusted.exit_code == 0, trusted.output  # (this process still holds the old module)
    finally:
        (home / "env.py").write_text(original, encoding="utf-8")


def test_resume_never_runs_code_only_manifest_yaml_names(run, own_run, tmp_path):
    """The exploit: the checkpoint's manifest loses ``entrypoint`` and ``path``, manifest.yaml
    names evil.py (and a larger budget). Resume once checked the checkpoint's manifest, took
    the missing keys for fields of another version, and trained with manifest.yaml's."""
    marker = tmp_path / "pwned"
    attacker = tmp_path / "attacker"
    attacker.mkdir()
    (attacker / "evil.py").write_text(EVIL.format(marker=str(marker)), encoding="utf-8")
    latest = own_run / "checkpoints" / "latest.pt"
    state = checkpoint.load(latest)
    for key in ("entrypoint", "path"):
        del state["manifest"]["environment"][key]
    state["code_seal"] = None
    checkpoint.save_atomically(state, latest)
    manifest = yaml.safe_load((own_run / "manifest.yaml").read_text(encoding="utf-8"))
    manifest["environment"].update(entrypoint="evil.py:make", path=str(attacker))
    manifest["training"]["max_steps"] = 128
    (own_run / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), "utf-8")
    result = run("train", "--resume", str(own_run), "--quiet")
    assert result.exit_code == 2, result.output
    assert "manifest.yaml was edited since the checkpoint" in result.output
    assert "environment.entrypoint (None -> 'evil.py:make')" in result.output
    assert "Traceback" not in result.output
    assert not marker.exists()
    # --trust-code vouches for code, not for an edit of it
    result = run("train", "--resume", str(own_run), "--quiet", "--trust-code")
    assert result.exit_code == 2 and not marker.exists(), result.output


def test_manifest_yaml_naming_other_code_than_a_sealed_checkpoint_is_refused(run, own_run,
                                                                            elsewhere):  # fmt: skip
    manifest = yaml.safe_load((own_run / "manifest.yaml").read_text(encoding="utf-8"))
    manifest["environment"]["path"] = str(elsewhere)
    manifest["training"]["max_steps"] = 128
    (own_run / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), "utf-8")
    result = run("train", "--resume", str(own_run), "--quiet")
    assert result.exit_code == 2, result.output
    assert "environment.path" in result.output and "resuming cannot apply" in result.output
    assert not (elsewhere.parent / "pwned").exists()


def test_a_seal_of_an_older_agile_counts_as_none(run, own_run, elsewhere, config):
    """Older seals covered the reference's text only (an HMAC of ``field: value`` lines): such
    a run needs --trust-code, and then resolves as its manifest says, from the working
    directory (as it did then)."""
    elite = own_run / "elite.pt"
    state = checkpoint.load(elite)
    key = (config / "agile" / "trust.key").read_bytes()
    text = json.dumps(["environment.entrypoint: env.py:make"]).encode()
    state["code_seal"] = hmac.new(key, text, hashlib.sha256).hexdigest()  # as 0.x sealed it
    checkpoint.save_atomically(state, elite)
    refused = run("evaluate", str(elite), "--episodes", "1")
    assert refused.exit_code == 2, refused.output
    assert "not written by your agile (or by an older agile" in refused.output
    assert not (elsewhere.parent / "pwned").exists()
    trusted = run("evaluate", str(elite), "--episodes", "1", "--trust-code")
    assert trusted.exit_code == 0, trusted.output


REASONING = {
    "algorithm": {"name": "GRPO"},
    "environment": {
        "env_type": "reasoning",
        "dataset": "someone/sums",
        "columns": {"x": "a"},
        "reward_file_path": "reward.py",
        "reward_fn_name": "score",
        "prompt_template": {"user_0": "What is {a}?"},
    },
    "network": {"pretrained_model_name_or_path": "someone/tiny", "max_context_length": 384},
    "training": {"max_steps": 200, "evo_steps": 4, "pop_size": 2},
}


@pytest.fixture
def sealed_reasoning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """An LLM run's checkpoint header, sealed in ``tmp_path / "project"`` (reward.py there);
    the working directory is then ``tmp_path / "elsewhere"``, with a reward.py of its own."""
    project, other = tmp_path / "project", tmp_path / "elsewhere"
    for folder, body in ((project, "1.0"), (other, "2.0")):
        folder.mkdir()
        (folder / "reward.py").write_text(f"def score(c, a, q):\n    return {body}\n", "utf-8")
    monkeypatch.chdir(project)
    manifest = TrainingManifest.get_validated(REASONING).to_dict()
    state = {"manifest": manifest, "code_seal": trust.seal(manifest)}
    monkeypatch.chdir(other)
    yield state


def test_an_llm_reward_file_is_found_where_the_run_was_trained(sealed_reasoning, tmp_path):
    manifest = TrainingManifest.get_validated(sealed_reasoning["manifest"])
    checked = trust.checked(sealed_reasoning, manifest, Path("elite.pt"), trusted=False)
    assert checked.environment.rubric_file_path == str(tmp_path / "project" / "reward.py")
    (tmp_path / "project" / "reward.py").write_text("def score(c, a, q):\n    return 3.0\n")
    changed = re.escape("reward.py (environment.rubric_file_path) changed since the run was sealed")
    with pytest.raises(UsageError, match=changed):
        trust.checked(sealed_reasoning, manifest, Path("elite.pt"), trusted=False)


def test_an_llm_reward_file_edited_in_a_checkpoint_is_refused(sealed_reasoning, tmp_path):
    sealed_reasoning["manifest"]["environment"]["rubric_file_path"] = str(
        tmp_path / "elsewhere" / "reward.py"
    )
    manifest = TrainingManifest.get_validated(sealed_reasoning["manifest"])
    with pytest.raises(UsageError, match="does not cover"):
        trust.checked(sealed_reasoning, manifest, Path("elite.pt"), trusted=False)


def test_a_multi_agent_run_finds_its_entrypoint_where_it_was_trained(run, tmp_path, monkeypatch):
    """PettingZoo's builder resolves entrypoints as Gymnasium's does: from the located path."""
    project, other = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    other.mkdir()
    shutil.copy(Path(__file__).parent / "envs" / "toy_parallel.py", project)
    marker = tmp_path / "pwned"
    (other / "toy_parallel.py").write_text(
        f"open({str(marker)!r}, 'w').write('pwned')\n"
        "from tests.envs.toy_parallel import ToyParallel\n",
        encoding="utf-8",
    )
    (project / "m.yaml").write_text(
        "algorithm: {name: IPPO, learn_step: 32, batch_size: 16}\n"
        "environment: {name: toy, entrypoint: 'toy_parallel.py:ToyParallel', num_envs: 1,\n"
        "              config: {length: 6, speaker_leaves_at: 4}}\n"
        "training: {max_steps: 32, evo_steps: 32, pop_size: 2}\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(project)
    trained = run("train", "m.yaml", "--quiet", "--device", "cpu", "--run-dir", "run")
    assert trained.exit_code == 0, trained.output
    monkeypatch.chdir(other)
    evaluated = run("evaluate", str(project / "run"), "--episodes", "1")
    assert evaluated.exit_code == 0, evaluated.output
    assert not marker.exists()


def test_the_code_a_258_llm_environment_names_is_sealed(tmp_path):
    """2.58's spellings: a factory is code and the entrypoint it makes an id; a rubric file in
    either spelling; processors are code."""
    (tmp_path / "rubric.py").write_text("def reward_fn(c, a, q):\n    return 1.0\n")
    environment = {"entrypoint": "game:GuessTheNumber-v0", "factory": "json:loads",
                   "observation_processor": "json:dumps", "rubric_file_path": "rubric.py",
                   "rubric_name": "reward_fn"}  # fmt: skip
    found = {item.field: item for item in trust.code({"environment": environment}, tmp_path)}
    assert set(found) == {"environment.factory", "environment.observation_processor",
                          "environment.rubric_file_path"}  # fmt: skip
    assert found["environment.rubric_file_path"].reference == "rubric.py:reward_fn"
    august = {"reward_file_path": "rubric.py", "reward_fn_name": "reward_fn"}
    (code,) = trust.code({"environment": august}, tmp_path)
    assert code.field == "environment.reward_file_path" and code.sha256 is not None
