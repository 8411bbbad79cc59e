"""Local training end to end with tiny budgets: every algorithm, run folders, resume, CLI."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from agile_cli import LocalTrainer, TrainingError
from agile_cli.models.run_options import LocalRunOptions
from agile_cli.testing import (
    TINY_SECTIONS,
    check_conformance,
    installed_host,
    interrupt_after,
    tiny_manifest,
    tiny_population,
)
from agile_cli.training import checkpoint
from agile_cli.training.loop import EvolutionLoop
from agile_cli.training.progress import LogReporter
from tests.envs.toy_offline import toy_offline_environment

EVOLVING = {
    "mutation": {"rl_hp_selection": {"lr": {"min": 1e-4, "max": 1e-2}}},
    "tournament_selection": {"tournament_size": 2},
}
LOCAL_FAMILIES = (
    "off_policy", "on_policy", "multi_agent_off_policy",
    "multi_agent_on_policy", "offline", "bandit",
)  # fmt: skip
TRAINABLE = sorted(
    name
    for name, entry in installed_host().registry.algorithms.items()
    if entry.family in LOCAL_FAMILIES
)
# Toy environments in order of preference: each algorithm trains on the first whose action
# space it accepts (CartPole: Discrete actions; Pendulum: Box actions).
TOY_ENVIRONMENTS = (
    {"name": "CartPole-v1", "num_envs": 2, "sync": True},
    {"name": "Pendulum-v1", "num_envs": 2, "sync": True},
)
# Teams train on a toy PettingZoo environment whose two agents differ in every space.
TOY_TEAM = {"name": "toy", "entrypoint": "tests.envs.toy_parallel:ToyParallel", "num_envs": 2,
            "sync": True}  # fmt: skip
# Bandits play a small labelled table: three classes of three-number contexts.
TOY_BANDIT = {"name": "toy", "features": "toy_bandit_features.csv",
              "targets": "toy_bandit_targets.csv",
              "path": str(Path(__file__).parent / "envs")}  # fmt: skip


@functools.cache
def _toy_environment(algorithm: str) -> dict:
    """The first toy environment ``algorithm`` accepts; an algorithm refuses an action space
    by raising NotImplementedError in build(), which reaches us as a TrainingError."""
    registry = installed_host().registry
    family = registry.algorithms[algorithm].family
    if registry.paradigm(family).multi_agent:
        return TOY_TEAM
    if family == "offline":
        return toy_offline_environment()  # CartPole with a random dataset
    if family == "bandit":
        return TOY_BANDIT
    for environment in TOY_ENVIRONMENTS:
        try:
            tiny_population(tiny_manifest(algorithm, environment=environment), size=1)
        except TrainingError:
            continue
        return environment
    pytest.fail(f"{algorithm} accepts none of the toy environments")


def _evolving(algorithm: str) -> dict:
    """EVOLVING, mutating the algorithm's learning rates (lr, or lr_actor and lr_critic)."""
    spec = installed_host().registry.algorithms[algorithm].spec
    rates = {name: {"min": 1e-4, "max": 1e-2}
             for name in spec.mutable_hyperparameters if name.startswith("lr")}  # fmt: skip
    return {**EVOLVING, "mutation": {"rl_hp_selection": rates}}


def _loop(manifest, tmp_path, **options) -> EvolutionLoop:
    run = LocalRunOptions(device="cpu", run_dir=tmp_path / "run", **options)
    return EvolutionLoop(manifest, installed_host().registry, run, LogReporter())


@pytest.mark.parametrize("algorithm", TRAINABLE)
def test_every_registered_algorithm_conforms(algorithm, tmp_path) -> None:
    # evaluations cut at 32 steps (a bandit's otherwise play 500 steps per member), and a
    # bandit's generations of 32 steps: each of its steps takes a gradient per arm
    training = {**TINY_SECTIONS["training"], "eval_steps": 32}
    if installed_host().registry.algorithms[algorithm].family == "bandit":
        training.update(max_steps=64, evo_steps=32)
    check_conformance(algorithm, tmp_path, environment=_toy_environment(algorithm),
                      training=training)  # fmt: skip


@pytest.mark.parametrize("algorithm", TRAINABLE)
def test_every_registered_algorithm_trains_and_evolves(algorithm, tmp_path) -> None:
    manifest = tiny_manifest(
        algorithm, environment=_toy_environment(algorithm), **_evolving(algorithm)
    )
    trainer = LocalTrainer.from_manifest(manifest, device="cpu")
    population, fitnesses = trainer.train(verbose=False, run_dir=tmp_path / "run")
    assert len(population) == len(fitnesses) == 2
    assert all(np.isfinite(fitnesses))
    assert [m.record.fitness[-1] for m in population] == fitnesses
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["generations"] == 2
    assert summary["global_steps"] == 2 * 128


@pytest.mark.parametrize(
    "replay",
    [{"n_step_buffer": True}, {"per_buffer": True}, {"per_buffer": True, "n_step_buffer": True}],
)
def test_dqn_learns_from_every_buffer_kind(replay, tmp_path) -> None:
    manifest = tiny_manifest("DQN", replay_buffer={"max_size": 1000, **replay})
    trainer = LocalTrainer.from_manifest(manifest, device="cpu")
    population, fitnesses = trainer.train(verbose=False, run_dir=tmp_path / "run")
    assert all(np.isfinite(fitnesses))
    assert all(m.context.replay_buffer.n_step_buffer == replay.get("n_step_buffer", False)
               for m in population)  # fmt: skip


def test_run_folder_contents(tmp_path) -> None:
    manifest = tiny_manifest("DQN", **EVOLVING)
    _loop(manifest, tmp_path).run()
    run = tmp_path / "run"
    assert yaml.safe_load((run / "manifest.yaml").read_text()) == manifest.to_dict()
    assert (run / "command.txt").read_text().strip()
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["generation"] for line in lines] == [1, 2]
    member = lines[0]["members"][0]
    assert {"index", "fitness", "mutation", "hyperparameters", "arch"} <= set(member)
    assert lines[1]["global_steps"] == 256
    assert (run / "checkpoints" / "latest.pt").is_file()
    assert checkpoint.load(run / "elite.pt")["algorithm"] == "DQN"
    summary = json.loads((run / "summary.json").read_text())
    for key in ("best_fitness", "global_steps", "wall_seconds", "steps_per_second",
                "generations", "target_reached"):  # fmt: skip
        assert key in summary


def test_epsilon_decays_per_vector_step_and_floors() -> None:
    manifest = tiny_manifest("DQN", training={"max_steps": 256, "eps_start": 1.0, "eps_end": 0.5,
                                              "eps_decay": 0.5, "pop_size": 1})  # fmt: skip
    member = tiny_population(tiny_manifest("DQN"), size=1)[0]
    member.context = member.context.__class__(member.device, 2, manifest.training)
    member.epsilon = manifest.training.eps_start
    obs = np.zeros((2, 4), dtype=np.float32)
    member.act(obs, explore=True)
    assert member.epsilon == 0.5
    member.act(obs, explore=True)
    assert member.epsilon == 0.5  # floored at eps_end
    member.act(obs, explore=False)
    assert member.epsilon == 0.5  # evaluation does not decay


def test_checkpoint_round_trip_restores_the_whole_population(tmp_path) -> None:
    manifest = tiny_manifest("PPO", **EVOLVING)
    first = _loop(manifest, tmp_path)
    first.run()
    state = first.checkpoint_state()
    checkpoint.save_atomically(state, tmp_path / "c.pt")
    second = _loop(manifest, tmp_path / "other")
    second.restore(checkpoint.load(tmp_path / "c.pt"))
    assert [m.index for m in second.population] == [m.index for m in first.population]
    for a, b in zip(first.population, second.population, strict=True):
        assert a.hyperparameters() == b.hyperparameters()
        assert a.arch == b.arch
        assert a.record.fitness == b.record.fitness
        for (name, p), q in zip(a.networks.items(), b.networks.values(), strict=True):
            for x, y in zip(p.state_dict().values(), q.state_dict().values(), strict=True):
                assert torch.equal(x, y), name
        assert torch.equal(a.generator.get_state(), b.generator.get_state())
    assert second.state == first.state


def test_interrupt_saves_and_resume_continues_the_same_population(tmp_path, monkeypatch) -> None:
    manifest = tiny_manifest("DQN", training={"max_steps": 384, "evo_steps": 128, "pop_size": 2},
                             **EVOLVING)  # fmt: skip
    loop = _loop(manifest, tmp_path)
    interrupt_after(loop, members_trained=2)  # Ctrl-C as the second generation starts
    monkeypatch.setattr(loop, "reporter", LogReporter())
    result = loop.run()
    assert result.interrupted and result.summary["generations"] == 1
    saved = checkpoint.load(tmp_path / "run" / "checkpoints" / "latest.pt")
    indices = [m["index"] for m in saved["members"]]

    from agile_cli.training.trainer import resume_local

    resumed = resume_local(tmp_path / "run", installed_host().registry,
                           LocalRunOptions(device="cpu"), verbose=False)  # fmt: skip
    assert not resumed.interrupted
    assert resumed.summary["generations"] == 3
    assert resumed.summary["steps_per_member"] == 384
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(m)["generation"] for m in metrics] == [1, 2, 3]
    first_generation_two = json.loads(metrics[1])["members"]
    assert {row["index"] for row in first_generation_two} == set(indices)
    assert len((tmp_path / "run" / "command.txt").read_text().splitlines()) == 2


def test_fitnesses_align_with_the_returned_population(tmp_path) -> None:
    trainer = LocalTrainer("PPO", {"name": "CartPole-v1", "num_envs": 2},
                           training={"max_steps": 128, "evo_steps": 64, "pop_size": 3},
                           mutation={}, tournament={}, device="cpu")  # fmt: skip
    population, fitnesses = trainer.train(verbose=False, run_dir=tmp_path / "r")
    assert fitnesses == [m.record.fitness[-1] for m in population]


CLI_MANIFEST = """\
algorithm: {name: DQN, batch_size: 16}
environment: {name: CartPole-v1, num_envs: 2}
training: {max_steps: 128, evo_steps: 64, pop_size: 2}
mutation: {}
tournament_selection: {}
"""


def test_cli_train_then_evaluate(run, write, tmp_path) -> None:
    manifest = write("m.yaml", CLI_MANIFEST)
    result = run("train", str(manifest), "--quiet", "--device", "cpu", "--run-dir",
                 str(tmp_path / "cli-run"))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "generation 2:" in result.output and "summary" in result.output
    scored = run("evaluate", str(tmp_path / "cli-run"), "--episodes", "3", "--device", "cpu")
    assert scored.exit_code == 0, scored.output
    assert "mean return" in scored.output and "over 3 episodes" in scored.output


def test_cli_train_usage_errors(run, write, tmp_path) -> None:
    bad = write("bad.yaml", CLI_MANIFEST.replace("pop_size: 2", "pop_size: 0"))
    result = run("train", str(bad))
    assert result.exit_code == 2 and "training.pop_size" in result.output
    assert run("train").exit_code == 2
    missing = run("train", "--resume", str(tmp_path / "nowhere"))
    assert missing.exit_code == 2 and "not a run folder" in missing.output
    wrong = run("train", str(write("m.yaml", CLI_MANIFEST)), "--backend", "locl")
    assert wrong.exit_code == 2 and "did you mean 'local'?" in wrong.output
    if not torch.cuda.is_available():
        cuda = run("train", str(write("m.yaml", CLI_MANIFEST)), "--device", "cuda")
        assert cuda.exit_code == 2 and "no CUDA device" in cuda.output


def test_wandb_offline_logs_into_the_run_folder(run, write, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    result = run("train", str(write("m.yaml", CLI_MANIFEST)), "--quiet", "--wb", "--device",
                 "cpu", "--run-dir", str(tmp_path / "wb-run"))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert any((tmp_path / "wb-run" / "wandb").glob("offline-run-*"))


def test_tensorboard_writes_events_or_names_the_extra(run, write, tmp_path) -> None:
    result = run("train", str(write("m.yaml", CLI_MANIFEST)), "--quiet", "--tensorboard",
                 "--device", "cpu", "--run-dir", str(tmp_path / "tb-run"))  # fmt: skip
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        assert result.exit_code == 2
        assert "`pip install tensorboard`" in result.output
        assert 'pip install -e ".[tensorboard]"' in result.output
    else:
        assert result.exit_code == 0, result.output
        assert any((tmp_path / "tb-run" / "tensorboard").glob("events.out.tfevents.*"))
