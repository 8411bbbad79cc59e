"""Watching a saved agent: its greedy episodes drawn by the environment, one copy at a time,
and written to a video file (``agile evaluate --video``) or shown in a window (``--render``).

The environment is built by the manifest's own builder with ``render_mode`` added to its
``config`` (what Gymnasium's ``make`` and PettingZoo's ``parallel_env`` take), one copy, in
this process. Frames come from the vector environment's ``render()``: Gymnasium's vectors
have it, and so do agile's multi-agent ones. imageio is imported here, on use.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agile_cli.errors import AgileError, EnvironmentNotFoundError, UsageError
from agile_cli.host.registry import Registry
from agile_cli.manifest import TrainingManifest
from agile_cli.member import Member
from agile_cli.training import setup
from agile_cli.training.run_folder import check_writable

VIDEO_SUFFIXES = (".mp4",)  # H.264, streamed to ffmpeg frame by frame
DEFAULT_FPS = 30
_VIDEO_HINT = (
    "install it with `pip install imageio imageio-ffmpeg` or, in agile's folder, "
    '`pip install -e ".[video]"`'
)


@dataclass
class Watched:
    """The episodes played: each one's return and length in steps, and what was written.

    :param frames: frames written to the video (each episode's first observation and one
        per step); 0 in a window.
    :param fps: the video's frame rate (the environment's ``render_fps``).
    """

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    frames: int = 0
    fps: int = DEFAULT_FPS


def check_video_path(path: Path) -> None:
    """Refuse a video file agile cannot write, before anything is loaded.

    :raises UsageError: an unknown suffix, a folder, or a parent folder that is missing.
    """
    if path.suffix.lower() not in VIDEO_SUFFIXES:
        raise UsageError(
            f"--video {path}: cannot write '{path.suffix or 'no suffix'}' videos",
            "name an .mp4 file",
        )
    if path.is_dir():
        raise UsageError(f"--video {path} is a folder", "name a file, e.g. elite.mp4")
    if not path.parent.is_dir():
        raise UsageError(f"--video {path}: folder {path.parent} does not exist")
    check_writable(path, f"--video {path}")


def check_display() -> None:
    """Refuse ``--render`` on a Linux machine without a display, where a window cannot open.

    :raises UsageError: neither ``DISPLAY`` nor ``WAYLAND_DISPLAY`` is set.
    """
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        raise UsageError(
            "--render needs a display, and this machine has none (DISPLAY is not set)",
            "record the episodes instead with --video elite.mp4",
        )


def watch(
    agent: Member,
    manifest: TrainingManifest,
    registry: Registry,
    *,
    episodes: int,
    seed: int,
    video: Path | None = None,
) -> Watched:
    """Play ``episodes`` greedy episodes one after another (episode ``i`` reset with seed
    ``seed + i``), each cut at ``eval_steps``; recorded to ``video``, or in a window when
    ``video`` is None.

    :raises UsageError: the environment cannot draw frames in that mode (no video is left).
    """
    mode = "human" if video is None else "rgb_array"
    if video is not None:  # frames need no display: spare SDL the search for one
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    env = _rendering_env(manifest, registry, mode, seed)
    try:
        watched = Watched(fps=_fps(env))
        if video is None:
            _play_all(agent, env, manifest, episodes, seed, watched, lambda: None)
        else:
            _record(agent, env, manifest, episodes, seed, watched, video)
    finally:
        env.close()
    return watched


def _record(
    agent: Member, env: Any, manifest: TrainingManifest, episodes: int, seed: int,
    watched: Watched, video: Path,
) -> None:  # fmt: skip
    """Play the episodes, writing every frame to ``video``; unless they all play, remove it
    (no partial video is left)."""
    writer = _open_writer(video, watched.fps)

    def record() -> None:
        writer.append_data(_frame(env, manifest))
        watched.frames += 1

    drawn = False
    try:
        _play_all(agent, env, manifest, episodes, seed, watched, record)
        drawn = True
    finally:
        writer.close()
        if not drawn:
            video.unlink(missing_ok=True)


def _play_all(
    agent: Member,
    env: Any,
    manifest: TrainingManifest,
    episodes: int,
    seed: int,
    watched: Watched,
    on_frame: Callable[[], None],
) -> None:
    for episode in range(episodes):
        total, steps = play_episode(
            agent, env, seed + episode, manifest.training.eval_steps, on_frame
        )
        watched.returns.append(total)
        watched.lengths.append(steps)


def play_episode(
    agent: Member,
    env: Any,
    seed: int,
    max_steps: int | None,
    on_frame: Callable[[], None],
) -> tuple[float, int]:
    """One greedy episode in the first copy of ``env`` (a vector of one): its return and its
    length in steps. ``on_frame`` runs after the reset and after every step."""
    obs, _ = env.reset(seed=seed)
    agent.reset_state()
    on_frame()
    total, steps, done = 0.0, 0, False
    while not done and (max_steps is None or steps < max_steps):
        obs, rewards, terminated, truncated, _ = env.step(agent.act(obs, explore=False))
        total += float(np.asarray(rewards)[0])
        done = bool(np.asarray(terminated)[0] or np.asarray(truncated)[0])
        steps += 1
        on_frame()
    return total, steps


def render_spec(manifest: TrainingManifest, mode: str) -> Any:
    """The manifest's environment section as one in-process copy drawing in ``mode``.

    :raises UsageError: the environment takes no ``config`` (bandits, LLM prompts, a plugin's
        environment without frames).
    """
    spec = manifest.environment
    fields = type(spec).model_fields
    if "config" not in fields:
        raise UsageError(
            f"{manifest.environment.name} ({manifest.family}) has no frames to draw",
            "--video and --render work with Gymnasium and PettingZoo environments",
        )
    config = spec.model_dump()["config"]
    updates: dict[str, Any] = {"config": {**config, "render_mode": mode}}
    for key, value in (("num_envs", 1), ("sync", True)):
        if key in fields:
            updates[key] = value
    return spec.model_copy(update=updates)


def _rendering_env(manifest: TrainingManifest, registry: Registry, mode: str, seed: int) -> Any:
    spec = render_spec(manifest, mode)
    try:
        env = setup.build_environment_from(spec, manifest, registry, seed)
    except EnvironmentNotFoundError as error:
        if "render_mode" not in str(error):
            raise
        raise _cannot_render(manifest, f"it takes no render_mode ({error.message})") from None
    if getattr(env, "render", None) is None:
        env.close()
        raise _cannot_render(manifest, "its vector environment has no render()")
    return env


def _cannot_render(manifest: TrainingManifest, why: str) -> UsageError:
    return UsageError(
        f"{manifest.environment.name} cannot draw its episodes: {why}",
        "an environment draws frames when it accepts render_mode='rgb_array' (for --video) "
        "or 'human' (for --render), as Gymnasium's and PettingZoo's do",
    )


def _fps(env: Any, depth: int = 3) -> int:
    """The environment's ``render_fps``: from its metadata, or that of the environment it
    wraps (``env``) or of its first copy (``envs[0]``); else 30."""
    fps = (getattr(env, "metadata", None) or {}).get("render_fps")
    if isinstance(fps, int | float) and fps > 0:
        return round(fps)
    if depth == 0:
        return DEFAULT_FPS
    inner = getattr(env, "env", None) or next(iter(getattr(env, "envs", None) or ()), None)
    return DEFAULT_FPS if inner is None else _fps(inner, depth - 1)


def _frame(env: Any, manifest: TrainingManifest) -> np.ndarray:
    """The first copy's frame as ``[height, width, 3]`` uint8 with even sides (what H.264
    needs; an odd side repeats its last row or column).

    :raises UsageError: the environment drew no RGB image.
    """
    drawn = env.render()
    frame = drawn[0] if isinstance(drawn, list | tuple) else drawn
    if isinstance(frame, np.ndarray) and frame.ndim == 4:
        frame = frame[0]
    if not (isinstance(frame, np.ndarray) and frame.ndim == 3 and frame.shape[2] in (3, 4)):
        got = type(frame).__name__ if not isinstance(frame, np.ndarray) else f"{frame.shape}"
        raise _cannot_render(manifest, f"render() gave {got}, not an RGB image")
    frame = frame[:, :, :3]
    if frame.dtype != np.uint8:
        frame = np.clip(frame, 0, 255).astype(np.uint8)
    height, width = frame.shape[:2]
    return np.pad(frame, ((0, height % 2), (0, width % 2), (0, 0)), mode="edge")


def _open_writer(path: Path, fps: int) -> Any:
    """imageio's writer of H.264 by ffmpeg, which takes frames one by one (none are held).

    :raises AgileError: (exit 1) imageio or imageio-ffmpeg is not installed.
    """
    try:
        import imageio.v2 as imageio
        import imageio_ffmpeg  # noqa: F401 (the ffmpeg binary)
    except ImportError as error:
        raise AgileError(f"recording a video needs the {error.name} package", _VIDEO_HINT) from None
    return imageio.get_writer(
        path, fps=fps, codec="libx264", macro_block_size=1, ffmpeg_log_level="error"
    )
