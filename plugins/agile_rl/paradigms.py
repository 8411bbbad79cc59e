"""The RL paradigms' implementations: what each builds for a run (members, runners, replay
buffers, team environments), on :class:`RLParadigm`, the base any RL paradigm can build on."""

from __future__ import annotations

from typing import Any, cast

import torch

from agile_cli import (
    AgentContext,
    Build,
    Member,
    Need,
    Paradigm,
    TrainingError,
    TrainingManifest,
)
from agile_cli.helpers import member_spaces
from agile_rl import experience
from agile_rl.models.gymnasium import GymnasiumEnvSpec
from agile_rl.models.network import CNNEncoderConfig, CnnLstmEncoderConfig, evolvable_network
from agile_rl.nn.arch import NetworkArch, arch_from_spec
from agile_rl.runtime.agent import Algorithm, OffPolicyAlgorithm, OnPolicyAlgorithm
from agile_rl.runtime.buffers import NStepAccumulator, ReplayBuffer
from agile_rl.spec import OffPolicyTraining, RLOptions, TeamTraining
from agile_rl.training import budget
from agile_rl.training.multi_agent_on_policy import MultiAgentOnPolicyRunner
from agile_rl.training.on_policy import OnPolicyRunner
from agile_rl.training.runners import MultiAgentOffPolicyRunner, OffPolicyRunner


class RLParadigm(Paradigm):
    """The base of the RL paradigms: each member is built alone from the manifest's network
    section (:class:`~agile_rl.Algorithm`'s constructor), and the run's memory is estimated
    from the networks, the replay buffer and the rollouts (:mod:`agile_rl.training.budget`)."""

    def population(
        self,
        manifest: TrainingManifest,
        cls: type[Member],
        env: Any,
        context: AgentContext,
        size: int,
    ) -> list[Member]:
        check_algorithm_class(cls, manifest.algorithm_name)
        spaces = member_spaces(manifest, env)
        arch = network_arch(manifest, _observed(manifest, env))
        build: Any = cls  # the contract says nothing of constructors
        return [
            build(manifest.algorithm, **spaces, arch=arch, context=context, index=index)
            for index in range(size)
        ]

    def memory_needs(self, manifest: TrainingManifest, env: Any, members: int) -> list[Need]:
        return budget.needs(manifest, env, members)

    def torch_threads(self, manifest: TrainingManifest) -> int | None:
        """One for vector observations: the networks' operations are too small to gain from
        sharing, and threads that wait on each other collapse when other processes hold the
        cores (measured in docs/training.md). Convolutional encoders (images, Atari), whose
        arithmetic shares well, take torch's own (one per core): the reference's image
        manifest's CNN on 128 raw Breakout frames took 0.42 s a forward and backward pass on
        one thread, 0.21 s on two."""
        encoder = getattr(getattr(manifest, "network", None), "encoder_config", None)
        images = isinstance(encoder, CNNEncoderConfig | CnnLstmEncoderConfig)
        environment = manifest.environment
        atari = isinstance(environment, GymnasiumEnvSpec) and environment.atari is not None
        return None if images or atari else 1


def check_algorithm_class(cls: type[Member], name: str) -> None:
    """Refuse an :class:`~agile_rl.Algorithm` subclass that names no group learner and
    implements no ``act`` or ``learn`` (on-policy, no ``policy_step`` or ``learn``): it could
    not act or learn.

    :raises TrainingError: naming what is missing and what to do.
    """
    if not issubclass(cls, Algorithm) or cls.group_learner is not None:
        return
    methods = (
        ("act", "policy_step", "learn") if issubclass(cls, OnPolicyAlgorithm) else ("act", "learn")
    )
    defaults = [method for method in methods if _inherits_default(cls, method)]
    if defaults:
        raise TrainingError(
            f"{cls.__module__}:{cls.__qualname__} names no group_learner and implements no "
            f"{' or '.join(defaults)}",
            "name a group learner (group_learner = ...), or implement what is missing",
        )


def _inherits_default(cls: type[Algorithm], name: str) -> bool:
    """Whether ``cls`` takes method ``name`` from the base classes that run a group learner."""
    defaults = tuple(
        vars(base).get(name) for base in (Algorithm, OffPolicyAlgorithm, OnPolicyAlgorithm)
    )
    own = getattr(cls, name, None)
    return own is not None and own in defaults


def network_arch(manifest: TrainingManifest, observed: list[Any]) -> NetworkArch:
    """The architecture of the network section for members observing ``observed`` spaces; a
    team's agents share one, which must suit every agent's observations.

    :raises TrainingError: the section cannot read these observations, or the agents' call
        for different encoders.
    """
    recurrent = bool(getattr(manifest.algorithm, "recurrent", False))
    norm = RLOptions.has(type(manifest.algorithm), "normalised_latent")
    try:
        archs = [
            arch_from_spec(evolvable_network(manifest), s, recurrent=recurrent, latent_norm=norm)
            for s in observed
        ]
    except NotImplementedError as exc:
        raise TrainingError(str(exc)) from None
    kinds = {type(arch.encoder).__name__ for arch in archs}
    if len(kinds) > 1:
        raise TrainingError(
            f"the agents' observations call for different encoders ({', '.join(sorted(kinds))})",
            "a team shares one architecture: flatten or wrap the observations so they match",
        )
    return archs[0]


def _observed(manifest: TrainingManifest, env: Any) -> list[Any]:
    """Every space the members' networks read: each agent's for a team, else the one."""
    spaces = member_spaces(manifest, env)
    if "observation_spaces" in spaces:
        return list(spaces["observation_spaces"].values())
    return [spaces["observation_space"]]


class SideBySide(RLParadigm):
    """A paradigm whose members step side by side, each in its own sub-environments of one
    environment built for the population (:func:`~agile_rl.experience.
    population_environment`)."""

    def environment(self, manifest: TrainingManifest, build: Build, members: int) -> Any:
        return experience.population_environment(build, members)


class OffPolicy(SideBySide):
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


class OnPolicy(SideBySide):
    """Collect a rollout of ``learn_step`` steps, learn from it, repeat."""

    def runner(self, manifest: TrainingManifest, env: Any, buffer: Any) -> OnPolicyRunner:
        return OnPolicyRunner(env)


class Team(SideBySide):
    """What both multi-agent paradigms share: the agents' parallel environment as one team."""

    def environment(self, manifest: TrainingManifest, build: Build, members: int) -> Any:
        training = cast(TeamTraining, manifest.training)
        env = super().environment(manifest, build, members)
        return experience.team_environment(env, sum_scores=training.sum_scores)


class TeamOffPolicy(Team):
    """A team acts; every agent's transitions go to the replay buffer the population shares.
    Teams whose networks stack act and learn as one computation, as single agents do."""

    def buffer(self, manifest: TrainingManifest, env: Any, device: torch.device) -> ReplayBuffer:
        gamma = experience.discount(manifest)
        return experience.team_replay_buffer(manifest, env, device, gamma=gamma)

    def runner(
        self, manifest: TrainingManifest, env: Any, buffer: Any
    ) -> MultiAgentOffPolicyRunner:
        delay = cast(OffPolicyTraining, manifest.training).learning_delay
        return MultiAgentOffPolicyRunner(env, buffer, learning_delay=delay)


class TeamOnPolicy(Team):
    """A team collects a rollout per agent and learns from it; teams whose networks stack act
    and learn as one computation."""

    def runner(self, manifest: TrainingManifest, env: Any, buffer: Any) -> MultiAgentOnPolicyRunner:
        return MultiAgentOnPolicyRunner(env)
