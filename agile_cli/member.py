"""What the core needs of one population member: the :class:`Member` contract.

The evolutionary loop, selection, mutation, checkpoints, evaluation, export and the backends
use a member through these names only. The RL base class :class:`~agile_rl.Algorithm`
provides all of them; a member of another kind (an LLM adapter) may implement them directly.
Importing this module is cheap: it needs neither torch nor numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from agile_cli.models.algorithm import AlgorithmSpec
    from agile_cli.models.base import Spec
    from agile_cli.models.mutation import MutationSpec
    from agile_cli.models.training import TrainingSpec


@dataclass(frozen=True)
class AgentContext:
    """What every member of a population shares.

    :param device: where networks live.
    :param num_envs: environments stepped side by side.
    :param training: the manifest's training section.
    :param seed: base seed; member ``i`` derives its generators from ``(seed, i)``.
    :param network: the manifest's network section (algorithm-specific options such as
        ``squash_output`` live there).
    :param replay_buffer: the manifest's replay_buffer section, if any.
    :param mutation: the manifest's mutation section, if any (e.g. whether members measure
        their neurons' gradients for the dormant-neuron resets).
    """

    device: torch.device
    num_envs: int
    training: TrainingSpec
    seed: int = 0
    network: Spec | None = None
    replay_buffer: Spec | None = None
    mutation: MutationSpec | None = None


@dataclass
class MemberRecord:
    """Bookkeeping the core keeps per member; saved with it."""

    steps: int = 0
    fitness: list[float] = field(default_factory=list)
    episode_returns: list[float] = field(default_factory=list)
    mutation: str = "none"
    parent: int | None = None
    #: One entry per generation the member and its ancestors trained (a copy inherits its
    #: parent's): ``generation``, ``steps`` (per member, at its end), ``fitness``,
    #: ``mutation`` (what changed before it), ``hyperparameters`` and, where it changed (and
    #: first), the ``architecture`` of a :class:`Rebuildable` member. ``agile recipe`` writes
    #: it out as a schedule that retrains the member from scratch.
    lineage: list[dict[str, Any]] = field(default_factory=list)


class PolicyModule(Protocol):
    """What ``agile export`` writes: a torch module (``cpu()``, ``eval()``, called on
    observations) taking one tensor per input name to one per output name."""

    input_names: list[str]
    output_names: list[str]

    def example_inputs(self, batch: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """``batch`` observations per input, sampled from the spaces, to trace the module on."""
        ...

    def cpu(self) -> PolicyModule:
        """The module on the CPU."""
        ...

    def eval(self) -> PolicyModule:
        """The module in evaluation mode."""
        ...

    def __call__(self, *inputs: torch.Tensor) -> Any:
        """The greedy actions for ``inputs``."""
        ...


@runtime_checkable
class Member(Protocol):
    """One member of a population, as the core uses it.

    Architecture, activation and weight-noise mutations need the RL base's networks: mutation
    applies them to :class:`~agile_rl.Algorithm` members only (and reports "does not apply"
    for others), so an algorithm whose members are not ``Algorithm`` subclasses lists
    ``rl_hp`` alone in its spec's ``mutation_kinds``. Runners of a family may need more (the
    RL runners call ``learn``, ``policy_step`` and read ``generator``); that is between a
    paradigm's runner and its algorithms.
    """

    spec: AlgorithmSpec
    """The member's own copy of its spec: the loop reads ``default_mutable``, runners read
    their fields (``batch_size``, ``learn_step``)."""
    index: int
    """Unique within a run: the loop reports it, selection numbers copies, checkpoints and
    ``agile evaluate --member`` find members by it."""
    record: MemberRecord
    """The core's bookkeeping: runners add ``steps``, the loop ``fitness`` and
    ``episode_returns``, selection and mutation ``parent`` and ``mutation``."""
    context: AgentContext
    """What the population shares: runners derive reset seeds from ``seed`` and the budget
    from ``training``."""

    def hyperparameters(self) -> dict[str, float | int]:
        """Current mutable hyperparameters: the loop's report and ``rl_hp`` mutation read them."""
        ...

    def set_hyperparameter(self, name: str, value: float | int) -> None:
        """Change one hyperparameter (``rl_hp`` mutation, restoring a checkpoint)."""
        ...

    def clone(self, index: int) -> Member:
        """An independent copy under ``index``: selection copies winners, the loop and remote
        trainers make members to load states into."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything that restores the member, with ``index`` and ``record``: checkpoints,
        ``elite.pt`` and the remote backends' transfers."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (resume, evaluate, remote backends)."""
        ...

    def describe_network(self) -> str:
        """The member's network in a few words, for the loop's progress table."""
        ...

    def act(self, obs: Any, *, explore: bool) -> Any:
        """Actions for a batch of observations: the default evaluation and ``agile evaluate``'s
        episodes call it with ``explore=False``."""
        ...

    def reset_state(self, envs: Any = None) -> None:
        """Forget recurrent state where episodes start (``envs`` None: everywhere); runners and
        ``agile evaluate`` call it after ``env.reset()``."""
        ...

    def export_policy(self) -> PolicyModule | None:
        """The greedy policy as a torch module for ``agile export``; None: no such form
        (raise ``NotImplementedError`` to say why)."""
        ...

    def save_portable(self, directory: Path) -> bool:
        """Write the elite in another tool's format into ``directory`` (the loop, beside
        ``elite.pt``); returns whether it wrote anything."""
        ...


@runtime_checkable
class Rebuildable(Protocol):
    """A member whose networks are described by plain data and can be rebuilt from it: its
    lineage records the architecture, and a recipe's replay rebuilds it generation by
    generation. (:class:`~agile_rl.Algorithm` is one.)"""

    def architecture(self) -> dict[str, Any]:
        """The networks' architecture as JSON-able data."""
        ...

    def adopt_architecture(
        self, architecture: dict[str, Any], *, keep_function: bool = False
    ) -> None:
        """Rebuild the networks for ``architecture`` (what :meth:`architecture` returned),
        keeping the weights that fit, as an architecture mutation does; ``keep_function``:
        what it adds starts so that the networks compute what they did, where they can (a
        recipe replays a mutation whose label said ``same function``).

        :raises ValueError: ``architecture`` does not describe this member's networks.
        """
        ...


@runtime_checkable
class ExportsElite(Protocol):
    """A member that writes more than its portable form when it is saved as the elite (an
    LLM's adapter merged into its base model, say)."""

    def export_elite(self, run_folder: Path, *, at_end: bool) -> list[Path]:
        """Write what a save of the elite calls for into ``run_folder`` (``at_end``: the
        save that ends the run); returns what it wrote."""
        ...


def missing_methods(cls: type) -> list[str]:
    """The methods of :class:`Member` that ``cls`` lacks (its attributes are set by its
    constructor, so a class cannot be checked for them)."""
    wanted = [name for name, value in vars(Member).items() if _is_method(name, value)]
    return [name for name in wanted if not callable(getattr(cls, name, None))]


def _is_method(name: str, value: Any) -> bool:
    return callable(value) and not name.startswith("_")


class MemberBasics:
    """What any member kind does the same way, for a class implementing :class:`Member`: its
    hyperparameters as its spec holds them, and its random generators (``generator``, torch;
    ``rng``, numpy) derived from the run's member seed and its index."""

    spec: AlgorithmSpec
    index: int
    context: AgentContext

    def hyperparameters(self) -> dict[str, float | int]:
        """Current values of every mutable hyperparameter, as this member's spec holds them."""
        return {name: getattr(self.spec, name) for name in self.spec.mutable_hyperparameters}

    def _seed_generators(self) -> None:
        """``generator`` and ``rng``, derived from the run's member seed and this index."""
        import numpy as np
        import torch

        seed = int(np.random.SeedSequence([self.context.seed, self.index]).generate_state(1)[0])
        self.generator = torch.Generator().manual_seed(seed)
        self.rng = np.random.default_rng(seed)
