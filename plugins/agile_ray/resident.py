"""Members that live in their Ray workers between generations, and the driver's stand-ins.

A member's networks, optimizer moments and generators stay in the worker that trained it. The
driver keeps a :class:`Standin` in the population instead: what the evolutionary loop reads
and writes there (the record, the hyperparameters, a description of the networks), and what
happens to the member before it next trains: where its state comes from (a member a worker
holds, or a whole state) and the changes selection and mutation made since (:data:`Op`). The
worker that trains it next replays those changes (:func:`replay`): a network mutation is drawn
there from a seed the driver drew, so the driver's mutation stream stays its own and the
member's weights never travel for it. When a copy's source lives on another worker, its state
moves between the two workers through Ray's object store, not through the driver.

A stand-in becomes a whole member (:meth:`Standin.whole`) where the driver needs one: to save
it (the elite, checkpoints), to score it again at the end of the run, for the run's result.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from agile_cli import (
    AgentContext,
    AlgorithmSpec,
    GenerationStats,
    Member,
    MemberRecord,
    MutationSpec,
    Rebuildable,
)
from agile_cli.helpers import network_size

#: A change replayed on a member before it trains: ``("index", i)`` (a copy under index ``i``,
#: :meth:`~agile_cli.Member.clone`), ``("set", name, value)`` (a hyperparameter),
#: ``("mutate", kind, seed)`` (a network mutation drawn from ``default_rng(seed)``),
#: ``("adopt", architecture, keep_function)`` (a recipe's architecture).
Op = tuple[Any, ...]


@runtime_checkable
class MutatesNetworks(Protocol):
    """A member whose networks mutate (an :class:`~agile_rl.Algorithm`): the core's mutation
    calls it for every kind but ``rl_hp`` and ``none``, and so does :func:`replay`."""

    def mutate_network(self, kind: str, spec: MutationSpec, rng: np.random.Generator) -> str:
        """Apply one mutation of ``kind``; return a label describing it."""
        ...


@dataclass(frozen=True)
class Instruction:
    """How a worker makes the member it trains at one position of its slot.

    :param index: the member's index after ``ops``.
    :param held: the index of the member a worker holds that it starts from, or None.
    :param state: the whole state it starts from, where ``held`` is None.
    :param ops: the changes to replay on it, in order.
    """

    index: int
    held: int | None = None
    state: dict[str, Any] | None = None
    ops: tuple[Op, ...] = ()


@dataclass
class Summary:
    """What the driver shows and records of a member it does not hold."""

    hyperparameters: dict[str, float | int]
    network: str
    parameters: int | None
    architecture: dict[str, Any] | None


@dataclass
class Trained:
    """A worker's account of one member after its generation (its state stays there)."""

    index: int
    steps: int
    summary: Summary
    mutation: str | None  # what a network mutation replayed before training did
    stats: GenerationStats
    fitness: float


def summarise(member: Member) -> Summary:
    """The :class:`Summary` of a whole member."""
    architecture = member.architecture() if isinstance(member, Rebuildable) else None
    return Summary(
        member.hyperparameters(), member.describe_network(), network_size(member), architecture
    )


def replay(
    member: Member, ops: tuple[Op, ...], spec: MutationSpec | None
) -> tuple[Member, str | None]:
    """``member`` after ``ops`` (a copy wherever an op copies), and the label of the last
    network mutation among them."""
    label = None
    for op in ops:
        if op[0] == "index":
            member = member.clone(op[1])
        elif op[0] == "set":
            member.set_hyperparameter(op[1], op[2])
        elif op[0] == "mutate":
            assert spec is not None, "network mutations come from the manifest's mutation section"
            assert isinstance(member, MutatesNetworks), "network mutations reach such members"
            label = str(member.mutate_network(op[1], spec, np.random.default_rng(op[2])))
        elif op[0] == "adopt":
            assert isinstance(member, Rebuildable), "a recipe's architectures reach such members"
            member.adopt_architecture(op[1], **({"keep_function": True} if op[2] else {}))
    return member, label


class Holder:
    """What stand-ins ask of the backend: a held member's state, and a whole member to load
    states into (the runner implements it)."""

    template: Member | None
    mutation: MutationSpec | None

    def whole_template(self) -> Member:
        """A whole member like the population's, to load states into."""
        assert self.template is not None, "stand-ins exist once a generation has trained"
        return self.template

    def fetch(self, index: int, steps: int) -> dict[str, Any]:
        """The state of member ``index`` as it was after ``steps`` steps of training (as the
        worker holding it has it now, or as it was published)."""
        raise NotImplementedError


@dataclass(eq=False)
class Standin:
    """The driver's stand-in for a member held by a worker (see the module's docstring); the
    evolutionary loop uses it through the :class:`~agile_cli.Member` contract."""

    index: int
    record: MemberRecord
    summary: Summary
    holder: Holder
    held: int | None = None
    state: dict[str, Any] | None = None
    ops: tuple[Op, ...] = ()
    #: Its whole state, once made (for a checkpoint); valid until it trains again.
    made: dict[str, Any] | None = field(default=None, repr=False)
    _whole: Member | None = field(default=None, repr=False)
    spec: AlgorithmSpec = field(init=False, repr=False)
    context: AgentContext = field(init=False, repr=False)

    def __post_init__(self) -> None:
        template = self.holder.whole_template()
        self.spec = template.spec.model_copy(update=self.summary.hyperparameters)
        self.context = template.context

    # -- what the loop, selection and mutation use -----------------------------------------

    def hyperparameters(self) -> dict[str, float | int]:
        return dict(self.summary.hyperparameters)

    def set_hyperparameter(self, name: str, value: float | int) -> None:
        self._change(("set", name, value))
        self.summary.hyperparameters[name] = value
        self.spec = self.spec.model_copy(update={name: value})

    def mutate_network(self, kind: str, spec: MutationSpec, rng: np.random.Generator) -> str:
        """Draw the mutation's seed here; the worker that trains the member next applies it
        (and says what it did, which then replaces this label)."""
        self._change(("mutate", kind, int(rng.integers(2**63))))
        return f"{kind} (applied in its worker)"

    def clone(self, index: int) -> Standin:
        twin = dataclasses.replace(
            self,
            index=index,
            record=MemberRecord(**dataclasses.asdict(self.record)),
            summary=dataclasses.replace(
                self.summary, hyperparameters=dict(self.summary.hyperparameters)
            ),
            ops=(*self.ops, ("index", index)),
            made=None,
            _whole=None,
        )
        return twin

    def describe_network(self) -> str:
        return self.summary.network

    def parameter_count(self) -> int | None:
        return self.summary.parameters

    def state_dict(self) -> dict[str, Any]:
        """Its whole state (fetched from the worker holding its source, changes replayed)."""
        if self.made is None:
            self.made = {**self.whole().state_dict(), "record": dataclasses.asdict(self.record)}
        return self.made

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Start again from ``state`` (a resumed run's checkpoint)."""
        self.index = int(state["index"])
        self.held, self.state, self.ops = None, state, ()
        self.record = MemberRecord(**state["record"])
        self.made, self._whole = None, None
        self.summary = summarise(self.whole())

    # -- what needs the whole member -------------------------------------------------------

    def whole(self) -> Member:
        """The member itself, made here from its source's state and its changes."""
        if self._whole is None:
            held, steps = self.held, self.record.steps
            state = self.state if held is None else self.holder.fetch(held, steps)
            assert state is not None, "a stand-in starts from a held member or a state"
            member = self.holder.whole_template().clone(int(state["index"]))
            member.load_state_dict(state)
            member, label = replay(member, self.ops, self.holder.mutation)
            if label is not None:  # what the mutation did, in place of "applied in its worker"
                self.record.mutation = label
            member.record = self.record
            self._whole = member
        return self._whole

    def act(self, obs: Any, *, explore: bool) -> Any:
        return self.whole().act(obs, explore=explore)

    def reset_state(self, envs: Any = None) -> None:
        self.whole().reset_state(envs)

    def export_policy(self) -> Any:
        return self.whole().export_policy()

    def save_portable(self, directory: Any) -> bool:
        return self.whole().save_portable(directory)

    def instruction(self) -> Instruction:
        return Instruction(self.index, self.held, self.state, self.ops)

    def _change(self, op: Op) -> None:
        self.ops = (*self.ops, op)
        self.made, self._whole = None, None


class RebuildableStandin(Standin):
    """A stand-in for a member that can rebuild its networks (:class:`~agile_cli.Rebuildable`)."""

    def architecture(self) -> dict[str, Any]:
        assert self.summary.architecture is not None
        return self.summary.architecture

    def adopt_architecture(
        self, architecture: dict[str, Any], *, keep_function: bool = False
    ) -> None:
        self._change(("adopt", architecture, keep_function))
        self.summary.architecture = architecture


def standin_class(template: Member) -> type[Standin]:
    """The stand-in class for members like ``template``."""
    return RebuildableStandin if isinstance(template, Rebuildable) else Standin


def standin_of(account: Trained, record: MemberRecord, holder: Holder) -> Standin:
    """The stand-in for the member a worker just trained and holds: ``record`` (the driver's)
    with the steps it trained and what a network mutation did."""
    record.steps = account.steps
    if account.mutation is not None:
        record.mutation = account.mutation
    cls = standin_class(holder.whole_template())
    return cls(account.index, record, account.summary, holder, held=account.index)


def payload_bytes(value: Any) -> int:
    """The bytes of the tensors and arrays in ``value`` (dicts, lists and tuples walked): what
    moving a member's state costs, less pickling's small change."""
    if hasattr(value, "untyped_storage"):  # a tensor
        return int(value.numel() * value.element_size())
    if hasattr(value, "nbytes"):  # an array
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(payload_bytes(item) for item in value.values())
    if isinstance(value, list | tuple):
        return sum(payload_bytes(item) for item in value)
    return 0
