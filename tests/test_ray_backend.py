"""The ray backend on a real Ray cluster of two nodes on loopback (127.0.0.2 and 127.0.0.3):
training across it, its errors, and (marked slow: minutes together, run with ``pytest -m
slow``) resuming between backends, shared experience, Ctrl-C, and faults: a worker killed,
stalled or over its timeout, a node lost, the asynchronous mode's recoveries."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

from agile_cli.training import checkpoint
from agile_ray.cluster import connected, plan

ray = pytest.importorskip("ray")

AGILE = [sys.executable, "-m", "agile_cli"]

#: Seconds a run may take to stop after Ctrl-C: about 2 on a quiet machine here, and up to 6
#: with four CPU-bound processes competing for its two cores.
STOP_SECONDS = 60

MANIFEST = {
    "algorithm": {"name": "DQN", "batch_size": 32, "learn_step": 4},
    "environment": {"name": "CartPole-v1", "num_envs": 2, "sync": True},
    "training": {"max_steps": 1_000, "evo_steps": 500, "pop_size": 4, "learning_delay": 100},
    "mutation": {"rand_seed": 3},
}


@pytest.fixture(scope="module")
def nodes() -> Iterator[Any]:
    """A Ray cluster of two nodes of 2 CPUs each, on loopback.

    Its workers run at the priority of the machine's other processes: at Ray's own (nice 15),
    four CPU-bound processes on two cores left them so little time that a run's first
    generation took over 4 minutes instead of 20 s.
    """
    folder = tempfile.mkdtemp(prefix="agile-ray-test-")  # short: Ray's socket paths are bounded
    names = ("RAY_TMPDIR", "RAY_AUTH_MODE", "RAY_worker_niceness")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(RAY_TMPDIR=folder, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0",
                      RAY_worker_niceness="0")  # fmt: skip
    from ray.cluster_utils import Cluster

    head = {"num_cpus": 2, "node_ip_address": "127.0.0.2", "include_dashboard": False}
    nodes = Cluster(initialize_head=True, head_node_args=head)
    nodes.tmpdir = folder  # type: ignore[attr-defined]  # its processes carry it: _training_worker
    nodes.add_node(num_cpus=2, node_ip_address="127.0.0.3")
    nodes.wait_for_nodes()
    try:
        yield nodes
    finally:
        nodes.shutdown()
        shutil.rmtree(folder, ignore_errors=True)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture
def cluster(nodes: Any) -> str:
    """The address of the two-node cluster's head."""
    return str(nodes.address)


def _manifest(tmp_path: Path, *, evolving: bool = False, **training: Any) -> Path:
    """:data:`MANIFEST` with ``training`` changed; ``evolving``: with tournament selection."""
    data = json.loads(json.dumps(MANIFEST))
    data["training"].update(training)
    if evolving:
        data["tournament_selection"] = {"tournament_size": 2, "elitism": True}
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _agile(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*AGILE, *map(str, args)], capture_output=True, text=True, timeout=300)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def _summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def _generations(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


# -- training across the cluster ------------------------------------------------------------------


def test_a_population_trains_across_both_nodes_from_python(cluster: str, tmp_path: Path) -> None:
    from agile_ray import RayTrainer

    trainer = RayTrainer.from_manifest(_manifest(tmp_path))
    result = trainer.train(address=cluster, run_dir=str(tmp_path / "run"), verbose=False)
    assert result.status == "completed" and result.run_dir == tmp_path / "run"
    summary = _summary(tmp_path / "run")
    assert summary["generations"] == 2 and summary["global_steps"] == 4 * 1_000
    assert result.population is not None and len(result.population) == 4
    assert result.fitnesses == [m.record.fitness[-1] for m in result.population]
    for member in result.population:  # trained remotely, loaded back into the driver's copy
        assert member.record.steps == 1_000
    assert (tmp_path / "run" / "checkpoints" / "latest.pt").is_file()
    assert (tmp_path / "run" / "elite.pt").is_file()
    first, second = (generation["ray"] for generation in _generations(tmp_path / "run"))
    assert first["bytes_sent"] > 0 and first["bytes_copied"] == 0  # every member, once
    # then the members stay in their workers: only copies of members another worker holds
    # move, and the driver fetches the elite and a checkpoint's states
    assert second["bytes_sent"] == 0 and second["bytes_copied"] < first["bytes_sent"]
    assert second["bytes_fetched"] > 0
    saved = checkpoint.load(tmp_path / "run" / "checkpoints" / "latest.pt")
    assert [m["index"] for m in saved["members"]] == [m.index for m in result.population]


@pytest.mark.slow
def test_a_worker_killed_mid_generation_costs_only_that_generation(
    nodes: Any, cluster: str, tmp_path: Path
) -> None:
    manifest = _manifest(tmp_path, max_steps=4_000, evo_steps=2_000)
    run_dir = tmp_path / "run"
    command = [*AGILE, "train", str(manifest), "--backend", "ray", "--address", cluster,
               "--run-dir", str(run_dir), "--quiet", "--members-per-worker", "1"]  # fmt: skip
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        victim = _training_worker(driver, time.monotonic() + 240, nodes)
        os.kill(victim, signal.SIGKILL)
        output, _ = driver.communicate(timeout=300)
    finally:
        driver.kill()
    assert driver.returncode == 0, output
    assert "died" in output and "train this generation again" in output
    summary = _summary(run_dir)
    assert summary["generations"] == 2 and summary["global_steps"] == 4 * 4_000
    assert all(len(g["members"]) == 4 for g in _generations(run_dir))


@pytest.mark.slow
def test_with_fewer_checkpoints_a_lost_worker_sends_the_run_back_to_the_last_one(
    nodes: Any, cluster: str, tmp_path: Path
) -> None:
    """Killed in the second generation, a worker takes the members it held with it, and no
    checkpoint since the start holds them: the run trains both generations again."""
    manifest = _manifest(tmp_path, max_steps=4_000, evo_steps=2_000)
    run_dir = tmp_path / "run"
    driver = _popen("train", manifest, "--backend", "ray", "--address", cluster,
                    "--run-dir", run_dir, "--quiet", "--members-per-worker", "1",
                    "--checkpoint-every", "5")  # fmt: skip
    output = _kill_a_worker_after_the_first_generation(driver, run_dir, nodes)
    assert driver.returncode == 0, output
    assert "going back to the checkpoint of generation 0" in output
    assert [g["generation"] for g in _generations(run_dir)] == [1, 2]
    summary = _summary(run_dir)
    assert summary["generations"] == 2 and summary["global_steps"] == 4 * 4_000


@pytest.mark.slow
def test_a_worker_over_member_timeout_is_restarted_then_the_run_stops_naming_the_bound(
    cluster: str, tmp_path: Path
) -> None:
    """(The bound is checked about every second and a half: these calls take longer.)"""
    manifest = _manifest(tmp_path, max_steps=4_000, evo_steps=2_000)
    flags = ["--members-per-worker", "2", "--member-timeout", "0.2", "--run-dir", tmp_path / "r"]
    result = _agile("train", manifest, "--backend", "ray", "--address", cluster, *flags,
                    check=False)  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    said = " ".join((result.stdout + result.stderr).split())  # lines wrap at the terminal's width
    assert "ran over --member-timeout 0.2 s: its members train this generation again" in said
    assert "6 times in one generation" in said and "raise --member-timeout" in said
    assert "Traceback" not in result.stderr


def _first_generation_written(driver: subprocess.Popen[str], run_dir: Path) -> float:
    """Wait until the run has written its first generation's metrics; the deadline (240 s from
    now) for what the test waits for next. Fails with the driver's output if it ends first."""
    deadline = time.monotonic() + 240
    while not (run_dir / "metrics.jsonl").is_file():
        if driver.poll() is not None or time.monotonic() > deadline:
            _fail(driver, "the first generation did not finish")
        time.sleep(0.2)
    return deadline


def _kill_a_worker_after_the_first_generation(
    driver: subprocess.Popen[str], run_dir: Path, nodes: Any
) -> str:
    """Once the run's first generation is written, ``kill -9`` a worker while it trains; the
    driver's output once it ends."""
    try:
        deadline = _first_generation_written(driver, run_dir)
        os.kill(_training_worker(driver, deadline, nodes), signal.SIGKILL)
        output, _ = driver.communicate(timeout=300)
    finally:
        driver.kill()
    return output


def _training_worker(driver: subprocess.Popen[str], deadline: float, nodes: Any) -> int:
    """The process id of a Ray worker of ``nodes`` in the middle of training its members (not
    one of another test's cluster, which the other pytest worker may be running); fails with
    the driver's output if the driver ends first or no worker trains before ``deadline``."""
    while time.monotonic() < deadline and driver.poll() is None:
        found = [pid for pid in subprocess.run(["pgrep", "-f", "ray::MemberWorker.train"],
                                               capture_output=True, text=True).stdout.split()
                 if _of_cluster(int(pid), nodes.tmpdir)]  # fmt: skip
        if found:
            time.sleep(0.5)  # well inside the generation
            return int(found[0])
        time.sleep(0.1)
    _fail(driver, "no Ray worker was seen training")


def _of_cluster(pid: int, folder: str) -> bool:
    """Whether process ``pid`` belongs to the test cluster whose Ray folder is ``folder``
    (its processes inherit RAY_TMPDIR from the fixture)."""
    try:
        environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # ended meanwhile
        return False
    return f"RAY_TMPDIR={folder}".encode() in environment


def _fail(driver: subprocess.Popen[str], what: str) -> NoReturn:
    """Stop the driver, and fail saying ``what`` and what the driver said."""
    driver.kill()
    output, _ = driver.communicate()
    raise AssertionError(f"{what}; the driver said:\n{output}")


@pytest.mark.slow
def test_runs_resume_with_the_other_backend(cluster: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    ray_flags = ["--backend", "ray", "--address", cluster]
    _agile("train", _manifest(tmp_path, max_steps=500), *ray_flags, "--run-dir", run_dir)
    for generation, flags in ((2, ["--backend", "local"]), (3, ray_flags)):
        saved = yaml.safe_load((run_dir / "manifest.yaml").read_text())
        saved["training"]["max_steps"] = 500 * generation
        (run_dir / "manifest.yaml").write_text(yaml.safe_dump(saved))
        _agile("train", "--resume", run_dir, *flags)
        summary = _summary(run_dir)
        assert summary["generations"] == generation
        assert summary["steps_per_member"] == 500 * generation
    assert len((run_dir / "command.txt").read_text().splitlines()) == 3
    evaluated = _agile("evaluate", run_dir, "--episodes", "1")
    assert "DQN member" in evaluated.stdout and "mean return" in evaluated.stdout


@pytest.mark.slow
def test_async_a_slowed_worker_holds_no_one_up_and_the_run_resumes(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --async, the first worker made 2 times slower (as on a slow node): the second one
    trains its rounds without waiting, its selections leave the first one's members out once
    they are more rounds behind than --max-staleness 0 allows; a resume continues each slot,
    asynchronously as the run started."""
    monkeypatch.setenv("AGILE_RAY_SLOW_SLOT", "0:2")
    run_dir = tmp_path / "run"
    manifest = _manifest(tmp_path, max_steps=2_000, evolving=True)
    slowed = _agile("train", manifest, "--backend", "ray", "--address", cluster, "--run-dir",
                    run_dir, "--members-per-worker", "2", "--async", "--max-staleness", "0",
                    "--worker-timeout", "1", "--quiet")  # fmt: skip
    # its workers start, and the slow one sleeps, for longer than --worker-timeout: it says so
    assert "has trained nothing for" in slowed.stdout + slowed.stderr
    lines = _generations(run_dir)
    ahead = [line["async"]["rounds"] for line in lines]
    assert any(rounds[2] > rounds[0] for rounds in ahead), ahead  # slot 1 did not wait
    assert ahead[-1] == [4, 4, 4, 4]
    slow, fast = lines[-1]["async"]["slots"]
    assert fast["ended_at"] < slow["ended_at"] and fast["steps"] == slow["steps"] == 2 * 2_000
    assert sum(line["async"]["left_out"] for line in lines) > 0
    assert all(line["async"]["staleness_max"] == 0 for line in lines)
    summary = _summary(run_dir)
    assert summary["global_steps"] == 4 * 2_000 and summary["steps_per_member"] == 2_000
    saved = yaml.safe_load((run_dir / "manifest.yaml").read_text())
    saved["training"]["max_steps"] = 2_500
    (run_dir / "manifest.yaml").write_text(yaml.safe_dump(saved))
    monkeypatch.delenv("AGILE_RAY_SLOW_SLOT")
    _agile("train", "--resume", run_dir, "--backend", "ray", "--address", cluster)
    resumed = _generations(run_dir)[-1]  # asynchronous still: the run's own options are kept
    assert resumed["async"]["rounds"] == [5, 5, 5, 5] and resumed["async"]["max_staleness"] == 0
    assert _summary(run_dir)["global_steps"] == 4 * 2_500
    assert len(checkpoint.load(run_dir / "checkpoints" / "latest.pt")["members"]) == 4


@pytest.mark.slow
def test_async_a_killed_worker_trains_its_round_again_from_the_published_states(
    nodes: Any, cluster: str, tmp_path: Path
) -> None:
    manifest = _manifest(tmp_path, max_steps=4_000, evo_steps=2_000, evolving=True)
    run_dir = tmp_path / "run"
    driver = _popen("train", manifest, "--backend", "ray", "--address", cluster, "--async",
                    "--run-dir", run_dir, "--quiet", "--members-per-worker", "2")  # fmt: skip
    output = _kill_a_worker_after_the_first_generation(driver, run_dir, nodes)
    assert driver.returncode == 0, output
    assert "died" in output and "from their published states" in output
    assert "going back" not in output
    lines = _generations(run_dir)
    assert lines[-1]["async"]["rounds"] == [2, 2, 2, 2]
    assert sum(line["ray"]["worker_deaths"] for line in lines) >= 1
    assert _summary(run_dir)["global_steps"] == 4 * 4_000


@pytest.mark.slow
def test_shared_experience_reaches_every_worker_and_needs_a_replay_buffer(
    cluster: str, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    _agile("train", _manifest(tmp_path), "--backend", "ray", "--address", cluster, "--run-dir",
           run_dir, "--members-per-worker", "2", "--share-experience", "--quiet")  # fmt: skip
    first, second = (line["ray"] for line in _generations(run_dir))
    # a generation's rows reach the other worker's buffer before the next generation: two
    # workers of two members, 500 steps each, about 50 bytes a CartPole transition
    assert first["bytes_experience"] == 0
    assert 2 * 2 * 500 * 40 < second["bytes_experience"] < 2 * 2 * 500 * 80
    assert _summary(run_dir)["global_steps"] == 4 * 1_000
    data = {**MANIFEST, "algorithm": {"name": "PPO", "learn_step": 64}}
    (tmp_path / "ppo.yaml").write_text(yaml.safe_dump(data))
    refused = _agile("train", tmp_path / "ppo.yaml", "--backend", "ray", "--address", cluster,
                     "--share-experience", check=False)  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert "PPO keeps no replay buffer" in refused.stderr and "Traceback" not in refused.stderr


# -- errors and planning ----------------------------------------------------------------------


def test_an_unreachable_cluster_is_a_clear_error_naming_the_address(tmp_path: Path) -> None:
    started = time.monotonic()
    result = _agile("train", _manifest(tmp_path), "--backend", "ray", "--address",
                    "127.0.0.9:6399", check=False)  # fmt: skip
    assert result.returncode == 1
    assert "cannot reach the Ray cluster at 127.0.0.9:6399" in result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 60


def test_checkpoint_buffer_is_refused_with_the_ray_backend(tmp_path: Path) -> None:
    result = _agile("train", _manifest(tmp_path), "--backend", "ray", "--checkpoint-buffer",
                    check=False)  # fmt: skip
    assert result.returncode == 2 and "--checkpoint-buffer" in result.stderr


@pytest.mark.parametrize(
    ("population", "cpus", "options", "sizes", "reserved"),
    [
        (8, 2, {}, [4, 4], 1.0),  # the cores shared out: every worker runs at once
        (4, 16, {}, [1, 1, 1, 1], 1.0),  # at most one CPU per member by default
        (7, 2, {}, [4, 3], 1.0),
        (8, 2, {"members_per_worker": 1}, [1] * 8, 0.25),
        (8, 4, {"cpus_per_member": 2.0}, [1] * 8, 2.0),  # told: reserved, even if it waits
        (6, 4, {"cpus_per_member": 0.5, "members_per_worker": 3}, [3, 3], 1.5),
    ],
)
def test_the_plan_shares_the_cluster_out(
    population: int, cpus: int, options: dict[str, Any], sizes: list[int], reserved: float
) -> None:
    layout = plan(
        population,
        cpus,
        cpus_per_member=options.get("cpus_per_member"),
        gpus_per_member=0.0,
        members_per_worker=options.get("members_per_worker"),
    )
    assert layout.sizes == sizes and layout.cpus == reserved
    assert sum(layout.sizes) == population


def _popen(*args: str | Path) -> subprocess.Popen[str]:
    """``agile ARGS`` started, hearing Ctrl-C even when the tests run in a background job: its
    processes inherit SIGINT ignored, and Python keeps ignoring it (a driver trained on after
    the test's Ctrl-C). A signal this process catches is reset to the default in a child (no
    preexec_fn: forking a process that runs Ray's threads is not safe)."""
    command = [*AGILE, *map(str, args)]
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.slow
def test_ctrl_c_on_the_driver_keeps_the_last_generations_checkpoint(
    cluster: str, tmp_path: Path
) -> None:
    """Ctrl-C while the workers train a generation stops the run at once: the checkpoint of the
    generation before is kept, and nothing trained after Ctrl-C is recorded."""
    manifest = _manifest(tmp_path, max_steps=100_000, evo_steps=500)
    run_dir = tmp_path / "run"
    driver = _popen("train", manifest, "--backend", "ray", "--address", cluster,
                    "--run-dir", run_dir, "--quiet")  # fmt: skip
    try:
        kept = _checkpointed(driver, run_dir, deadline=time.monotonic() + 300)
        driver.send_signal(signal.SIGINT)  # the next generation trains (a second or more)
        output = _stopped(driver, within=STOP_SECONDS)
    finally:
        driver.kill()
    assert driver.returncode == 130, output
    said = f"interrupted during generation {kept + 1}: the checkpoint of generation {kept} is kept"
    assert said in output and "Traceback" not in output
    assert output.count("agile train --resume") == 1, output  # in the summary
    summary = _summary(run_dir)
    assert summary["interrupted"] and summary["generations"] == kept
    assert len(_generations(run_dir)) == kept
    assert _checkpoint_generation(run_dir) == kept


def _checkpoint_generation(run_dir: Path) -> int:
    state = checkpoint.load(run_dir / "checkpoints" / "latest.pt", kind=checkpoint.POPULATION)
    return int(state["state"]["generation"])


def _checkpointed(driver: subprocess.Popen[str], run_dir: Path, deadline: float) -> int:
    """The generation of the run's checkpoint, once it holds a trained one (the next one then
    trains); fails with the driver's output if the driver ends first or no generation is
    checkpointed before ``deadline``."""
    while time.monotonic() < deadline and driver.poll() is None:
        if (run_dir / "checkpoints" / "latest.pt").is_file():
            generation = _checkpoint_generation(run_dir)
            if generation >= 1:
                return generation
        time.sleep(0.25)
    _fail(driver, "no generation was checkpointed")


def _stopped(driver: subprocess.Popen[str], within: float) -> str:
    """What the driver said, once it ended; fails if it still runs ``within`` seconds on."""
    try:
        return driver.communicate(timeout=within)[0]
    except subprocess.TimeoutExpired:
        _fail(driver, f"the driver still ran {within:g} s after Ctrl-C")


def test_ctrl_c_while_ray_starts_waits_for_it_then_stops(
    cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt inside ray.init leaves Ray half started (processes left running, or
    a crash at exit): Ctrl-C then waits for Ray to start, and Ray is shut down again."""
    started: list[bool] = []
    start = ray.init

    def pressed(**options: Any) -> Any:
        os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C as Ray starts
        context = start(**options)
        started.append(ray.is_initialized())
        return context

    monkeypatch.setattr(ray, "init", pressed)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in `agile train`
    try:
        with pytest.raises(KeyboardInterrupt), connected(cluster):
            pytest.fail("the run went on after Ctrl-C")
    finally:
        signal.signal(signal.SIGINT, before)
    assert started == [True] and not ray.is_initialized()


@pytest.mark.slow
def test_a_node_lost_mid_generation_waits_for_room_then_finishes(
    nodes: Any, tmp_path: Path
) -> None:
    """The second node dies while its workers train; the head is full, so their restarts
    wait (the run says so) until a new node joins."""
    manifest = _manifest(tmp_path, max_steps=4_000, evo_steps=2_000)
    run_dir = tmp_path / "run"
    driver = _popen("train", manifest, "--backend", "ray", "--address", nodes.address,
                    "--run-dir", run_dir, "--quiet", "--members-per-worker", "1",
                    "--worker-timeout", "3")  # fmt: skip
    try:
        _training_worker(driver, time.monotonic() + 240, nodes)
        second = next(node for node in nodes.list_all_nodes() if node is not nodes.head_node)
        nodes.remove_node(second)
        time.sleep(8)  # the restarts find no room: the run waits and says so
        nodes.add_node(num_cpus=2, node_ip_address="127.0.0.3")
        output, _ = driver.communicate(timeout=300)
    finally:
        driver.kill()
    assert driver.returncode == 0, output
    died = output.index("train this generation again")
    assert "waiting for it" in output[died:]
    summary = _summary(run_dir)
    assert summary["generations"] == 2 and summary["global_steps"] == 4 * 4_000


@pytest.mark.slow
def test_async_a_node_lost_with_published_states_sends_the_run_back(
    nodes: Any, tmp_path: Path
) -> None:
    """With --async, members' states live, once published, in their worker's node (states
    over Ray's 100 KB inline limit: 128-wide networks). The second node dies after the first
    generation: its worker's restart needs those states. Where Ray finds a copy of them (on the
    driver's node, fetched for a checkpoint or a copy), the worker trains its round again from
    them; where none is left, the run goes back to its last checkpoint. Either way it finishes
    whole, its metrics one line per generation."""
    data = json.loads(json.dumps(MANIFEST))
    data["training"].update(max_steps=2_000, evo_steps=500)
    wide = {"hidden_size": [128]}
    data["network"] = {"latent_dim": 128, "encoder_config": wide, "head_config": wide}
    data["tournament_selection"] = {"tournament_size": 2, "elitism": True}
    (tmp_path / "wide.yaml").write_text(yaml.safe_dump(data))
    run_dir = tmp_path / "run"
    driver = _popen("train", tmp_path / "wide.yaml", "--backend", "ray", "--address",
                    nodes.address, "--run-dir", run_dir, "--quiet", "--async",
                    "--members-per-worker", "2", "--worker-timeout", "3")  # fmt: skip
    try:
        _first_generation_written(driver, run_dir)
        second = next(node for node in nodes.list_all_nodes() if node is not nodes.head_node)
        nodes.remove_node(second)
        time.sleep(5)  # its worker's restart waits for room
        nodes.add_node(num_cpus=2, node_ip_address="127.0.0.3")
        output, _ = driver.communicate(timeout=300)
    finally:
        driver.kill()
    assert driver.returncode == 0, output
    assert "died" in output
    went_back = "lost: going back to the checkpoint of generation" in output
    assert went_back or "from their published states" in output, output
    lines = _generations(run_dir)
    assert [line["generation"] for line in lines] == list(range(1, len(lines) + 1))
    assert lines[-1]["async"]["rounds"] == [4, 4, 4, 4]
    assert _summary(run_dir)["global_steps"] == 4 * 2_000


def test_a_worker_that_cannot_start_says_why(cluster: str, tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("the workers could train on this machine's GPU")
    result = _agile("train", _manifest(tmp_path), "--backend", "ray", "--address", cluster,
                    "--device", "cuda", "--run-dir", tmp_path / "run", check=False)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "the Ray worker of member" in result.stderr and "could not start" in result.stderr
    assert "no CUDA device is available" in result.stderr and "Traceback" not in result.stderr
