"""Building what a local run needs from a validated manifest: device, environment, population,
and, through the algorithm's paradigm, the shared buffer and the runner."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from agile_cli import memory
from agile_cli.errors import TrainingError, UsageError
from agile_cli.host.registry import ParadigmEntry, Registry
from agile_cli.manifest import TrainingManifest
from agile_cli.member import AgentContext, Member, missing_methods
from agile_cli.paradigm import Paradigm
from agile_cli.runner import Runner


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


def build_environment(
    manifest: TrainingManifest, registry: Registry, seed: int, members: int = 1
) -> Any:
    """The vector environment ``members`` members of the population train in at once."""
    return build_environment_from(manifest.environment, manifest, registry, seed, members)


def build_environment_from(
    spec: Any, manifest: TrainingManifest, registry: Registry, seed: int, members: int = 1
) -> Any:
    """The environment the algorithm's paradigm makes of ``spec`` for ``members`` members,
    built by the manifest's environment builder."""
    paradigm = _paradigm(manifest)
    entry = registry.environment_for(paradigm.name, manifest.environment_builder)
    if entry is None:
        raise TrainingError(f"no environment builder for {paradigm.name} algorithms")
    build = _Build(entry.load()(), spec, seed)
    return paradigm_of(manifest).environment(manifest, build, members)


class _Build:
    """A paradigm's :class:`~agile_cli.paradigm.Build`: the builder, the section, the seed."""

    def __init__(self, builder: Any, spec: Any, seed: int) -> None:
        self.builder, self.spec, self.seed = builder, spec, seed

    def __call__(self, **changes: Any) -> Any:
        spec = self.spec.model_copy(update=changes) if changes else self.spec
        return self.builder.build(spec, seed=self.seed)


def member_envs(env: Any, members: int) -> int:
    """Each member's share of ``env``'s sub-environments, where ``members`` step side by side
    in it; all of them where they take turns (a count that does not divide)."""
    count = int(env.num_envs)
    return count // members if count % members == 0 else count


def _paradigm(manifest: TrainingManifest) -> ParadigmEntry:
    assert manifest.paradigm is not None, "a resolved manifest names its paradigm"
    return manifest.paradigm


def paradigm_of(manifest: TrainingManifest) -> Paradigm:
    """The implementation of the manifest's paradigm: one instance per paradigm class, made on
    first use (a paradigm builds what runs need and keeps nothing of its own).

    :raises TrainingError: the registration names something that is not an
        :class:`~agile_cli.Paradigm` subclass.
    """
    entry = _paradigm(manifest)
    cls = entry.load()
    made = _MADE.get(cls)
    if made is None:
        made = _MADE[cls] = _checked(entry, cls)()
    return made


#: The paradigm instances made so far, by class.
_MADE: dict[type, Paradigm] = {}


def _checked(entry: ParadigmEntry, cls: Any) -> type[Paradigm]:
    """``cls``, once it is known to be a concrete :class:`~agile_cli.Paradigm` subclass."""
    if not (isinstance(cls, type) and issubclass(cls, Paradigm)):
        raise TrainingError(
            f"the {entry.name} paradigm's implementation ({entry.implementation}) is not an "
            "agile_cli.Paradigm subclass",
            f"fix plugin '{entry.plugin}'",
        )
    if missing := sorted(getattr(cls, "__abstractmethods__", ())):
        raise TrainingError(
            f"the {entry.name} paradigm's implementation ({entry.implementation}) does not "
            f"implement {', '.join(missing)} of agile_cli.Paradigm",
            f"implement them in plugin '{entry.plugin}' (an RL paradigm: subclass "
            "agile_rl.RLParadigm, which builds members from the network section)",
        )
    return cls


def algorithm_class(manifest: TrainingManifest, registry: Registry) -> type[Member]:
    """The implementation class of the manifest's algorithm (imported now): a class with the
    methods of :class:`~agile_cli.Member` (an RL algorithm has them from
    :class:`~agile_rl.Algorithm`).

    :raises TrainingError: it is not a class, or it lacks some of those methods (named).
    """
    entry = registry.algorithms[manifest.algorithm_name]
    cls = entry.load()
    if not isinstance(cls, type):
        raise TrainingError(f"{entry.implementation} is not a class of members")
    if missing := missing_methods(cls):
        raise TrainingError(
            f"{entry.implementation} lacks {', '.join(missing)} of the agile_cli.Member contract",
            "give the class every method agile_cli.Member lists (an RL algorithm: subclass "
            "agile_rl.Algorithm)",
        )
    return cls


def build_population(
    manifest: TrainingManifest,
    cls: type[Member],
    env: Any,
    context: AgentContext,
    size: int | None = None,
) -> list[Member]:
    """``size`` (default ``pop_size``) fresh members with indices 0, 1, ..., as the
    manifest's paradigm builds them.

    :raises TrainingError: the algorithm refuses the environment's spaces (it raised
        ``NotImplementedError``), or the paradigm returned something else than members.
    """
    entry = _paradigm(manifest)
    wanted = size or manifest.training.pop_size
    try:
        members = list(paradigm_of(manifest).population(manifest, cls, env, context, wanted))
    except NotImplementedError as exc:
        name, said = manifest.algorithm_name, str(exc)
        raise TrainingError(said if said.startswith(name) else f"{name}: {said}") from None
    if len(members) != wanted or not all(isinstance(m, Member) for m in members):
        raise TrainingError(
            f"the {entry.name} paradigm's population ({entry.implementation}) "
            f"returned {len(members)} object(s), not {wanted} agile_cli.Member members",
            f"fix the paradigm of plugin '{entry.plugin}'",
        )
    return members


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


def check_memory(
    manifest: TrainingManifest, env: Any, device: Any, members: int
) -> memory.Estimate:
    """Refuse a run whose paradigm's needs (``members`` training at once) and declared dataset
    cannot fit in the memory available (:mod:`agile_cli.memory`)."""
    needs = paradigm_of(manifest).memory_needs(manifest, env, members)
    return memory.check([*needs, memory.dataset_need(env)], device)


def seeds(seed: int) -> dict[str, int]:
    """Independent seeds for each consumer of randomness, derived from the run's seed."""
    names = ("environment", "members", "mutation", "selection")
    children = np.random.SeedSequence(seed).spawn(len(names))
    return {
        name: int(child.generate_state(1)[0]) for name, child in zip(names, children, strict=True)
    }
