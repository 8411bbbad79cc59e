"""Building blocks for paradigm plugins: the population's environment, the shared replay
buffers and the team environment.

A paradigm's ``buffer`` and ``environment`` factories (see ``agile_register_paradigms``) may
call these instead of writing their own; they read only the manifest's public sections.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    import torch

    from agile_cli import Build, TrainingManifest
    from agile_rl.models.replay_buffer import ReplayBufferSpec
    from agile_rl.runtime.buffers import ReplayBuffer
    from agile_rl.runtime.team_env import TeamEnv


class Discounted(Protocol):
    """An algorithm spec with a discount factor (a paradigm that needs one requires the field
    with ``algorithm_fields={"gamma": float}``)."""

    gamma: float


class _Vectorised(Protocol):
    """An environment section with a ``num_envs`` field: the copies one build steps."""

    num_envs: int


def discount(manifest: TrainingManifest) -> float:
    """The algorithm's ``gamma``, which the paradigm made every algorithm declare."""
    return float(cast(Discounted, manifest.algorithm).gamma)


def replay_spec(manifest: TrainingManifest) -> ReplayBufferSpec:
    """The manifest's ``replay_buffer`` section (filled in for every paradigm with a buffer)."""
    from agile_rl.models.replay_buffer import ReplayBufferSpec

    spec = manifest.replay_buffer
    assert isinstance(spec, ReplayBufferSpec), "the RL paradigms declare this section"
    return spec


def replay_buffer(
    manifest: TrainingManifest, env: Any, device: torch.device, *, gamma: float
) -> ReplayBuffer:
    """A single-agent replay buffer as the ``replay_buffer`` section describes it (prioritised
    when ``per_buffer``; keeping each n-step row's first step for :func:`keeps_first_steps`),
    for ``env``'s observation and action spaces."""
    from agile_rl.runtime.buffers import PrioritizedReplayBuffer, ReplayBuffer

    spec = replay_spec(manifest)
    spaces = (env.single_observation_space, env.single_action_space)
    first = keeps_first_steps(manifest)
    if spec.per_buffer:
        return PrioritizedReplayBuffer(
            spec.max_size, *spaces, gamma=gamma, alpha=spec.per_buffer_args.alpha,
            device=device, first_steps=first,
        )  # fmt: skip
    return ReplayBuffer(spec.max_size, *spaces, gamma=gamma, device=device, first_steps=first)


def keeps_first_steps(manifest: TrainingManifest) -> bool:
    """Whether the replay buffer keeps the one-step transition each n-step row starts with:
    for an algorithm that learns from both returns (RainbowDQN's ``combined_reward``)."""
    from agile_rl.spec import RLOptions

    algorithm = manifest.algorithm
    wanted = isinstance(algorithm, RLOptions) and algorithm.learns_from_first_steps()
    return wanted and replay_spec(manifest).n_step_buffer


def team_replay_buffer(
    manifest: TrainingManifest, env: Any, device: torch.device, *, gamma: float
) -> ReplayBuffer:
    """A replay buffer of every agent's transitions, for a :class:`TeamEnv`'s spaces."""
    from agile_rl.runtime.buffers import MultiAgentReplayBuffer

    return MultiAgentReplayBuffer(
        replay_spec(manifest).max_size, env.single_observation_spaces, env.single_action_spaces,
        gamma=gamma, device=device,
    )  # fmt: skip


def team_environment(env: Any, *, sum_scores: bool) -> TeamEnv:
    """A multi-agent vector environment as one team: rewards summed into one score (or kept
    per agent) and a copy's episode ending when every agent is done."""
    from agile_rl.runtime.team_env import TeamEnv

    return TeamEnv(env, sum_scores)


def population_environment(build: Build, members: int) -> Any:
    """The environment in which ``members`` members each step their own sub-environments:
    one vector environment of ``members`` times the section's ``num_envs``, member ``i``
    owning the ``i``-th block of rows. Subprocess environments run in this process instead
    once there would be more than twice as many as CPU cores (the processes would only
    compete for them). A builder whose section has no ``num_envs`` is built once per member,
    the copies stepped side by side as one (:class:`~agile_rl.runtime.side_by_side.
    SideBySideEnv`)."""
    fields = type(build.spec).model_fields
    if members == 1:
        return build()
    if "num_envs" not in fields:
        from agile_rl.runtime.side_by_side import SideBySideEnv

        return SideBySideEnv([build() for _ in range(members)])
    count = int(cast(_Vectorised, build.spec).num_envs) * members  # a field: checked above
    changes: dict[str, Any] = {"num_envs": count}
    if "sync" in fields and count > 2 * (os.cpu_count() or 1):
        changes["sync"] = True
    return build(**changes)
