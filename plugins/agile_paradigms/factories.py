"""The RL paradigms' implementations: what each builds for a run (runners, replay buffers,
team environments)."""

from __future__ import annotations

from typing import Any, cast

import torch

from agile_cli import (
    MultiAgentOffPolicyRunner,
    MultiAgentOnPolicyRunner,
    NStepAccumulator,
    OffPolicyRunner,
    OnPolicyRunner,
    Paradigm,
    ReplayBuffer,
    TrainingManifest,
    experience,
)
from agile_paradigms.spec import OffPolicyTraining, TeamTraining


class OffPolicy(Paradigm):
    """Act, store transitions in the replay buffer the population shares, learn from batches
    of it (through an n-step accumulator when the buffer holds n-step returns)."""

    def buffer(self, manifest: TrainingManifest, env: Any, device: torch.device) -> ReplayBuffer:
        return experience.replay_buffer(manifest, env, device, gamma=experience.discount(manifest))

    def runner(self, manifest: TrainingManifest, env: Any, buffer: Any) -> OffPolicyRunner:
        spec = experience.replay_spec(manifest)
        n_step = None
        if spec.n_step_buffer:
            gamma = experience.discount(manifest)
            n_step = NStepAccumulator(spec.n_step_buffer_args.n_step, gamma, env.num_envs)
        delay = cast(OffPolicyTraining, manifest.training).learning_delay
        return OffPolicyRunner(env, buffer, learning_delay=delay, n_step=n_step)


class OnPolicy(Paradigm):
    """Collect a rollout of ``learn_step`` steps, learn from it, repeat."""

    def runner(self, manifest: TrainingManifest, env: Any, buffer: Any) -> OnPolicyRunner:
        return OnPolicyRunner(env)


class Team(Paradigm):
    """What both multi-agent paradigms share: the agents' parallel environment as one team."""

    def environment(self, manifest: TrainingManifest, env: Any) -> Any:
        training = cast(TeamTraining, manifest.training)
        return experience.team_environment(env, sum_scores=training.sum_scores)


class TeamOffPolicy(Team):
    """A team acts; every agent's transitions go to the replay buffer the population shares."""

    def buffer(self, manifest: TrainingManifest, env: Any, device: torch.device) -> ReplayBuffer:
        gamma = experience.discount(manifest)
        return experience.team_replay_buffer(manifest, env, device, gamma=gamma)

    def runner(
        self, manifest: TrainingManifest, env: Any, buffer: Any
    ) -> MultiAgentOffPolicyRunner:
        delay = cast(OffPolicyTraining, manifest.training).learning_delay
        return MultiAgentOffPolicyRunner(env, buffer, learning_delay=delay)


class TeamOnPolicy(Team):
    """A team collects a rollout per agent and learns from it."""

    def runner(self, manifest: TrainingManifest, env: Any, buffer: Any) -> MultiAgentOnPolicyRunner:
        return MultiAgentOnPolicyRunner(env)
