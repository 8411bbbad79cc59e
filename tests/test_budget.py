"""The memory estimate that refuses, before allocating, a run this machine cannot hold."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_cli import TrainingManifest, UsageError
from agile_cli import memory as host_memory
from agile_cli.testing import installed_host
from agile_cli.training import setup
from agile_rl.nn.arch import arch_from_spec
from agile_rl.nn.modules import EvolvableNetwork
from agile_rl.training import budget

from .conftest import CONFIGS, MINIMAL, ROOT

GIB = 2**30
TOY = {"path": str(ROOT / "tests" / "envs"), "entrypoint": "toy.py:make_dict_reach"}
CPU = torch.device("cpu")


@pytest.fixture
def memory(monkeypatch):
    """Set how much host memory this machine has available."""

    def set_available(nbytes: int | None) -> None:
        monkeypatch.setattr(host_memory, "available_memory", lambda: nbytes)

    return set_available


def check_fits(
    manifest: TrainingManifest, env: object, device: torch.device, *, batched: bool = False
) -> host_memory.Estimate:
    """What a local run checks before building: the RL needs, ``pop_size`` members' worth of
    rollouts when batched, and the dataset the environment declared."""
    members = manifest.training.pop_size if batched else 1
    needs = [*budget.needs(manifest, env, members), host_memory.dataset_need(env)]
    return host_memory.check(needs, device)


def _manifest(**sections) -> TrainingManifest:
    data = {"algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1", "num_envs": 2}}
    return TrainingManifest.get_validated({**data, **sections})


def _env(manifest: TrainingManifest):
    return setup.build_environment(manifest, installed_host().registry, seed=0)


def test_a_huge_replay_buffer_is_refused_with_the_figure_and_the_field(memory) -> None:
    memory(int(21.4 * GIB))
    manifest = _manifest(replay_buffer={"max_size": 1e9})
    env = _env(manifest)
    with pytest.raises(UsageError) as excinfo:
        check_fits(manifest, env, CPU)
    env.close()
    # CartPole: 2 x 4 float32 observations, an int64 action, reward, termination, discount
    assert excinfo.value.message == (
        "replay_buffer.max_size: the replay buffer needs 48.4 GiB (1,000,000,000 transitions "
        "of 52 B), more than the 21.4 GiB this machine has available"
    )
    assert excinfo.value.hint == "lower replay_buffer.max_size"


def test_the_parts_add_up(memory) -> None:
    memory(int(5.5 * GIB))  # the buffer (4.8 GiB) fits, not with the population (1.0 GiB)
    manifest = _manifest(
        replay_buffer={"max_size": 100_000_000},
        network={"head_config": {"hidden_size": [8192, 8192], "max_mlp_nodes": 8192}},
    )
    with pytest.raises(UsageError) as excinfo:
        check_fits(manifest, _env(manifest), CPU)
    assert excinfo.value.message.startswith("replay_buffer.max_size: the replay buffer needs")
    assert "5.9 GiB with the rest of the run, more than the 5.5 GiB" in excinfo.value.message


def test_a_shipped_manifest_fits(memory) -> None:
    memory(None)  # unknown: nothing is refused
    manifest = TrainingManifest.get_validated(next(p for p in CONFIGS if p.parent.name == "dqn"))
    env = _env(manifest)
    estimate = check_fits(manifest, env, CPU)
    env.close()
    assert estimate.host_available is None and 0 < estimate.total < 2**30
    memory(host_memory._mem_available(Path("/proc/meminfo")) or 8 * GIB)
    assert check_fits(manifest, _env(manifest), CPU).total == estimate.total


@pytest.mark.parametrize(
    ("network", "space"),
    [
        ({}, spaces.Box(-1, 1, (4,))),
        ({"arch": "simba", "encoder_config": {"hidden_size": 64}}, spaces.Box(-1, 1, (7,))),
        ({"encoder_config": {"channel_size": [16, 8], "kernel_size": [8, 3],
                             "stride_size": [4, 1], "layer_norm": True}},
         spaces.Box(0, 255, (36, 30, 3), np.uint8)),
        ({"latent_dim": 16, "encoder_config": {"vector_space_mlp": True}},
         spaces.Dict({"v": spaces.Box(-1, 1, (3,)),
                      "image": spaces.Box(0, 255, (1, 12, 12), np.uint8)})),
        ({"arch": "lstm", "encoder_config": {"hidden_state_size": 32, "num_layers": 2}},
         spaces.Box(-1, 1, (5,))),
    ],
    ids=["mlp", "simba", "cnn", "multiinput", "lstm"],
)  # fmt: skip
def test_parameters_are_counted_as_the_networks_are_built(network, space) -> None:
    recurrent = network.get("arch") == "lstm"
    algorithm = {"name": "PPO", "recurrent": recurrent}
    spec = TrainingManifest.get_validated(
        {"algorithm": algorithm, "environment": {"name": "x"}, "network": network}
    ).network
    arch = arch_from_spec(spec, space, recurrent=recurrent)
    built = EvolvableNetwork(arch, space, {"out": 3})
    expected = sum(parameter.numel() for parameter in built.parameters())
    assert budget.network_parameters(arch, space, 3) == expected


def test_space_and_transition_bytes() -> None:
    image = spaces.Box(0, 255, (84, 84, 4), np.uint8)
    assert budget.space_bytes(image) == 84 * 84 * 4
    assert budget.space_bytes(spaces.Box(-1, 1, (3,))) == 12
    assert budget.space_bytes(spaces.Dict({"a": spaces.Discrete(3), "b": image})) == 8 + 28_224
    # a team of two: observations twice, actions, reward and termination per agent, a discount
    team = budget.transition_bytes(
        [spaces.Box(-1, 1, (2,)), spaces.Box(-1, 1, (3,))], [spaces.Discrete(2)] * 2
    )
    assert team == 2 * (8 + 12) + 2 * 8 + 2 * 8 + 4
    # a row that keeps its n-step transition's first step: one more observation, reward and
    # termination (RainbowDQN's combined_reward)
    vector, actions = [spaces.Box(-1, 1, (3,))], [spaces.Discrete(2)]
    plain = budget.transition_bytes(vector, actions)
    assert budget.transition_bytes(vector, actions, first_steps=True) == plain + 12 + 8


def test_an_on_policy_rollout_is_counted(memory) -> None:
    memory(GIB)
    manifest = TrainingManifest.get_validated(
        {"algorithm": {"name": "PPO", "learn_step": 10_000_000},
         "environment": {"name": "reach", "num_envs": 2, "sync": True, **TOY}}
    )  # fmt: skip
    env = _env(manifest)
    with pytest.raises(UsageError) as excinfo:
        check_fits(manifest, env, CPU)
    env.close()
    # observations as float32 (2 + 64 values), an int64 action, six float32 columns
    assert excinfo.value.message.startswith(
        "algorithm.learn_step: a rollout needs 2.8 GiB (10,000,000 environment steps of 296 B)"
    )


def test_a_population_holds_every_members_rollout_at_once(memory) -> None:
    memory(GIB)
    manifest = TrainingManifest.get_validated(
        {"algorithm": {"name": "PPO", "learn_step": 1_000_000},
         "environment": {"name": "reach", "num_envs": 2, "sync": True, **TOY},
         "training": {"pop_size": 4}}
    )  # fmt: skip
    env = _env(manifest)  # as if it were the population's: 4 members x 2 environments
    assert check_fits(manifest, env, CPU).total < GIB
    with pytest.raises(UsageError) as excinfo:
        check_fits(manifest, env, CPU, batched=True)
    env.close()
    assert "4 members' rollouts at once needs 1.1 GiB" in excinfo.value.message
    assert "training.pop_size" in excinfo.value.hint


def test_the_device_is_compared_with_its_own_free_memory(memory, monkeypatch) -> None:
    memory(None)
    monkeypatch.setattr(host_memory, "device_memory", lambda device: GIB)
    manifest = _manifest(replay_buffer={"max_size": 100_000_000})
    with pytest.raises(UsageError, match=r"more than the 1\.0 GiB cuda:0 has free"):
        check_fits(manifest, _env(manifest), torch.device("cuda:0"))
    assert check_fits(_manifest(), _env(_manifest()), torch.device("cuda:0")).total > 0


def test_memory_available_reads_meminfo(tmp_path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemAvailable:   22437888 kB\n")
    assert host_memory._mem_available(meminfo) == 22437888 * 1024
    assert host_memory._mem_available(tmp_path / "absent") is None
    assert host_memory.available_memory() > 0
    assert host_memory.format_bytes(372) == "372 B"
    assert host_memory.format_bytes(int(37.2 * GIB)) == "37.2 GiB"
    assert host_memory.format_bytes(3 * 2**50) == "3,072.0 TiB"


HUGE_NETWORK = (
    "network:\n  head_config:\n    hidden_size: [65536, 65536]\n    max_mlp_nodes: 65536\n"
    "training:\n  pop_size: 16\n"
)


def test_agile_train_refuses_a_network_that_cannot_fit_quickly(run, write, tmp_path) -> None:
    run_dir = tmp_path / "run"
    path = write("m.yaml", MINIMAL + HUGE_NETWORK)
    assert run("validate", str(path)).exit_code == 0  # the manifest itself is valid
    started = time.monotonic()
    result = run("train", str(path), "--device", "cpu", "--seed", "3", "--run-dir", str(run_dir))
    assert time.monotonic() - started < 20
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.output.startswith(  # after the line saying what it was doing
        "building 16 members\n"
        "error: network: the population needs 1.0 TiB (at least 4,299,694,786 parameters a "
        "member, 16 B each with gradients and Adam state, 16 members held at once), more than"
    )
    assert "(narrow the network (hidden_size, latent_dim, channel_size) or lower " in result.output
    assert not run_dir.exists()


def test_agile_train_refuses_a_replay_buffer_that_cannot_fit(run, write, tmp_path, memory) -> None:
    memory(4 * GIB)
    path = write("m.yaml", MINIMAL + "replay_buffer:\n  max_size: 1e8\n")
    result = run("train", str(path), "--device", "cpu", "--run-dir", str(tmp_path / "run"))
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() == [
        "building 1 member",
        "error: replay_buffer.max_size: the replay buffer needs 4.8 GiB (100,000,000 "
        "transitions of 52 B), more than the 4.0 GiB this machine has available "
        "(lower replay_buffer.max_size)",
    ]


def test_a_bandit_table_declaring_huge_shapes_is_refused_before_reading(run, write, memory):
    h5py = pytest.importorskip("h5py")
    memory(GIB)
    folder = write("a.txt", "").parent
    with h5py.File(folder / "features.h5", "w") as file:
        file.create_dataset("x", shape=(400_000_000, 8), dtype="f4")
    with h5py.File(folder / "targets.h5", "w") as file:
        file.create_dataset("y", data=np.zeros(4))
    text = (
        "algorithm: {name: NeuralUCB}\n"
        f"environment: {{name: b, features: features.h5, targets: targets.h5, path: {folder}}}\n"
    )
    result = run("validate", "--check-env", str(write("m.yaml", text)))
    assert result.exit_code == 2, result.output
    assert (
        f"environment.features: {folder / 'features.h5'} declares a table of shape "
        "(400000000, 8), which needs 11.9 GiB, more than the 1.0 GiB this machine has available"
    ) in result.output
