"""Atari games with the standard preprocessing (``environment.atari``), stepped by ale-py's
vector environment: no-op starts, frame skipping with max-pooling, resizing, grayscale and
frame stacking done in C++ threads.

The environment reports each game as it is played: its raw rewards, and an episode's end when
the game is over. What the learner sees instead goes in the step's infos, which the runners
read (:func:`agile_rl.training.runners.learning_signals`): ``learning_rewards`` (each
reward's sign with ``clip_rewards``) and ``learning_terminated`` (also true where a life was
lost, with ``episodic_life``). Returns, fitness and ``agile evaluate`` therefore report game
scores, comparable with the published ones.

With ``fire_reset``, a game that waits for FIRE gets it after each reset (ale-py's vector does
that) and on the step after each lost life, whatever the agent chose there: the step that
CleanRL's and SB3's pipelines (an episodic-life reset, then FireResetEnv) take out of the
agent's hands. Without it, a greedy policy that never fires would wait out the episode's
27,000 steps at every evaluation.

Copies are seeded one by one: ``reset(seed=s)`` seeds copy ``i`` with ``s + i``, as
gymnasium's vector environments do.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import gymnasium as gym
import numpy as np

from agile_rl.models.gymnasium import AtariSpec, GymnasiumEnvSpec

#: ale-py's vector environment's limit on an episode's frames (v5's, 27,000 agent steps at a
#: frame skip of 4) where ``config`` sets none.
MAX_FRAMES = 108_000
#: v5's sticky actions, which ale-py's vector environment (and EnvPool) would otherwise leave
#: at zero.
STICKY_ACTIONS = 0.25


def game_of(name: str) -> str:
    """ale-py's ROM name for an ``ALE/Game-v5`` id: ``ALE/SpaceInvaders-v5`` is
    ``space_invaders``."""
    game = name.removeprefix("ALE/").rsplit("-v", 1)[0]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", game).lower()


def atari_vector_env(spec: GymnasiumEnvSpec, *, seed: int | None = None) -> gym.vector.VectorEnv:
    """``spec.num_envs`` copies of ``spec.name``, preprocessed as ``spec.atari`` says, reset
    with ``seed``."""
    from ale_py.vector_env import AtariVectorEnv

    atari = spec.atari
    assert isinstance(atari, AtariSpec), "the spec asks for Atari preprocessing"
    config = spec.config
    envs = AtariVectorEnv(
        game=game_of(spec.name),
        num_envs=spec.num_envs,
        frameskip=atari.frame_skip,
        grayscale=atari.grayscale,
        stack_num=atari.frame_stack,
        img_height=atari.screen_size,
        img_width=atari.screen_size,
        noop_max=atari.noop_max,
        use_fire_reset=atari.fire_reset,
        episodic_life=False,  # the learner's view: LearningSignals
        reward_clipping=False,
        repeat_action_probability=float(config.get("repeat_action_probability", STICKY_ACTIONS)),
        full_action_space=bool(config.get("full_action_space", False)),
        max_num_frames_per_episode=int(config.get("max_num_frames_per_episode", MAX_FRAMES)),
    )
    wrapped = LearningSignals(envs, atari, fire=fire_action(spec) if atari.fire_reset else None)
    wrapped.reset(seed=seed)
    return wrapped


def fire_action(spec: GymnasiumEnvSpec) -> int | None:
    """The index of FIRE among the game's actions (None for a game without it)."""
    return _fire_index(spec.name, bool(spec.config.get("full_action_space", False)))


@functools.cache
def _fire_index(name: str, full: bool) -> int | None:
    """:func:`fire_action`, asked once a process (making the game loads its ROM)."""
    game = gym.make(name, full_action_space=full)
    try:
        meanings: list[str] = game.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
    finally:
        game.close()
    return meanings.index("FIRE") if "FIRE" in meanings else None


class LearningSignals(gym.vector.VectorWrapper):
    """Adds to each step's infos what the learner sees of it (see the module): rewards
    clipped to their sign, and an episode's end where a life was lost. :meth:`render` draws
    what the agent sees (``agile evaluate --video``).

    :param env: a vector of Atari games whose infos carry ``lives``.
    :param atari: the preprocessing's options.
    :param fire: the FIRE action to press on the step after a lost life; None: none.
    :param fire_starts: press it on each episode's first step too, for a vector that presses
        none after its resets (EnvPool's own press is lost to sticky actions in about a third
        of them).
    """

    def __init__(
        self,
        env: gym.vector.VectorEnv,
        atari: AtariSpec,
        fire: int | None,
        fire_starts: bool = False,
    ) -> None:
        super().__init__(env)
        self.atari = atari
        self.fire = fire
        self.fire_starts = fire_starts
        self.lives = np.zeros(env.num_envs, dtype=np.int64)
        self.fire_due = np.zeros(env.num_envs, dtype=bool)
        self.ended = np.zeros(env.num_envs, dtype=bool)
        self.last_obs: np.ndarray | None = None
        self.metadata = {"render_modes": ["rgb_array"], "render_fps": 60 // atari.frame_skip}

    def reset(self, *, seed: int | None = None, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset every copy, copy ``i`` from ``seed + i`` (seeds folded into the C integers
        the emulator takes: ``seed`` modulo 2**31 less the copies)."""
        if seed is not None:
            seed = int(seed) % (2**31 - self.num_envs)
        obs, infos = self.env.reset(seed=seed, **kwargs)
        self.lives = np.asarray(infos["lives"], dtype=np.int64).copy()
        self.fire_due[:] = self.fire_starts
        self.ended[:] = False
        self.last_obs = obs
        return obs, infos

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        if self.fire is not None and self.fire_due.any():
            actions = np.where(self.fire_due, self.fire, np.asarray(actions))
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        lives = np.asarray(infos["lives"], dtype=np.int64)
        rewards = learning = np.asarray(rewards, dtype=np.float32)  # ale-py gives integers
        infos["learning_rewards"] = np.sign(learning) if self.atari.clip_rewards else learning
        ended = np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
        lost = (lives < self.lives) & ~ended
        infos["learning_terminated"] = np.asarray(terminated, dtype=bool) | (
            lost & self.atari.episodic_life
        )
        # the copies the last step ended reset at this one: their episodes start at the next
        self.fire_due = lost | (self.ended & self.fire_starts)
        self.ended = ended
        self.lives = lives.copy()
        self.last_obs = obs
        return obs, rewards, terminated, truncated, infos

    def render(self) -> tuple[np.ndarray, ...] | None:
        """The newest frame of each copy's last observation, RGB and twice the size."""
        if self.last_obs is None:
            return None
        frames = self.last_obs[:, -1]  # [N, H, W] in grayscale, [N, H, W, 3] in colour
        if frames.ndim == 3:
            frames = np.repeat(frames[..., None], 3, axis=-1)
        return tuple(frame.repeat(2, axis=0).repeat(2, axis=1) for frame in frames)
