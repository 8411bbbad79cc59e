"""Members trained away from the evolutionary loop: what a worker of a distributed backend
runs.

The loop (:class:`~agile_cli.training.loop.EvolutionLoop`) keeps evaluation, selection,
mutation and checkpoints; a backend that trains members elsewhere gives it a runner
(:data:`RunnerFactory`) whose ``train_population`` ships each member's ``state_dict`` to a
:class:`MemberTrainer`, and loads back the states it returns. A trainer owns an environment
(and, off-policy, a replay buffer) for a fixed *slot* of the population: members come and go
through it as selection replaces them, while its environment and buffer stay, as the local
backend's shared buffer stays across generations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agile_cli.host.plugins import installed_registry
from agile_cli.host.registry import Registry
from agile_cli.manifest import TrainingManifest
from agile_cli.member import AgentContext, Member
from agile_cli.runner import GenerationStats, Progress, Runner
from agile_cli.training import setup

#: What a backend gives the loop to train members its own way: called with the validated
#: manifest, the run's seed and a way to tell the user something (a line under the progress
#: display), it returns the runner whose ``train_population`` and ``evaluate_population`` the
#: loop calls each generation.
RunnerFactory = Callable[[TrainingManifest, int, Callable[[str], None]], Runner[Any]]


@dataclass
class MemberOutcome:
    """One member after a generation: its state (tensors on the CPU), what it did, and its
    fitness."""

    state: dict[str, Any]
    stats: GenerationStats
    fitness: float


def slot_sizes(population: int, slots: int) -> list[int]:
    """How many members each of ``slots`` slots holds: as even as can be, larger first."""
    slots = max(1, min(slots, population))
    base, extra = divmod(population, slots)
    return [base + (1 if slot < extra else 0) for slot in range(slots)]


def slot_seed(seed: int, slot: int) -> int:
    """The environment seed of ``slot`` in a run seeded ``seed`` (independent per slot)."""
    root = setup.seeds(seed)["environment"]
    return int(np.random.SeedSequence([root, slot]).generate_state(1)[0])


class MemberTrainer:
    """Trains the members of one slot for a generation at a time, from their state dicts.

    :param manifest: the run's manifest (validated here again, against this process's plugins).
    :param slot: which slot of the population this is (it seeds the environment).
    :param seed: the run's seed.
    :param members: how many members the slot holds, trained at once.
    :param per_member: every member a group of one (none shares a computation).
    :param threads: torch threads for this process (default: left as they are).
    """

    def __init__(
        self,
        manifest: TrainingManifest | Mapping[str, Any],
        *,
        slot: int = 0,
        seed: int = 0,
        members: int = 1,
        device: str = "auto",
        per_member: bool = False,
        threads: int | None = None,
        registry: Registry | None = None,
    ) -> None:
        registry = registry if registry is not None else installed_registry()
        self.manifest = TrainingManifest.get_validated(manifest, registry=registry)
        if threads is not None:
            torch.set_num_threads(max(1, threads))
        self.device = setup.resolve_device(device)
        self.members = members
        cls = setup.algorithm_class(self.manifest, registry)
        env_seed = slot_seed(seed, slot)
        self.env = setup.build_environment(self.manifest, registry, env_seed, members)
        context = AgentContext(
            device=self.device,
            num_envs=setup.member_envs(self.env, members),
            training=self.manifest.training,
            seed=setup.seeds(seed)["members"],
            network=self.manifest.network,
            replay_buffer=self.manifest.replay_buffer,
            mutation=self.manifest.mutation,
        )
        self.template = setup.build_population(self.manifest, cls, self.env, context, size=1)[0]
        #: What the slot's members share (a replay buffer), or None.
        self.buffer = setup.build_buffer(self.manifest, self.env, self.device)
        self.runner = setup.build_runner(self.manifest, self.env, self.buffer)
        self.runner.stack = not per_member

    def member(self, state: dict[str, Any]) -> Member:
        """A member restored from ``state`` (a :meth:`~agile_cli.Member.state_dict`)."""
        member = self.template.clone(int(state["index"]))
        member.load_state_dict(state)
        return member

    def train(
        self,
        states: list[dict[str, Any]],
        steps: int,
        rounds: int,
        eval_steps: int | None,
        progress: Progress | None = None,
    ) -> list[MemberOutcome]:
        """Train the members ``states`` describe for about ``steps`` steps each, then score
        them (``rounds`` evaluation rounds of at most ``eval_steps`` steps).

        :param progress: called as the runner's is (``progress(n)`` as steps are done); an
            :class:`~agile_rl.training.runners.EpisodeProgress` also hears of each finished
            training episode's return, for a backend that shows them while the members train.
        """
        members = [self.member(state) for state in states]
        scored = self.train_members(members, steps, rounds, eval_steps, progress)
        return [
            MemberOutcome(on_cpu(member.state_dict()), stat, fitness)
            for member, (stat, fitness) in zip(members, scored, strict=True)
        ]

    def train_members(
        self,
        members: list[Member],
        steps: int,
        rounds: int,
        eval_steps: int | None,
        progress: Progress | None = None,
    ) -> list[tuple[GenerationStats, float]]:
        """:meth:`train` for members this process holds: trained in place, and each one's
        stats and fitness."""
        if len(members) != self.members:
            raise ValueError(f"this slot holds {self.members} members, not {len(members)}")
        stats = self.runner.train_population(members, steps, progress or _ignore)
        fitnesses = self.runner.evaluate_population(members, rounds, eval_steps)
        return [(stat, float(fitness)) for stat, fitness in zip(stats, fitnesses, strict=True)]

    def close(self) -> None:
        self.env.close()


def on_cpu(value: Any) -> Any:
    """``value`` with every tensor in it moved to the CPU (dicts, lists and tuples walked)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {key: on_cpu(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(on_cpu(item) for item in value)
    return value


def _ignore(steps: int) -> None:
    """A progress callback that shows nothing."""
