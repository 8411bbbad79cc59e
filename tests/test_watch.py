"""``agile evaluate --video`` and ``--render``: tiny runs trained through the CLI, their greedy
episodes recorded frame by frame (single- and multi-agent), and clear refusals."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import imageio.v2 as imageio
import numpy as np
import pytest
import yaml
from click.testing import CliRunner, Result

from agile_cli import UsageError
from agile_cli.cli import cli
from agile_cli.testing import TINY_SECTIONS, installed_host, tiny_manifest, tiny_population
from agile_cli.training.watch import watch

TINY = {"mutation": {}, "tournament_selection": {}, "network": TINY_SECTIONS["network"]}
BUDGET = {"max_steps": 128, "evo_steps": 64, "pop_size": 2}
RUNS: dict[str, dict[str, Any]] = {
    # eval_steps cuts CartPole's episodes (and so the videos) at 30 steps at most
    "dqn": {
        "algorithm": {"name": "DQN", "batch_size": 16},
        "environment": {"name": "CartPole-v1", "num_envs": 2},
        "training": {**BUDGET, "eval_steps": 30},
    },
    "td3": {  # Pendulum's episodes are 200 steps, whole
        "algorithm": {"name": "TD3", "batch_size": 16, "learn_step": 8},
        "environment": {"name": "Pendulum-v1", "num_envs": 2},
        "training": BUDGET,
    },
    "maddpg": {  # 25 cycles of MPE's speaker and listener
        "algorithm": {"name": "MADDPG", "batch_size": 16},
        "environment": {
            "name": "mpe2.simple_speaker_listener_v4",
            "num_envs": 2,
            "sync": True,
            "config": {"max_cycles": 25, "continuous_actions": False},
        },
        "training": {"max_steps": 100, "evo_steps": 50, "pop_size": 2},
    },
    "toy-team": {  # an environment of our own that takes no render_mode
        "algorithm": {"name": "MADDPG", "batch_size": 16},
        "environment": {
            "name": "toy",
            "entrypoint": "tests.envs.toy_parallel:ToyParallel",
            "num_envs": 2,
            "sync": True,
        },
        "training": {"max_steps": 40, "evo_steps": 20, "pop_size": 2},
    },
}


def _cli(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The run folder of one of RUNS, trained on first use."""
    folder = tmp_path_factory.mktemp("watch")
    done: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in done:
            path = folder / f"{name}.yaml"
            path.write_text(yaml.safe_dump({**TINY, **RUNS[name]}), encoding="utf-8")
            args = ["train", str(path), "--quiet", "--device", "cpu"]
            result = _cli(*args, "--run-dir", str(folder / name))
            assert result.exit_code == 0, result.output
            done[name] = folder / name
        return done[name]

    return get


def _episode_lines(output: str) -> list[tuple[float, int]]:
    """(return, steps) of each ``episode N: return R, S steps`` line."""
    rows = []
    for line in output.splitlines():
        if line.strip().startswith("episode "):
            ret, steps = line.split("return ")[1].split(", ")
            rows.append((float(ret), int(steps.split()[0])))
    return rows


def _cartpole_episodes(episodes: list[tuple[float, int]]) -> bool:
    """CartPole pays 1 a step; its episodes here end by falling or at eval_steps (30)."""
    return all(ret == steps and 0 < steps <= 30 for ret, steps in episodes)


def _whole_episodes(steps: int) -> Callable[[list[tuple[float, int]]], bool]:
    return lambda episodes: all(length == steps for _, length in episodes)


@pytest.mark.parametrize(
    ("name", "lengths_ok", "fps"),
    [("dqn", _cartpole_episodes, 50), ("td3", _whole_episodes(200), 30),
     ("maddpg", _whole_episodes(25), 10)],
)  # fmt: skip
def test_the_video_holds_every_step_of_each_episode(
    name: str, lengths_ok: Callable[[list[tuple[float, int]]], bool], fps: int,
    trained: Callable[[str], Path], tmp_path: Path,
) -> None:  # fmt: skip
    run_dir = trained(name)
    video = tmp_path / "elite.mp4"
    result = _cli("evaluate", str(run_dir), "--episodes", "2", "--video", str(video))
    assert result.exit_code == 0, result.output
    episodes = _episode_lines(result.output)
    assert len(episodes) == 2 and lengths_ok(episodes), result.output
    frames = sum(steps + 1 for _, steps in episodes)  # the reset, then one per step
    assert f"wrote {video}: {frames} frames at {fps} fps" in result.output
    reader = imageio.get_reader(video)
    try:
        assert reader.count_frames() == frames
        assert reader.get_meta_data()["fps"] == fps
        first = reader.get_data(0)
    finally:
        reader.close()
    assert first.ndim == 3 and first.shape[2] == 3 and first.std() > 0  # a picture, not blank
    if name != "dqn":  # copy i of these vectors is seeded SEED + i, as episode i is here
        scored = _cli("evaluate", str(run_dir), "--episodes", "2")
        mean = np.mean([ret for ret, _ in episodes])
        assert f"mean return {mean:.2f}" in scored.output


def test_render_plays_the_episodes_in_a_window(
    trained: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # an invisible window on a headless machine
    result = _cli("evaluate", str(trained("dqn")), "--episodes", "1", "--render")
    assert result.exit_code == 0, result.output
    episodes = _episode_lines(result.output)
    assert len(episodes) == 1 and _cartpole_episodes(episodes), result.output
    assert "wrote" not in result.output


def test_render_without_a_display_says_to_record_instead(
    trained: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    result = _cli("evaluate", str(trained("dqn")), "--render")
    assert result.exit_code == 2
    assert "needs a display" in result.output and "--video" in result.output


def test_an_environment_that_cannot_draw_is_refused(
    trained: Callable[[str], Path], tmp_path: Path
) -> None:
    video = tmp_path / "team.mp4"
    result = _cli("evaluate", str(trained("toy-team")), "--video", str(video))
    assert result.exit_code == 2, result.output
    assert "toy cannot draw its episodes: it takes no render_mode" in result.output
    assert "Traceback" not in result.output and not video.exists()


def test_a_bandit_has_no_frames(tmp_path: Path) -> None:
    bandit = {"name": "toy", "features": "toy_bandit_features.csv",
              "targets": "toy_bandit_targets.csv",
              "path": str(Path(__file__).parent / "envs")}  # fmt: skip
    manifest = tiny_manifest("NeuralUCB", environment=bandit)
    agent = tiny_population(manifest, size=1)[0]
    registry = installed_host().registry
    with pytest.raises(UsageError, match="toy cannot draw its episodes: its vector environment"):
        watch(agent, manifest, registry, episodes=1, seed=0, video=tmp_path / "x.mp4")
    assert not (tmp_path / "x.mp4").exists()


def test_a_renderer_that_stops_drawing_leaves_no_partial_video(tmp_path: Path) -> None:
    fading = {"name": "fading", "entrypoint": "tests.envs.toy:make_fading", "num_envs": 2,
              "sync": True}  # fmt: skip
    manifest = tiny_manifest("DQN", environment=fading)
    agent = tiny_population(manifest, size=1)[0]
    video = tmp_path / "x.mp4"
    with pytest.raises(UsageError, match="fading cannot draw its episodes: render"):
        watch(agent, manifest, installed_host().registry, episodes=1, seed=0, video=video)
    assert not video.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--video", "x.avi"], "cannot write '.avi' videos"),
        (["--video", "missing/x.mp4"], "does not exist"),
        (["--video", "x.mp4", "--render"], "cannot be used together"),
    ],
)
def test_video_options_are_checked_first(
    args: list[str], message: str, trained: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    result = _cli("evaluate", str(trained("dqn")), *args)
    assert result.exit_code == 2 and message in result.output


def test_without_imageio_ffmpeg_the_extra_is_named(
    trained: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # import fails
    result = _cli("evaluate", str(trained("dqn")), "--video", str(tmp_path / "x.mp4"))
    assert result.exit_code == 1
    assert "needs the imageio_ffmpeg package" in result.output
    assert "`pip install imageio imageio-ffmpeg`" in result.output
    assert 'pip install -e ".[video]"' in result.output
