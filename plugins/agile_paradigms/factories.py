"""What the RL paradigms build for a run: runners, replay buffers and team environments."""

from __future__ import annotations

from typing import Any, cast

import torch

from agile_cli import (
    MultiAgentOffPolicyRunner,
    MultiAgentOnPolicyRunner,
    NStepAccumulator,
    OffPolicyRunner,
    OnPolicyRunner,
    ReplayBuffer,
    TrainingManifest,
    experience,
)
from agile_paradigms.spec import OffPolicyTraining, TeamTraining


def replay_buffer(manifest: TrainingManifest, env: Any, device: torch.device) -> ReplayBuffer:
    return experience.replay_buffer(manifest, env, device, gamma=experience.discount(manifest))


def team_replay_buffer(manifest: TrainingManifest, env: Any, device: torch.device) -> ReplayBuffer:
    gamma = experience.discount(manifest)
    return experience.team_replay_buffer(manifest, env, device, gamma=gamma)


def team_environment(env: Any, manifest: TrainingManifest) -> Any:
    training = cast(TeamTraining, manifest.training)
    return experience.team_environment(env, sum_scores=training.sum_scores)


def off_policy_runner(
    manifest: TrainingManifest, env: Any, buffer: ReplayBuffer
) -> OffPolicyRunner:
    """Learns from the shared buffer, through an n-step accumulator when the buffer holds
    n-step returns."""
    spec = experience.replay_spec(manifest)
    n_step = None
    if spec.n_step_buffer:
        gamma = experience.discount(manifest)
        n_step = NStepAccumulator(spec.n_step_buffer_args.n_step, gamma, env.num_envs)
    delay = cast(OffPolicyTraining, manifest.training).learning_delay
    return OffPolicyRunner(env, buffer, learning_delay=delay, n_step=n_step)


def on_policy_runner(manifest: TrainingManifest, env: Any, buffer: None) -> OnPolicyRunner:
    return OnPolicyRunner(env)


def team_off_policy_runner(
    manifest: TrainingManifest, env: Any, buffer: ReplayBuffer
) -> MultiAgentOffPolicyRunner:
    delay = cast(OffPolicyTraining, manifest.training).learning_delay
    return MultiAgentOffPolicyRunner(env, buffer, learning_delay=delay)


def team_on_policy_runner(
    manifest: TrainingManifest, env: Any, buffer: None
) -> MultiAgentOnPolicyRunner:
    return MultiAgentOnPolicyRunner(env)
