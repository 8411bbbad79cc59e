"""A checkpoint agile reads back never runs code: crafted pickles in every file a run folder
holds are refused by every command that reads them."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from agile_cli import TrainingError
from agile_cli.training import checkpoint

MANIFEST = """\
algorithm: {name: DQN, batch_size: 16}
environment: {name: CartPole-v1, num_envs: 2}
training: {max_steps: 128, evo_steps: 64, pop_size: 2, checkpoint_steps: 64}
mutation: {}
tournament_selection: {}
"""


class Payload:
    """Unpickling this calls exec, which leaves a marker file: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One tiny finished run (with a step snapshot and the buffer in its checkpoints)."""
    from click.testing import CliRunner

    from agile_cli.cli import cli

    base = tmp_path_factory.mktemp("trained")
    (base / "m.yaml").write_text(MANIFEST, encoding="utf-8")
    args = ["train", str(base / "m.yaml"), "--quiet", "--device", "cpu", "--run-dir",
            str(base / "run"), "--checkpoint-buffer"]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return base / "run"


@pytest.fixture
def run_copy(trained: Path, tmp_path: Path) -> Path:
    shutil.copytree(trained, tmp_path / "run")
    return tmp_path / "run"


def _poison_zip(path: Path, marker: Path, where: str) -> None:
    """Rewrite a real checkpoint so that one entry of its state is the payload."""
    state = torch.load(path, weights_only=True)
    if where == "buffer":
        state["buffer"] = {"capacity": Payload(marker)}
    elif where == "member":
        state["member"]["extra"] = Payload(marker)
    else:
        state["members"][0]["extra"] = Payload(marker)
    torch.save(state, path)


def _poison_pickle(path: Path, marker: Path) -> None:
    """Replace the file with a bare pickle (the pre-zip torch format)."""
    path.write_bytes(pickle.dumps({"format": checkpoint.FORMAT_VERSION, "x": Payload(marker)}))


def _commands(run: Path, target: str, out: Path) -> list[list[str]]:
    if target == "latest":
        return [["train", "--resume", str(run)],
                ["evaluate", str(run / "checkpoints" / "latest.pt"), "--episodes", "1"],
                ["evaluate", str(run / "checkpoints" / "latest.pt"), "--member", "0"]]  # fmt: skip
    if target == "elite":
        return [["evaluate", str(run), "--episodes", "1"],
                ["evaluate", str(run), "--member", "0", "--episodes", "1"],
                ["dataset", "collect", str(run), "--episodes", "1", "--out", str(out)]]  # fmt: skip
    return [["evaluate", str(run / "checkpoints" / "step_64.pt"), "--episodes", "1"],
            ["dataset", "collect", str(run / "checkpoints" / "step_64.pt"), "--episodes", "1",
             "--out", str(out)]]  # fmt: skip


@pytest.mark.parametrize(
    ("target", "where"),
    [("latest", "members"), ("latest", "buffer"), ("latest", "pickle"), ("elite", "member"),
     ("elite", "pickle"), ("snapshot", "members"), ("snapshot", "buffer")],
)  # fmt: skip
def test_no_command_runs_code_from_a_crafted_checkpoint(run, run_copy, tmp_path, target, where):
    files = {"latest": run_copy / "checkpoints" / "latest.pt", "elite": run_copy / "elite.pt",
             "snapshot": run_copy / "checkpoints" / "step_64.pt"}  # fmt: skip
    marker = tmp_path / "pwned"
    if where == "pickle":
        _poison_pickle(files[target], marker)
    else:
        _poison_zip(files[target], marker, where)
    # The craft works: an unsafe load of the file would run the payload.
    if where == "pickle":
        pickle.loads(files[target].read_bytes())
    else:
        torch.load(files[target], weights_only=False)
    assert marker.exists()
    marker.unlink()
    for args in _commands(run_copy, target, tmp_path / "out.h5"):
        result = run(*args)
        assert result.exit_code == 1, (args, result.output)
        assert "not a readable agile checkpoint" in result.output or "not an agile" in (
            result.output
        ), result.output
        assert "Traceback" not in result.output
        assert not marker.exists(), args


def test_a_compressed_archive_is_refused_before_it_is_inflated(tmp_path) -> None:
    """Zip entries are stored, never deflated: reading costs no more than the file's size."""
    plain = tmp_path / "plain.pt"
    checkpoint.save_atomically({"format": checkpoint.FORMAT_VERSION, "x": torch.zeros(1000)}, plain)
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        for info in source.infolist():
            z.writestr(info.filename, source.read(info))
    assert bomb.stat().st_size < plain.stat().st_size
    with pytest.raises(TrainingError, match="compressed entries"):
        checkpoint.load(bomb)


def test_plain_data_round_trips_and_anything_else_is_refused_when_saving(tmp_path) -> None:
    state = {"format": checkpoint.FORMAT_VERSION, "a": np.arange(6, dtype=np.int16).reshape(2, 3),
             "b": [1, 2.5, "x", None, True, (3, 4)], "c": torch.ones(2),
             "d": np.float32(1.5)}  # fmt: skip
    checkpoint.save_atomically(state, tmp_path / "c.pt")
    back = checkpoint.load(tmp_path / "c.pt")
    assert isinstance(back["a"], np.ndarray) and back["a"].dtype == np.int16
    assert np.array_equal(back["a"], state["a"])
    assert back["b"] == [1, 2.5, "x", None, True, (3, 4)] and back["d"] == 1.5
    assert torch.equal(back["c"], state["c"])
    with pytest.raises(TrainingError, match=r"checkpoint\['x'\] is a PosixPath"):
        checkpoint.save_atomically({"format": 2, "x": Path("/")}, tmp_path / "d.pt")
    assert not (tmp_path / "d.pt").exists()


def test_checkpoints_say_what_they_hold(trained) -> None:
    latest = checkpoint.load(trained / "checkpoints" / "latest.pt", kind=checkpoint.POPULATION)
    elite = checkpoint.load(trained / "elite.pt", kind=checkpoint.MEMBER)
    for state in (latest, elite):
        assert state["algorithm"] == "DQN" and state["environment"] == "CartPole-v1"
        assert "Box" in state["spaces"]["observation_space"]
        assert "Discrete(2)" in state["spaces"]["action_space"]
    with pytest.raises(TrainingError, match="holds one member"):
        checkpoint.load(trained / "elite.pt", kind=checkpoint.POPULATION)


OWN_CODE = """\
algorithm: {name: DQN, batch_size: 16}
environment:
  name: CartPole-v1
  num_envs: 2
  wrappers: ["tests.envs.toy:ScaleReward"]
training: {max_steps: 64, evo_steps: 64, pop_size: 2}
"""


@pytest.fixture
def own_key(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "agile" / "trust.key"


def test_a_run_of_your_own_that_names_code_evaluates_without_asking(run, write, tmp_path,
                                                                     own_key) -> None:  # fmt: skip
    trained = run("train", str(write("own.yaml", OWN_CODE)), "--quiet", "--device", "cpu",
                  "--run-dir", str(tmp_path / "own"))  # fmt: skip
    assert trained.exit_code == 0, trained.output
    assert own_key.stat().st_mode & 0o777 == 0o600
    assert run("evaluate", str(tmp_path / "own"), "--episodes", "1").exit_code == 0


def test_code_named_by_someone_elses_checkpoint_is_not_imported(run, trained, tmp_path,
                                                                own_key) -> None:  # fmt: skip
    marker = tmp_path / "pwned"
    (tmp_path / "evil.py").write_text(
        "import gymnasium\n\n\ndef make(**kwargs):\n"
        f"    open({str(marker)!r}, 'w').write('pwned')\n"
        "    return gymnasium.make('CartPole-v1')\n"
    )
    elite = tmp_path / "elite.pt"
    state = checkpoint.load(trained / "elite.pt")
    state["manifest"]["environment"].update(entrypoint="evil.py:make", path=str(tmp_path))
    state["code_seal"] = "0" * 64  # a seal made with another user's key
    checkpoint.save_atomically(state, elite)
    for args in (["evaluate", str(elite)], ["dataset", "collect", str(elite), "--episodes", "1",
                                           "--out", str(tmp_path / "o.h5")]):  # fmt: skip
        result = run(*args)
        assert result.exit_code == 2, result.output
        assert "not written by your agile" in result.output
        assert "environment.entrypoint: evil.py:make" in result.output
        assert "--trust-code" in result.output
        assert not marker.exists()
    result = run("evaluate", str(elite), "--episodes", "1", "--trust-code")  # vouched for: runs
    assert result.exit_code == 0, result.output
    assert marker.exists()


def test_resume_of_someone_elses_run_that_names_code_needs_trust(run, write, tmp_path,
                                                                 own_key) -> None:  # fmt: skip
    manifest = write("own.yaml", OWN_CODE.replace("max_steps: 64", "max_steps: 128"))
    first = run("train", str(manifest), "--quiet", "--device", "cpu", "--run-dir",
                str(tmp_path / "r"))  # fmt: skip
    assert first.exit_code == 0, first.output
    own_key.write_bytes(bytes(32))  # as if another user, with another key, resumed it
    latest = tmp_path / "r" / "checkpoints" / "latest.pt"
    state = checkpoint.load(latest)
    state["state"]["steps_per_member"] = 64  # halfway, so that there is something to resume
    checkpoint.save_atomically(state, latest)
    refused = run("train", "--resume", str(tmp_path / "r"))
    assert refused.exit_code == 2 and "environment.wrappers[0]: tests.envs.toy:ScaleReward" in (
        refused.output
    )
    trusted = run("train", "--resume", str(tmp_path / "r"), "--trust-code", "--quiet")
    assert trusted.exit_code == 0, trusted.output


def test_a_checkpoint_larger_than_free_memory_is_refused_unread(tmp_path, monkeypatch) -> None:
    from agile_cli import memory

    path = tmp_path / "big.pt"
    checkpoint.save_atomically({"format": checkpoint.FORMAT_VERSION, "x": torch.zeros(4096)}, path)
    monkeypatch.setattr(memory, "available_memory", lambda: 1024)
    with pytest.raises(TrainingError, match=r"more than the 1\.0 KiB of memory"):
        checkpoint.load(path)


@pytest.mark.parametrize("missing", ["state", "members", "manifest"])
def test_a_checkpoint_missing_entries_is_refused_without_a_traceback(run, run_copy, missing):
    latest = run_copy / "checkpoints" / "latest.pt"
    state = checkpoint.load(latest)
    del state[missing]
    checkpoint.save_atomically(state, latest)
    for args in (["train", "--resume", str(run_copy)], ["evaluate", str(latest)]):
        result = run(*args)
        assert result.exit_code == 1, (args, result.output)
        assert f"not an agile checkpoint (no valid {missing})" in result.output


def test_ctrl_c_in_the_middle_of_a_write_waits_for_the_file_then_interrupts(
    tmp_path, monkeypatch
) -> None:
    """Without the hold, torch's zip writer turns the interrupt into a RuntimeError."""
    real_save = torch.save
    writes: list[int] = []

    def interrupted_save(obj: object, stream: Any) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # arrives while the archive is being written
        writes.append(1)
        real_save(obj, stream)

    monkeypatch.setattr(checkpoint.torch, "save", interrupted_save)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in `agile train`
    path = tmp_path / "c.pt"
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save_atomically({"format": checkpoint.FORMAT_VERSION, "x": torch.ones(3)}, path)
    assert writes == [1]
    assert torch.equal(checkpoint.load(path)["x"], torch.ones(3))
    assert signal.signal(signal.SIGINT, before) is signal.default_int_handler
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temporary left behind
