"""Run folders never lose or mix up work: taken folders are refused, names never collide,
resume keeps one record per generation and refuses checkpoints or edits it cannot follow,
and an early Ctrl-C leaves an honest summary."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from agile_cli.models.run_options import LocalRunOptions
from agile_cli.testing import installed_host, interrupt_after, tiny_manifest
from agile_cli.training import checkpoint, run_folder
from agile_cli.training.loop import EvolutionLoop
from agile_cli.training.progress import LogReporter
from agile_cli.training.run_folder import RunFolder
from agile_cli.training.trainer import resume_local

MANIFEST = """\
algorithm: {name: DQN, batch_size: 16}
environment: {name: CartPole-v1, num_envs: 2}
training: {max_steps: 192, evo_steps: 64, pop_size: 2}
mutation: {}
tournament_selection: {}
"""


def _strict(text: str) -> object:
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def _generations(run: Path) -> list[int]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [_strict(line)["generation"] for line in lines]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    from click.testing import CliRunner

    from agile_cli.cli import cli

    base = tmp_path_factory.mktemp("finished")
    (base / "m.yaml").write_text(MANIFEST, encoding="utf-8")
    args = ["train", str(base / "m.yaml"), "--quiet", "--device", "cpu", "--run-dir"]
    assert CliRunner().invoke(cli, [*args, str(base / "run")]).exit_code == 0
    ppo = MANIFEST.replace("DQN, batch_size: 16", "PPO, learn_step: 32, batch_size: 16")
    (base / "ppo.yaml").write_text(ppo, encoding="utf-8")
    assert CliRunner().invoke(cli, ["train", str(base / "ppo.yaml"), *args[2:],
                                    str(base / "ppo")]).exit_code == 0  # fmt: skip
    return base


@pytest.fixture
def copy(finished, tmp_path):
    def make(name: str = "run") -> Path:
        return Path(shutil.copytree(finished / name, tmp_path / name))

    return make


def test_a_folder_that_holds_a_run_is_refused_unless_overwrite(run, finished, copy) -> None:
    target = copy()
    before = (target / "metrics.jsonl").read_text()
    refused = run("train", str(finished / "m.yaml"), "--quiet", "--run-dir", str(target))
    assert refused.exit_code == 2
    assert "already holds a run" in refused.output and "--overwrite" in refused.output
    assert (target / "metrics.jsonl").read_text() == before
    replaced = run("train", str(finished / "m.yaml"), "--quiet", "--device", "cpu", "--run-dir",
                   str(target), "--overwrite")  # fmt: skip
    assert replaced.exit_code == 0, replaced.output
    assert _generations(target) == [1, 2, 3]
    assert len((target / "command.txt").read_text().splitlines()) == 1


def test_a_non_empty_folder_that_is_no_run_is_never_touched(run, finished, tmp_path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    for extra in ((), ("--overwrite",)):
        result = run("train", str(finished / "m.yaml"), "--run-dir", str(tmp_path / "mine"),
                     *extra)  # fmt: skip
        assert result.exit_code == 2 and "holds no run" in result.output
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


_HOLD_LOCK = """
import sys, time
from pathlib import Path
from agile_cli.training import run_lock
run_lock.acquire(Path(sys.argv[1]))
print("holding", flush=True)
time.sleep(600)
"""


@pytest.fixture
def holder():
    """Start a process that takes a folder's lock as a training run does, and holds it."""
    processes: list[subprocess.Popen[str]] = []

    def start(folder: Path) -> subprocess.Popen[str]:
        process = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(folder)],
                                   stdout=subprocess.PIPE, text=True)  # fmt: skip
        processes.append(process)
        assert process.stdout is not None and process.stdout.readline() == "holding\n"
        return process

    yield start
    for process in processes:
        process.kill()
        process.wait()


def test_a_folder_in_training_is_never_overwritten_nor_resumed_twice(run, finished, copy,
                                                                     holder) -> None:  # fmt: skip
    target = copy()
    live = holder(target)
    files = sorted(path.name for path in target.rglob("*"))
    for args in (("train", str(finished / "m.yaml"), "--run-dir", str(target), "--overwrite"),
                 ("train", "--resume", str(target))):  # fmt: skip
        refused = run(*args, "--quiet", "--device", "cpu")
        assert refused.exit_code == 2, refused.output
        assert f"{target} is in use: agile (pid {live.pid} on " in refused.output
        assert f"kill {live.pid}" in refused.output
    assert sorted(path.name for path in target.rglob("*")) == files


def test_the_lock_of_a_killed_run_is_taken_over(run, finished, copy, holder) -> None:
    target = copy()
    (target / "manifest.yaml").write_text(
        (target / "manifest.yaml").read_text().replace("max_steps: 192", "max_steps: 256")
    )
    dead = holder(target)
    dead.kill()  # as kill -9 would: the lock file stays, naming a process that is gone
    dead.wait()
    assert str(dead.pid) in (target / ".agile.lock").read_text()
    resumed = run("train", "--resume", str(target), "--quiet", "--device", "cpu")
    assert resumed.exit_code == 0, resumed.output
    assert _generations(target) == [1, 2, 3, 4]


@pytest.fixture
def read_only(monkeypatch, tmp_path):
    """A folder that behaves as if on a read-only file system, as agile's checks see it."""
    import os

    folder = tmp_path / "ro"
    folder.mkdir()
    real_access, real_statvfs = os.access, os.statvfs

    def inside(path) -> bool:
        return Path(path).resolve().is_relative_to(folder.resolve())

    def access(path, mode: int) -> bool:
        return not (mode & os.W_OK and inside(path)) and real_access(path, mode)

    monkeypatch.setattr(os, "access", access)

    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(os, "statvfs", lambda p: ReadOnly() if inside(p) else real_statvfs(p))
    return folder


def test_read_only_places_are_refused_before_any_work(run, finished, read_only) -> None:
    stored = Path(shutil.copytree(finished / "run", read_only / "run"))
    commands = [
        ("train", str(finished / "m.yaml"), "--run-dir", str(read_only / "new")),
        ("train", "--resume", str(stored)),
        ("export", str(stored), "--format", "torchscript"),
        ("evaluate", str(stored), "--video", str(read_only / "elite.mp4")),
    ]
    for command in commands:
        refused = run(*command)
        assert refused.exit_code == 2, refused.output
        assert "is on a read-only file system" in refused.output
        assert "building" not in refused.output
    assert sorted(p.name for p in stored.iterdir()) == sorted(
        p.name for p in (finished / "run").iterdir()
    )


def test_a_full_disk_ends_the_run_with_a_sentence(run, finished, tmp_path, monkeypatch) -> None:
    def full(self, record) -> None:
        raise OSError(28, "No space left on device", str(self.metrics))

    monkeypatch.setattr(RunFolder, "append_metrics", full)
    ended = run("train", str(finished / "m.yaml"), "--quiet", "--device", "cpu", "--run-dir",
                str(tmp_path / "run"))  # fmt: skip
    assert ended.exit_code == 1
    assert f"error: {tmp_path / 'run' / 'metrics.jsonl'}: No space left on device (free some" in (
        ended.output
    )
    assert "Traceback" not in ended.output


def test_runs_started_at_once_get_distinct_folders(monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run_folder.time, "strftime", lambda _: "20261201-120000")
    manifest = tiny_manifest("DQN")
    start, made, errors = threading.Barrier(8), [], []

    def create() -> None:
        start.wait()
        try:
            made.append(RunFolder.create(manifest).path)
        except Exception as exc:  # collected: the assertion below shows it
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(set(made)) == 8
    assert all(len((p / "command.txt").read_text().splitlines()) == 1 for p in made)


def _interrupted(tmp_path: Path, members_trained: int, **options: object) -> Path:
    manifest = tiny_manifest("DQN", training={"max_steps": 192, "evo_steps": 64, "pop_size": 2},
                             mutation={}, tournament_selection={})  # fmt: skip
    options = LocalRunOptions(device="cpu", run_dir=tmp_path / "run", **options)
    loop = EvolutionLoop(manifest, installed_host().registry, options, LogReporter())
    interrupt_after(loop, members_trained=members_trained)
    assert loop.run().interrupted
    return tmp_path / "run"


def _resume(run_dir: Path):
    return resume_local(
        run_dir, installed_host().registry, LocalRunOptions(device="cpu"), verbose=False
    )


def test_resume_keeps_one_record_per_generation(tmp_path) -> None:
    run_dir = _interrupted(tmp_path, members_trained=2)  # Ctrl-C as generation 2 starts
    first = (run_dir / "metrics.jsonl").read_text().splitlines()
    # As a crash between writing a generation's metrics and its checkpoint would leave:
    stale = {**_strict(first[0]), "generation": 2, "best_fitness": -12345.0}
    with (run_dir / "metrics.jsonl").open("a") as stream:
        stream.write(json.dumps(stale) + "\n" + '{"generation": 3, "torn')
    result = _resume(run_dir)
    assert result.summary["generations"] == 3
    assert _generations(run_dir) == [1, 2, 3]
    records = [_strict(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[0] == _strict(first[0])
    assert all(record["best_fitness"] != -12345.0 for record in records)


def test_resume_says_which_generations_lost_their_record(run, copy) -> None:
    target = copy()
    manifest = target / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("max_steps: 192", "max_steps: 256"))
    lines = (target / "metrics.jsonl").read_text().splitlines()
    lines[1] = lines[1][: len(lines[1]) // 2]  # generation 2's line, cut short in the middle
    (target / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    resumed = run("train", "--resume", str(target), "--quiet", "--device", "cpu")
    assert resumed.exit_code == 0, resumed.output
    assert "metrics.jsonl holds no record of generation 2 (" in resumed.output
    assert "metrics.jsonl line 2: is not JSON" in resumed.output
    assert _generations(target) == [1, 3, 4]


def test_resume_keeps_the_options_that_shape_the_runs_checkpoints(tmp_path) -> None:
    run_dir = _interrupted(tmp_path, 2, checkpoint_buffer=True, checkpoint_steps=64)
    assert checkpoint.load(run_dir / "checkpoints" / "latest.pt")["buffer"] is not None
    _resume(run_dir)  # no flags: the run's own options hold
    latest = checkpoint.load(run_dir / "checkpoints" / "latest.pt")
    assert latest["buffer"] is not None and latest["run_options"]["checkpoint_steps"] == 64
    snapshots = sorted(path.name for path in (run_dir / "checkpoints").glob("step_*.pt"))
    assert snapshots == ["step_128.pt", "step_192.pt", "step_64.pt"]


def test_resume_says_which_run_options_it_sets_anew(tmp_path, capsys) -> None:
    run_dir = _interrupted(tmp_path, 2, checkpoint_steps=64)
    options = LocalRunOptions(device="cpu", checkpoint_buffer=True, checkpoint_steps=128)
    resume_local(run_dir, installed_host().registry, options, verbose=False)
    said = capsys.readouterr().out
    assert "resuming with --checkpoint-buffer (the run started without it)" in said
    assert "resuming with --checkpoint-steps 128 (the run started with 64)" in said
    assert checkpoint.load(run_dir / "checkpoints" / "latest.pt")["buffer"] is not None


def test_a_target_raised_on_resume_is_not_reported_as_reached(tmp_path, run) -> None:
    manifest = MANIFEST.replace("pop_size: 2}", "pop_size: 2, target_score: 5}").replace(
        "max_steps: 192", "max_steps: 320"
    )
    (tmp_path / "m.yaml").write_text(manifest, encoding="utf-8")
    args = ["--quiet", "--device", "cpu"]
    assert (
        run("train", str(tmp_path / "m.yaml"), *args, "--run-dir", str(tmp_path / "run")).exit_code
        == 0
    )
    summary = _strict((tmp_path / "run" / "summary.json").read_text())
    assert summary["target_reached"] and summary["stopped_early"]  # CartPole scores 8 or more
    saved = tmp_path / "run" / "manifest.yaml"
    saved.write_text(saved.read_text().replace("target_score: 5", "target_score: 501"))
    resumed = run("train", "--resume", str(tmp_path / "run"), *args)
    assert resumed.exit_code == 0, resumed.output
    summary = _strict((tmp_path / "run" / "summary.json").read_text())
    assert summary["target_score"] == 501 and not summary["target_reached"]
    assert summary["target_reached_at"] is None and "reached in" not in resumed.output


def test_resume_removes_the_temporary_files_of_interrupted_writes(tmp_path) -> None:
    run_dir = _interrupted(tmp_path, members_trained=2)
    stale = [run_dir / "checkpoints" / ".latest.pt.a1b2c3.tmp", run_dir / "checkpoints" /
             ".latest.pt.x9y8z7", run_dir / ".summary.json.tmp"]  # fmt: skip
    for path in stale:
        path.write_bytes(b"half a checkpoint")
    _resume(run_dir)
    assert not any(path.exists() for path in stale)


def test_ctrl_c_before_the_first_generation_ends(tmp_path, capsys) -> None:
    run_dir = _interrupted(tmp_path, members_trained=1)
    out = capsys.readouterr().out
    assert "-inf" not in out and "inf steps" not in out
    assert "none yet (no generation finished)" in out
    summary = _strict((run_dir / "summary.json").read_text())
    assert summary["best_fitness"] is None and summary["best_member"] is None
    assert summary["global_steps"] == 0 and summary["generations"] == 0
    assert summary["steps_per_second"] is None
    resumed = _resume(run_dir)
    assert resumed.summary["generations"] == 3
    assert resumed.summary["steps_per_member"] == 192
    assert resumed.summary["global_steps"] == 2 * 192
    assert _generations(run_dir) == [1, 2, 3]


def test_a_start_that_failed_leaves_nothing_to_step_over(run, finished, tmp_path, monkeypatch):
    from agile_cli.errors import TrainingError
    from agile_cli.training import loggers

    def no_login(*args: object) -> None:
        raise TrainingError("Weights & Biases could not start: no API key")

    monkeypatch.setattr(loggers.WandbSink, "__init__", no_login)
    target, args = tmp_path / "run", ("--quiet", "--device", "cpu")
    failed = run("train", str(finished / "m.yaml"), *args, "--run-dir", str(target), "--wb")
    assert failed.exit_code == 1 and "no API key" in failed.output
    assert not target.exists()
    # A start killed during set-up leaves agile's mark, its manifest and an empty checkpoints
    # folder:
    (target / "checkpoints").mkdir(parents=True)
    (target / run_folder.MARK).write_text('{"agile": "0.1.0"}\n')
    (target / "manifest.yaml").write_text(MANIFEST)
    (target / "command.txt").write_text("agile train m.yaml\n")
    retried = run("train", str(finished / "m.yaml"), *args, "--run-dir", str(target))
    assert retried.exit_code == 0, retried.output
    assert _generations(target) == [1, 2, 3]


def test_a_run_that_died_before_its_first_checkpoint_says_so(run, copy) -> None:
    target = copy()
    (target / "checkpoints" / "latest.pt").unlink()
    result = run("train", "--resume", str(target))
    assert result.exit_code == 1
    assert "no generation of" in result.output and "finished" in result.output
    assert "--overwrite" in result.output


def test_the_way_to_start_again_keeps_the_runs_own_options(run, copy) -> None:
    target = copy()
    (target / "checkpoints" / "latest.pt").unlink()
    (target / "command.txt").write_text("agile train m.yaml --seed 7 --checkpoint-buffer\n"
                                        "agile train --resume run\n")  # fmt: skip
    said = " ".join(run("train", "--resume", str(target)).output.split())
    assert (
        f"start it again: agile train m.yaml --seed 7 --checkpoint-buffer --run-dir {target}"
        in said
    )


@pytest.mark.parametrize(
    ("source", "message"),
    [("ppo/checkpoints/latest.pt", "algorithm 'PPO', the run's is 'DQN'"),
     ("run/elite.pt", "holds one member (an elite), not a population checkpoint")],
)  # fmt: skip
def test_resume_refuses_a_checkpoint_of_another_run(run, finished, copy, source, message):
    target = copy()
    shutil.copy(finished / source, target / "checkpoints" / "latest.pt")
    _raise_max_steps(target)
    result = run("train", "--resume", str(target))
    assert result.exit_code == 1, result.output
    assert message in result.output and "Traceback" not in result.output


def test_resume_refuses_a_checkpoint_of_another_environment(run, copy) -> None:
    target = copy()
    manifest = yaml.safe_load((target / "manifest.yaml").read_text())
    manifest["environment"]["name"] = "Acrobot-v1"
    (target / "manifest.yaml").write_text(yaml.safe_dump(manifest))
    result = run("train", "--resume", str(target))
    assert result.exit_code == 1
    assert "environment 'CartPole-v1', the run's is 'Acrobot-v1'" in result.output


def test_resume_refuses_a_checkpoint_of_other_spaces(run, copy) -> None:
    target = copy()
    latest = target / "checkpoints" / "latest.pt"
    state = checkpoint.load(latest)
    state["spaces"]["observation_space"] = "Box(-1.0, 1.0, (6,), float32)"
    checkpoint.save_atomically(state, latest)
    _raise_max_steps(target)
    result = run("train", "--resume", str(target))
    assert result.exit_code == 1
    assert "observation_space Box(-1.0, 1.0, (6,), float32), the environment's is Box(" in (
        result.output
    )


def _raise_max_steps(run_dir: Path, steps: int = 256) -> None:
    manifest = yaml.safe_load((run_dir / "manifest.yaml").read_text())
    manifest["training"]["max_steps"] = steps
    (run_dir / "manifest.yaml").write_text(yaml.safe_dump(manifest))


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [("training", "pop_size", 3), ("network", "latent_dim", 16), ("algorithm", "lr", 0.5)],
)
def test_resume_refuses_edits_it_would_ignore(run, copy, section, key, value) -> None:
    target = copy()
    manifest = yaml.safe_load((target / "manifest.yaml").read_text())
    manifest[section][key] = value
    (target / "manifest.yaml").write_text(yaml.safe_dump(manifest))
    result = run("train", "--resume", str(target))
    assert result.exit_code == 2, result.output
    assert f"{section}.{key}" in result.output and "edited since the checkpoint" in result.output


def test_a_finished_run_resumes_only_with_a_larger_budget(run, copy) -> None:
    target = copy()
    done = run("train", "--resume", str(target))
    assert done.exit_code == 2 and "has finished" in done.output
    assert "training.max_steps" in done.output
    _raise_max_steps(target)
    more = run("train", "--resume", str(target), "--quiet", "--device", "cpu")
    assert more.exit_code == 0, more.output
    assert "resuming with training.max_steps 256 (was 192)" in more.output
    assert _generations(target) == [1, 2, 3, 4]


def test_resume_refuses_flags_of_a_new_run(run, copy) -> None:
    result = run("train", "--resume", str(copy()), "--seed", "3")
    assert result.exit_code == 2 and "--seed: not with --resume" in result.output


def test_train_without_a_manifest_says_what_is_missing(run) -> None:
    result = run("train")
    assert result.exit_code == 2
    assert "nothing to train: give a MANIFEST, or --resume RUN_DIR" in result.output


def test_dataset_collect_never_replaces_a_file_unasked(run, finished, tmp_path) -> None:
    out = tmp_path / "existing.txt"
    out.write_text("precious")
    args = ["dataset", "collect", str(finished / "run"), "--episodes", "1", "--out", str(out)]
    refused = run(*args)
    assert refused.exit_code == 2 and "--overwrite" in refused.output
    assert out.read_text() == "precious"
    replaced = run(*args, "--overwrite", "--device", "cpu")
    assert replaced.exit_code == 0, replaced.output
    assert out.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_run_that_ran_out_of_data_says_so_on_resume(tmp_path) -> None:
    from agile_cli.training.trainer import _finished

    manifest = tiny_manifest("DQN")  # no target_score
    state = {"state": {"stopped_early": True, "steps_per_member": 64},
             "manifest": manifest.to_dict()}  # fmt: skip
    finished = _finished(state, manifest, tmp_path)
    assert finished is not None and "trained on all the data it may" in str(finished)


def test_every_start_and_resume_records_what_the_run_was_trained_with(tmp_path) -> None:
    import torch

    run_dir = _interrupted(tmp_path, members_trained=2)
    _resume(run_dir)
    sessions = json.loads((run_dir / "provenance.json").read_text())["sessions"]
    assert len(sessions) == 2  # the start and the resume
    first = sessions[0]
    assert first["device"] == "cpu" and first["cpus"] >= 1 and first["torch_threads"] >= 1
    assert first["packages"]["torch"] == torch.__version__
    assert first["packages"]["agile-cli"] and first["python"].count(".") == 2
    assert first["plugins"]["dqn"].startswith("agile-cli==")
    assert first["seed"] == sessions[1]["seed"]
    assert first["environment_package"]["distribution"] == "gymnasium"


def test_a_provenance_file_that_is_not_ours_is_started_anew(tmp_path) -> None:
    folder = RunFolder(tmp_path)
    folder.provenance.write_text('{"sessions": "not a list"')
    folder.record_provenance({"command": "agile train m.yaml"})
    folder.record_provenance({"command": "agile train --resume ."})
    sessions = json.loads(folder.provenance.read_text())["sessions"]
    assert [s["command"] for s in sessions] == ["agile train m.yaml", "agile train --resume ."]


def test_the_resolved_manifest_stays_within_what_agile_reads_back(tmp_path) -> None:
    """Text a manifest reads is written back as it was (not as escapes several times longer),
    so a run folder's manifest.yaml is never larger than the manifests agile reads."""
    from agile_cli.loader import MAX_BYTES, load_file
    from agile_cli.manifest import TrainingManifest

    data = yaml.safe_load(MANIFEST.replace("pop_size: 2", "pop_size: 1"))
    del data["mutation"], data["tournament_selection"]
    data["recipe"] = {"source": "\N{GRINNING FACE}" * 200_000, "schedule": [{"generation": 1}]}
    manifest = TrainingManifest.get_validated(data, registry=installed_host().registry)
    folder = RunFolder.create(manifest, tmp_path / "run")
    folder.unlock()
    assert folder.manifest.stat().st_size <= MAX_BYTES
    assert load_file(folder.manifest)["recipe"]["source"] == data["recipe"]["source"]
