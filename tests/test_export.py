"""``agile export``: tiny runs trained through the CLI, exported as TorchScript and ONNX, act
as agile's own greedy ``act`` does, on sampled observations and on real environment resets."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest
import torch
import yaml
from click.testing import CliRunner, Result

from agile_cli import UsageError, load_agent
from agile_cli.cli import cli
from agile_cli.export import exported_policy, write
from agile_cli.testing import TINY_SECTIONS, installed_host, tiny_manifest, tiny_population
from agile_cli.training import setup
from agile_rl.runtime.exported import sample_observations

# Tiny budgets: two members, a couple of generations, short evaluation episodes.
TINY = {"mutation": {}, "tournament_selection": {}, "network": TINY_SECTIONS["network"]}
EVALUATION = {"eval_steps": 20}
RUNS: dict[str, dict[str, Any]] = {
    "dqn": {
        "algorithm": {"name": "DQN", "batch_size": 16},
        "environment": {"name": "CartPole-v1", "num_envs": 2},
        "training": {"max_steps": 128, "evo_steps": 64, "pop_size": 2},
    },
    "ppo": {
        "algorithm": {"name": "PPO", "batch_size": 32, "learn_step": 64},
        "environment": {"name": "CartPole-v1", "num_envs": 2},
        "training": {"max_steps": 128, "evo_steps": 64, "pop_size": 2},
    },
    "td3": {
        "algorithm": {"name": "TD3", "batch_size": 16, "learn_step": 8},
        "environment": {"name": "Pendulum-v1", "num_envs": 2},
        "training": {"max_steps": 128, "evo_steps": 64, "pop_size": 2},
    },
    "matd3": {  # MPE with Box actions: the speaker's and the listener's spaces differ
        "algorithm": {"name": "MATD3", "batch_size": 16},
        "environment": {
            "name": "mpe2.simple_speaker_listener_v4",
            "num_envs": 2,
            "sync": True,
            "config": {"max_cycles": 25, "continuous_actions": True},
        },
        "training": {"max_steps": 100, "evo_steps": 50, "pop_size": 2},
    },
    "ippo": {  # three alike agents sharing one actor, Discrete actions
        "algorithm": {"name": "IPPO", "batch_size": 32, "learn_step": 32},
        "environment": {
            "name": "mpe2.simple_spread_v3",
            "num_envs": 2,
            "sync": True,
            "config": {"N": 3, "max_cycles": 25, "continuous_actions": False},
        },
        "training": {"max_steps": 64, "evo_steps": 32, "pop_size": 2},
    },
}
CONTINUOUS = {"td3", "matd3"}
# torch 2.13 deprecates TorchScript, which still loads and runs.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:torch.jit")


def _cli(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _train(folder: Path, name: str, manifest: dict[str, Any]) -> Path:
    path = folder / f"{name}.yaml"
    training = {**manifest["training"], **EVALUATION}
    text = yaml.safe_dump({**TINY, **manifest, "training": training})
    path.write_text(text, encoding="utf-8")
    run_dir = folder / name
    result = _cli("train", str(path), "--quiet", "--device", "cpu", "--run-dir", str(run_dir))
    assert result.exit_code == 0, result.output
    return run_dir


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The run folder of one of RUNS, trained on first use."""
    folder = tmp_path_factory.mktemp("export")
    done: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in done:
            done[name] = _train(folder, name, RUNS[name])
        return done[name]

    return get


def _observation_batches(agent: Any, manifest: Any) -> list[dict[str, np.ndarray]]:
    """Observation batches by agent id ("obs" for a single agent): 16 sampled from the spaces,
    and the first observations of the environment's copies."""
    registry = installed_host().registry
    spaces = getattr(agent, "observation_spaces", {"obs": agent.observation_space})
    sampled = {key: sample_observations(space, 16, seed=3).numpy() for key, space in spaces.items()}
    env = setup.build_environment(manifest, registry, seed=5)
    try:
        reset = env.reset(seed=5)[0]
    finally:
        env.close()
    real = dict(reset) if isinstance(reset, dict) else {"obs": reset}
    return [sampled, {key: np.asarray(real[key]) for key in spaces}]


def _agile_actions(agent: Any, obs: dict[str, np.ndarray]) -> list[np.ndarray]:
    actions = agent.act(obs.get("obs", obs), explore=False)
    if isinstance(actions, dict):
        return [np.asarray(actions[key]) for key in obs]
    return [np.asarray(actions)]


def _assert_same_actions(
    agent: Any, manifest: Any, onnx_file: Path, ts_file: Path, continuous: bool
) -> None:
    """The exported files' actions are agile's greedy ones: equal, or close for Box actions."""
    policy = agent.export_policy()
    dtypes = [x.dtype for x in policy.example_inputs(1)]
    session = onnxruntime.InferenceSession(str(onnx_file))
    scripted = torch.jit.load(str(ts_file))
    for obs in _observation_batches(agent, manifest):
        expected = _agile_actions(agent, obs)
        inputs = [
            torch.as_tensor(x).to(dtype) for x, dtype in zip(obs.values(), dtypes, strict=True)
        ]
        feeds = {name: x.numpy() for name, x in zip(policy.input_names, inputs, strict=True)}
        from_onnx = session.run(policy.output_names, feeds)
        from_ts = scripted(*inputs)
        from_ts = [from_ts] if isinstance(from_ts, torch.Tensor) else list(from_ts)
        for want, onnx_out, ts_out in zip(expected, from_onnx, from_ts, strict=True):
            for got in (onnx_out, ts_out.numpy()):
                assert got.shape == want.shape and got.dtype == want.dtype
                if continuous:
                    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
                else:
                    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_exported_runs_act_as_agile_does(name: str, trained: Callable[[str], Path]) -> None:
    run_dir = trained(name)
    for fmt in ("onnx", "torchscript"):
        result = _cli("export", str(run_dir), "--format", fmt)
        assert result.exit_code == 0, result.output
        assert "inputs:" in result.output and "usage:" in result.output
    agent, manifest = load_agent(run_dir, installed_host().registry, device="cpu")
    onnx_file, ts_file = run_dir / "elite.onnx", run_dir / "elite.ts"
    _assert_same_actions(agent, manifest, onnx_file, ts_file, name in CONTINUOUS)


PENDULUM = {"name": "Pendulum-v1", "num_envs": 2, "sync": True}
# Two agents that differ in every space: a Discrete speaker and a Box listener.
TOY_TEAM = {"name": "toy", "entrypoint": "tests.envs.toy_parallel:ToyParallel", "num_envs": 2,
            "sync": True}  # fmt: skip
TOY_BANDIT = {"name": "toy", "features": "toy_bandit_features.csv",
              "targets": "toy_bandit_targets.csv",
              "path": str(Path(__file__).parent / "envs")}  # fmt: skip
FRESH = {  # untrained members of the other exportable algorithms and action spaces
    "rainbow": ("RainbowDQN", None, {}, False),
    "ppo-box": ("PPO", PENDULUM, {}, True),
    "ppo-squashed": ("PPO", PENDULUM, {"network": {**TINY_SECTIONS["network"],
                                                   "squash_output": True}}, True),
    "ddpg": ("DDPG", PENDULUM, {}, True),
    "maddpg": ("MADDPG", TOY_TEAM, {}, True),
    "ippo-mixed": ("IPPO", TOY_TEAM, {}, True),
    "neural-ucb": ("NeuralUCB", TOY_BANDIT, {}, False),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(FRESH))
def test_fresh_members_export_their_greedy_actions(case: str, tmp_path: Path) -> None:
    algorithm, environment, sections, continuous = FRESH[case]
    manifest = tiny_manifest(algorithm, environment=environment, **sections)
    agent = tiny_population(manifest, size=1)[0]
    policy = exported_policy(agent, algorithm)
    write(policy, "onnx", tmp_path / "p.onnx")
    write(policy, "torchscript", tmp_path / "p.ts")
    _assert_same_actions(agent, manifest, tmp_path / "p.onnx", tmp_path / "p.ts", continuous)


def test_export_refuses_to_overwrite_without_force(trained: Callable[[str], Path]) -> None:
    run_dir = trained("dqn")
    out = run_dir / "policy.ts"
    assert _cli("export", str(run_dir), "--format", "torchscript", "--out", str(out)).exit_code == 0
    again = _cli("export", str(run_dir), "--format", "torchscript", "--out", str(out))
    assert again.exit_code == 2 and "already exists" in again.output and "--force" in again.output
    forced = _cli("export", str(run_dir), "--format", "torchscript", "--out", str(out), "--force")
    assert forced.exit_code == 0, forced.output
    from_pt = _cli("export", str(run_dir / "elite.pt"), "--format", "onnx", "--force")
    assert from_pt.exit_code == 0 and str(run_dir / "elite.onnx") in from_pt.output


def test_export_never_replaces_the_runs_own_files(trained: Callable[[str], Path]) -> None:
    run_dir = trained("dqn")
    before = {name: (run_dir / name).read_bytes() for name in ("elite.pt", "manifest.yaml")}
    targets = [
        run_dir / "elite.pt",
        run_dir / "manifest.yaml",
        run_dir / "checkpoints" / "latest.pt",
    ]
    for out in targets:
        refused = _cli("export", str(run_dir), "--format", "onnx", "--out", str(out), "--force")
        assert refused.exit_code == 2, refused.output
        assert "belongs to the run in" in refused.output and "would replace it" in refused.output
    assert all((run_dir / name).read_bytes() == data for name, data in before.items())
    assert load_agent(run_dir, installed_host().registry, device="cpu")[0] is not None


def test_an_algorithm_without_an_export_is_refused(
    trained: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agile_rl import QLearning

    run_dir = trained("dqn")
    monkeypatch.setattr(QLearning, "export_policy", lambda self: None)
    refused = _cli("export", str(run_dir), "--format", "onnx", "--out", str(run_dir / "x.onnx"))
    assert refused.exit_code == 2
    assert "error: DQN cannot be exported" in refused.output
    assert "Traceback" not in refused.output and not (run_dir / "x.onnx").exists()


def test_recurrent_ppo_is_refused_with_its_reason() -> None:
    lstm = {**TINY_SECTIONS["network"], "encoder_config": {"arch": "lstm", "hidden_state_size": 8}}
    options = {"recurrent": True, "max_seq_len": 8}
    manifest = tiny_manifest("PPO", algorithm_options=options, network=lstm)
    agent = tiny_population(manifest, size=1)[0]
    with pytest.raises(UsageError, match=r"PPO cannot be exported \(a recurrent policy"):
        exported_policy(agent, "PPO")


def test_onnx_without_the_onnx_package_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    from agile_cli import AgileError

    agent = tiny_population(tiny_manifest("DQN"), size=1)[0]
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "onnx" else find_spec(name, *a),
    )
    with pytest.raises(AgileError, match="needs the onnx package") as raised:
        write(exported_policy(agent, "DQN"), "onnx", tmp_path / "p.onnx")
    assert raised.value.exit_code == 1 and 'pip install -e ".[export]"' in str(raised.value.hint)
