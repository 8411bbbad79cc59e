"""EnvPool as the engine that steps a vector (``environment.engine: envpool``): a task EnvPool
knows, its copies stepped by C++ threads, behaving as agile's other vector environments do:
gymnasium's ``VectorEnv`` API with next-step autoreset, ``reset(seed=s)`` seeding copy ``i``
with ``s + i``, and for an Atari game with ``atari`` the game's score reported and the learner's
view in the infos (:class:`~agile_rl.runtime.atari.LearningSignals`, as with ale-py).

Where EnvPool's episodes differ from the default engine's (EnvPool 1.2.5):

- **Seeds.** EnvPool seeds its copies only when it makes them, so a seeded reset makes the pool
  again (0.01 s for eight HalfCheetah copies; 0.74 s for eight Atari games, which load their
  ROMs, where ale-py's vector took 0.63 s to reseed: ``benchmarks/env_engines.py``). A seed
  means what it means in gymnasium's vectors, copy ``i`` from ``seed + i`` (folded into the
  32-bit integers EnvPool takes), but EnvPool draws from its own generators: one seed gives
  different episodes under each engine, and each engine repeats its own exactly.
- **Simulators.** MuJoCo tasks run EnvPool's own MuJoCo build on copies of gymnasium's v5
  models: the same observations, rewards, terminations and 1,000-step time limit (a
  truncation). From the same state and actions the two agree to rounding (1e-14) at first and
  drift apart as it grows, chaotically (HalfCheetah's observations by 4.0 after 200 steps; a
  Hopper or Walker2d fell at the same step). Rewards are float32 (gymnasium's float64); Box
  actions are float32 here, as gymnasium's are (EnvPool's space says float64; it casts them).
- **Atari.** Options map onto EnvPool's own: ``frame_skip``, ``screen_size``, ``grayscale``,
  ``frame_stack`` and ``noop_max`` keep their meaning (up to ``noop_max - 1`` no-ops, as in
  ale-py's vector; 0 is run as 1, both meaning none, since EnvPool 1.2.5 crashes on 0);
  sticky actions are v5's 0.25 unless ``config`` says otherwise (EnvPool's default is 0); the
  limit is ``max_num_frames_per_episode // frame_skip`` steps (27,000). An episode's first
  observation stacks copies of its first frame where ale-py's stacks black frames before it;
  colour frames are laid out as ale-py's (``[frame_stack, height, width, 3]``). EnvPool's own
  FIRE after a reset is lost to sticky actions in about a third of resets (22 of 64 Breakout
  games never started), so agile presses FIRE itself, as the first step of each episode and
  the step after each lost life (:class:`~agile_rl.runtime.atari.LearningSignals`, which reads
  FIRE's index from ale-py: an ``ALE/`` id needs ale-py in either engine); ale-py's vector
  presses it within its reset.
- **Drawing.** An Atari game draws what the agent sees, as with ale-py. EnvPool's other tasks
  draw through its own OpenGL renderer, which ends the process where it finds no OpenGL
  context (it did on this project's machines), so they refuse ``render_mode``: record videos
  with ``engine: gymnasium``.
- **Copies** all run in EnvPool's threads in this process: ``sync`` changes nothing.
"""

from __future__ import annotations

import contextlib
import difflib
import secrets
import warnings
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from agile_cli import EnvironmentNotFoundError
from agile_rl.models.gymnasium import AtariSpec, GymnasiumEnvSpec
from agile_rl.runtime.atari import MAX_FRAMES, STICKY_ACTIONS, LearningSignals, fire_action
from agile_rl.runtime.gym_ids import check_registered

#: EnvPool takes each copy's seed as a signed 32-bit integer.
SEEDS = 2**31
_INSTALL = "install it with `pip install envpool` (or, in agile's folder, `pip install -e "
_INSTALL += '".[envpool]"`)'


def envpool_vector_env(spec: GymnasiumEnvSpec, *, seed: int | None = None) -> gym.vector.VectorEnv:
    """``spec.num_envs`` copies of ``spec.name`` stepped by EnvPool, reset with ``seed``.

    :raises EnvironmentNotFoundError: EnvPool is not installed, does not know the task, or
        does not take its ``config``; an Atari game without ale-py.
    """
    envpool = _import_envpool()
    task = _task(envpool, spec.name)
    envs: gym.vector.VectorEnv
    if isinstance(spec.atari, AtariSpec):  # validated: the preprocessing's options, or None
        envs = _atari(spec, task, spec.atari)
    else:
        _check_config(envpool, spec.config, task)
        envs = EnvPoolVector(task, spec.num_envs, dict(spec.config))
    envs.reset(seed=seed)
    return envs


def _import_envpool() -> Any:
    try:
        import envpool
    except ImportError:
        message = "environment.engine: envpool is not installed"
        raise EnvironmentNotFoundError(message, _INSTALL) from None
    return envpool


def _task(envpool: Any, name: str) -> str:
    """EnvPool's id for ``name`` (``ALE/Pong-v5`` is ``Pong-v5``).

    :raises EnvironmentNotFoundError: EnvPool has no such task, or ``name`` is an Atari game
        written without ``ALE/``.
    """
    task = name.removeprefix("ALE/")
    known = envpool.list_all_envs()
    if task not in known:
        close = difflib.get_close_matches(task, known, n=1)
        hint = f"did you mean '{close[0]}'?" if close else "see envpool.list_all_envs()"
        message = f"environment.name: EnvPool {envpool.__version__} has no task '{task}'"
        raise EnvironmentNotFoundError(message, hint)
    atari = envpool.registration.registry.specs[task][0] == "envpool.atari"
    if atari and task == name:
        raise EnvironmentNotFoundError(
            f"environment.name: '{task}' is an Atari game", f"name it 'ALE/{task}', with atari"
        )
    return task


def _check_config(envpool: Any, config: dict[str, Any], task: str) -> None:
    """EnvPool's ``task`` takes every key of ``config``.

    :raises EnvironmentNotFoundError: naming the first key it does not take.
    """
    if "render_mode" in config:
        raise EnvironmentNotFoundError(
            "environment.config.render_mode: EnvPool's tasks other than Atari games draw "
            "through its OpenGL renderer, which ends the process where it finds no OpenGL",
            "record videos with engine: gymnasium",
        )
    options = set(envpool.make_spec(task).config._fields)
    if unknown := [key for key in config if key not in options]:
        close = difflib.get_close_matches(unknown[0], options, n=1)
        raise EnvironmentNotFoundError(
            f"environment.config.{unknown[0]}: is not an option of EnvPool's {task}",
            f"did you mean '{close[0]}'?" if close else f"use {', '.join(sorted(options))}",
        )


def _atari(spec: GymnasiumEnvSpec, task: str, atari: AtariSpec) -> gym.vector.VectorEnv:
    """The game preprocessed by EnvPool, as ``atari`` says (the module), with the learner's
    view added."""
    check_registered(spec.name)  # ale-py, for FIRE's index
    config = spec.config
    frames = int(config.get("max_num_frames_per_episode", MAX_FRAMES))
    options = {
        "frame_skip": atari.frame_skip,
        "gray_scale": atari.grayscale,
        "stack_num": atari.frame_stack,
        "img_height": atari.screen_size,
        "img_width": atari.screen_size,
        "noop_max": max(1, atari.noop_max),
        "use_fire_reset": False,  # LearningSignals presses it (the module)
        "episodic_life": False,  # the learner's view: LearningSignals
        "reward_clip": False,
        "repeat_action_probability": float(config.get("repeat_action_probability", STICKY_ACTIONS)),
        "full_action_space": bool(config.get("full_action_space", False)),
        "max_episode_steps": max(1, frames // atari.frame_skip),
    }
    colour = None if atari.grayscale else atari.frame_stack
    pool = EnvPoolVector(task, spec.num_envs, options, colour_frames=colour)
    fire = fire_action(spec) if atari.fire_reset else None
    return LearningSignals(pool, atari, fire=fire, fire_starts=True)


class EnvPoolVector(gym.vector.VectorEnv):
    """An EnvPool pool as a gymnasium vector (see the module): made again at each seeded reset.

    :param task: EnvPool's id of the task.
    :param num_envs: the copies.
    :param options: keyword arguments of ``envpool.make`` (the task's options).
    :param colour_frames: for an Atari game's colour frames, how many are stacked, to lay out
        as ale-py does (``[frames, height, width, 3]`` from EnvPool's ``[3 * frames, height,
        width]``); None: observations as EnvPool gives them.
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(
        self, task: str, num_envs: int, options: dict[str, Any], colour_frames: int | None = None
    ) -> None:
        import envpool

        self.task, self.options, self.colour_frames = task, options, colour_frames
        self.num_envs = num_envs
        made = envpool.make_spec(task, num_envs=num_envs, **options)
        with _quiet_spaces():
            observations, actions = made.gymnasium_observation_space, made.gymnasium_action_space
        self.single_observation_space = self._observation_space(observations)
        self.single_action_space = _float32_actions(actions)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.pool: Any = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every copy: a seed makes the pool again, copy ``i`` seeded with ``seed + i``
        (``seed`` folded into EnvPool's 32-bit seeds); without one, the copies go on from their
        generators' state (a first reset draws a seed from the system's entropy)."""
        if seed is not None or self.pool is None:
            self._make(secrets.randbelow(SEEDS) if seed is None else int(seed))
        with _quiet_spaces():  # a new pool makes its spaces at its first reset
            obs, infos = self.pool.reset(options=options)
        return self._layout(obs), infos

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """One step of every copy; a copy whose episode ended at the last step is reset
        instead (next-step autoreset, EnvPool's own)."""
        if self.pool is None:
            raise gym.error.ResetNeeded("reset the vector before stepping it")
        obs, rewards, terminated, truncated, infos = self.pool.step(np.asarray(actions))
        return self._layout(obs), rewards, terminated, truncated, infos

    def close_extras(self, **kwargs: Any) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    def _make(self, seed: int) -> None:
        import envpool

        self.close_extras()
        first = seed % (SEEDS - self.num_envs)
        self.pool = envpool.make(
            self.task, env_type="gymnasium", num_envs=self.num_envs, seed=first, **self.options
        )

    def _observation_space(self, space: gym.Space[Any]) -> gym.Space[Any]:
        """EnvPool's space, an Atari game's colour frames laid out as :meth:`_layout` does."""
        if self.colour_frames is None or not isinstance(space, gym.spaces.Box):
            return space
        _, height, width = space.shape
        return gym.spaces.Box(0, 255, (self.colour_frames, height, width, 3), dtype=np.uint8)

    def _layout(self, obs: Any) -> Any:
        """``[copies, frames, height, width, 3]`` from EnvPool's colour frames, ``[copies,
        3 * frames, height, width]`` (frame by frame, each red, green, blue)."""
        if self.colour_frames is None:
            return obs
        count, _, height, width = obs.shape
        frames = obs.reshape(count, self.colour_frames, 3, height, width)
        return np.ascontiguousarray(frames.transpose(0, 1, 3, 4, 2))


@contextlib.contextmanager
def _quiet_spaces() -> Iterator[None]:
    """Without gymnasium's warning, at each space EnvPool makes, that a Box of float32 has
    float64 bounds (EnvPool passes them so; gymnasium casts them, as it should)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "(?s).*precision lowered", UserWarning)
        yield


def _float32_actions(space: gym.Space[Any]) -> gym.Space[Any]:
    """A Box of float actions as gymnasium's own tasks give it, float32."""
    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        low, high = space.low.astype(np.float32), space.high.astype(np.float32)
        return gym.spaces.Box(low, high, space.shape, dtype=np.float32)
    return space
