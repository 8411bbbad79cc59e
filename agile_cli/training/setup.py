"""Building what a local run needs from a validated manifest: device, environment, population,
and, through the algorithm's paradigm, the shared buffer and the runner."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from agile_cli.errors import TrainingError, UsageError
from agile_cli.host.registry import ParadigmEntry, Registry
from agile_cli.manifest import TrainingManifest
from agile_cli.nn.arch import NetworkArch, arch_from_spec
from agile_cli.paradigm import Paradigm
from agile_cli.runtime.agent import AgentContext, Algorithm, OffPolicyAlgorithm
from agile_cli.runtime.member import Member, missing_methods
from agile_cli.training.runners import Runner


def resolve_device(device: str) -> torch.device:
    """``auto`` picks CUDA when available; asking for an absent CUDA is a usage error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available", "use --device cpu or auto")
    try:
        return torch.device(device)
    except RuntimeError:
        raise UsageError(f"unknown device '{device}'", "use cpu, cuda, cuda:N or auto") from None


def build_environment(manifest: TrainingManifest, registry: Registry, seed: int) -> Any:
    """The vector environment the population trains and is evaluated on."""
    return build_environment_from(manifest.environment, manifest, registry, seed)


def build_environment_from(
    spec: Any, manifest: TrainingManifest, registry: Registry, seed: int
) -> Any:
    """A vector environment for ``spec`` by the manifest's environment builder, as the
    algorithm's paradigm wraps it."""
    paradigm = _paradigm(manifest)
    entry = registry.environment_for(paradigm.name, manifest.environment_builder)
    if entry is None:
        raise TrainingError(f"no environment builder for {paradigm.name} algorithms")
    env = entry.load()().build(spec, seed=seed)
    return paradigm_of(manifest).environment(manifest, env)


def _paradigm(manifest: TrainingManifest) -> ParadigmEntry:
    assert manifest.paradigm is not None, "a resolved manifest names its paradigm"
    return manifest.paradigm


def paradigm_of(manifest: TrainingManifest) -> Paradigm:
    """The implementation of the manifest's paradigm.

    :raises TrainingError: the registration names something that is not an
        :class:`~agile_cli.Paradigm` subclass.
    """
    entry = _paradigm(manifest)
    cls = entry.load()
    if not (isinstance(cls, type) and issubclass(cls, Paradigm)):
        raise TrainingError(
            f"the {entry.name} paradigm's implementation ({entry.implementation}) is not an "
            "agile_cli.Paradigm subclass",
            f"fix plugin '{entry.plugin}'",
        )
    return cls()


def algorithm_class(manifest: TrainingManifest, registry: Registry) -> type[Member]:
    """The implementation class of the manifest's algorithm (imported now): an
    :class:`~agile_cli.Algorithm` subclass, or any class with the methods of
    :class:`~agile_cli.Member`.

    :raises TrainingError: it is not a class, or it lacks some of those methods (named).
    """
    entry = registry.algorithms[manifest.algorithm_name]
    cls = entry.load()
    if not isinstance(cls, type):
        raise TrainingError(f"{entry.implementation} is not an agile_cli Algorithm subclass")
    if missing := missing_methods(cls):
        raise TrainingError(
            f"{entry.implementation} is not an agile_cli Algorithm subclass, and lacks "
            f"{', '.join(missing)} of the agile_cli.Member contract",
            "subclass agile_cli.Algorithm, or give the class every method agile_cli.Member lists",
        )
    if issubclass(cls, Algorithm) and cls.group_learner is None:
        defaults = [name for name in ("act", "learn") if _inherits_default(cls, name)]
        if defaults:
            raise TrainingError(
                f"{entry.implementation} names no group_learner and implements no "
                f"{' or '.join(defaults)}",
                "name a group learner (group_learner = ...), or implement act and learn",
            )
    return cls


def _inherits_default(cls: type[Algorithm], name: str) -> bool:
    """Whether ``cls`` takes method ``name`` from the base classes that run a group learner."""
    defaults = (vars(Algorithm).get(name), vars(OffPolicyAlgorithm).get(name))
    own = getattr(cls, name, None)
    return own is not None and own in defaults


def build_population(
    manifest: TrainingManifest,
    cls: type[Member],
    env: Any,
    context: AgentContext,
    arch: NetworkArch | None = None,
    size: int | None = None,
) -> list[Member]:
    """``size`` (default ``pop_size``) fresh members with indices 0, 1, ...: each built alone
    from the network section, or all together by the paradigm's ``population``."""
    paradigm = _paradigm(manifest)
    if paradigm.builds_population:
        return _paradigm_population(manifest, paradigm, cls, env, context, size)
    spaces = member_spaces(manifest, env)
    if arch is None:
        arch = _arch(manifest, env)
    members = []
    for index in range(size or manifest.training.pop_size):
        try:
            member = network_member(manifest, cls, spaces, arch, context, index)
        except NotImplementedError as exc:
            name, said = manifest.algorithm_name, str(exc)
            raise TrainingError(said if said.startswith(name) else f"{name}: {said}") from None
        members.append(member)
    return members


def network_member(
    manifest: TrainingManifest,
    cls: type[Member],
    spaces: dict[str, Any],
    arch: NetworkArch,
    context: AgentContext,
    index: int,
) -> Member:
    """One member built alone from the network section: ``cls`` constructed as
    :class:`~agile_cli.Algorithm` is, from the spec, :func:`member_spaces`, the architecture,
    the context and its index."""
    build: Callable[..., Member] = cls  # the contract says nothing of constructors
    return build(manifest.algorithm, **spaces, arch=arch, context=context, index=index)


def build_one_member(manifest: TrainingManifest, registry: Registry, env: Any) -> Member:
    """One member of the manifest's algorithm, built on the CPU for ``env``'s spaces as
    training would build it: how ``agile validate --check-env`` and ``agile init`` ask whether
    an algorithm takes an environment.

    :raises AgileError: the algorithm refuses the spaces (``NotImplementedError`` in its
        ``build()`` arrives as a :class:`TrainingError`); anything else is its plugin's bug.
    """
    context = AgentContext(
        torch.device("cpu"), env.num_envs, manifest.training,
        network=manifest.network, replay_buffer=manifest.replay_buffer,
    )  # fmt: skip
    cls = algorithm_class(manifest, registry)
    return build_population(manifest, cls, env, context, size=1)[0]


def _paradigm_population(
    manifest: TrainingManifest,
    paradigm: ParadigmEntry,
    cls: type[Member],
    env: Any,
    context: AgentContext,
    size: int | None,
) -> list[Member]:
    wanted = size or manifest.training.pop_size
    members = list(paradigm_of(manifest).population(manifest, cls, env, context, wanted))
    if len(members) != wanted or not all(isinstance(m, Member) for m in members):
        raise TrainingError(
            f"the {paradigm.name} paradigm's population ({paradigm.implementation}) "
            f"returned {len(members)} object(s), not {wanted} agile_cli.Member members",
            f"fix the factory of plugin '{paradigm.plugin}'",
        )
    return members


def member_spaces(manifest: TrainingManifest, env: Any) -> dict[str, Any]:
    """The constructor arguments that describe what members observe and do."""
    if _paradigm(manifest).multi_agent:
        return {
            "observation_spaces": env.single_observation_spaces,
            "action_spaces": env.single_action_spaces,
        }
    return {
        "observation_space": env.single_observation_space,
        "action_space": env.single_action_space,
    }


def describe_spaces(spaces: dict[str, Any]) -> dict[str, str]:
    """:func:`member_spaces` as text, to record in checkpoints and compare on resume."""
    return {name: repr(space) for name, space in spaces.items()}


def _arch(manifest: TrainingManifest, env: Any) -> NetworkArch:
    """The architecture of the network section; a team's agents share one, which must suit
    every agent's observations."""
    if _paradigm(manifest).multi_agent:
        observed = list(env.single_observation_spaces.values())
    else:
        observed = [env.single_observation_space]
    recurrent = bool(getattr(manifest.algorithm, "recurrent", False))
    norm = manifest.algorithm.normalised_latent
    try:
        archs = [
            arch_from_spec(manifest.evolvable_network, s, recurrent=recurrent, latent_norm=norm)
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


def build_buffer(manifest: TrainingManifest, env: Any, device: torch.device) -> Any:
    """What the whole population shares (a replay buffer), as the paradigm builds it; None
    when it keeps nothing."""
    return paradigm_of(manifest).buffer(manifest, env, device)


def build_runner(manifest: TrainingManifest, env: Any, buffer: Any) -> Runner[Any]:
    """The runner that trains one member for one generation, as the paradigm builds it."""
    paradigm = _paradigm(manifest)
    runner = paradigm_of(manifest).runner(manifest, env, buffer)
    if not isinstance(runner, Runner):
        raise TrainingError(
            f"the {paradigm.name} paradigm's runner ({paradigm.implementation}) made a "
            f"{type(runner).__name__}, not an agile_cli.Runner",
            f"make the runner subclass agile_cli.Runner (plugin '{paradigm.plugin}')",
        )
    return runner


def seeds(seed: int) -> dict[str, int]:
    """Independent seeds for each consumer of randomness, derived from the run's seed."""
    names = ("environment", "members", "mutation", "selection")
    children = np.random.SeedSequence(seed).spawn(len(names))
    return {
        name: int(child.generate_state(1)[0]) for name, child in zip(names, children, strict=True)
    }
