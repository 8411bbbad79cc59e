"""A group of members whose networks stack, trained as one computation.

:class:`MemberGroup` copies ``k`` members' networks and Adam states into stacked tensors
(:mod:`agile_rl.runtime.stacked`) for a generation, gives an algorithm's
:class:`GroupLearner` batched forward passes, per-member hyperparameters as tensors, gradient
steps and soft updates for all members at once, and copies everything back into the members
at the end (:meth:`MemberGroup.write_back`), so that evolution, checkpoints and evaluation
see ordinary members.

Every update takes an ``active`` mask: the members that learn in this call. The others are
left exactly as they were (their losses are masked out of the gradient, and their Adam step,
moments and parameters do not move), which is how members with different ``learn_step`` or
policy delays share one computation.

:func:`group_members` splits a population into groups: members of one algorithm class whose
networks have the same layout; alike members always stack, and groups pad to each other's
widest shapes where the merged group costs less than the two apart (:data:`CALL_OVERHEAD`,
:data:`STACKED_COST`).
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar, cast

import torch

from agile_rl.nn.modules import BorrowedEncoder, EvolvableNetwork
from agile_rl.nn.neurons import GradientSums, unit_widths
from agile_rl.runtime.compiled import reported
from agile_rl.runtime.stacked import (
    StackedNetwork,
    as_stacked,
    corner,
    layout_key,
    padded_shapes,
    parameter_count,
    stack_shape,
    unstackable,
)

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from agile_rl.runtime.agent import Algorithm
    from agile_rl.runtime.buffers import Transitions

#: What one learn call costs beyond its arithmetic, per network of the member, in units of its
#: arithmetic (parameters x batch rows). Fitted on this project's 2-core CPU (torch 2.13, one
#: thread) to DQN (2 networks, 18k-27k parameters, batch 128: 0.74 ms a network) and MADDPG
#: (8 networks, 78k-118k parameters, batch 256: 0.49 ms a network) learn steps, alone and
#: stacked; both give 3-4 million.
CALL_OVERHEAD = 3_000_000

#: The arithmetic of a stacked update per padded parameter and batch row, relative to one
#: member's own update (batched matrix products and masked layer norms): 1.2-1.43 in the same
#: fits.
STACKED_COST = 1.3

#: Batch rows assumed for a member whose spec names no ``batch_size``.
DEFAULT_ROWS = 64

_BETAS = (0.9, 0.999)  # torch.optim.Adam's defaults, which members' optimizers use
_EPS = 1e-8


class StackedAdam:
    """Adam over stacked networks, each member with its own learning rate and step count;
    the same update as ``torch.optim.Adam`` (default betas and eps) makes per member.

    :param flats: the ``[k, P]`` flat parameters of each network it trains.
    :param lr: ``[k]`` learning rates.
    :param steps: ``[k]`` steps taken so far.
    :param moments: first and second moments, one pair of ``[k, P]`` per flat.
    """

    def __init__(
        self,
        flats: list[torch.Tensor],
        lr: torch.Tensor,
        steps: torch.Tensor,
        moments: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> None:
        self.flats = flats
        self.lr = lr
        self.steps = steps
        self.moments = moments

    def step(
        self,
        grads: list[torch.Tensor],
        active: torch.Tensor,
        used: Sequence[torch.Tensor | None] | None = None,
    ) -> None:
        """One Adam step for the active members (``active`` a ``[k]`` float of 0 and 1).

        :param used: for each flat, None, or a ``[P]`` float mask of the parameters the loss
            reached: the others are skipped, as ``torch.optim.Adam`` skips a parameter
            without a gradient.
        """
        with torch.no_grad():  # a compiled network's flat takes gradients
            self._step(grads, active, used)

    def _step(
        self,
        grads: list[torch.Tensor],
        active: torch.Tensor,
        used: Sequence[torch.Tensor | None] | None,
    ) -> None:
        if used is None or all(mask is None for mask in used):
            self._fused_step(grads, active)
        else:
            self._masked_step(grads, active, used)

    def _fused_step(self, grads: list[torch.Tensor], active: torch.Tensor) -> None:
        """Each active member's step with torch's fused Adam kernel (what
        ``torch.optim.Adam(fused=True)`` runs), at its own learning rate and step count: one
        pass over a member's parameters, moments and gradients where the elementwise operations
        of :meth:`_masked_step` make eight (on this CPU 4.6x faster for 4 members of 140,000
        parameters, about TD3's HalfCheetah critic: 0.8 against 3.7 ms; docs/performance.md)."""
        self.steps += active
        beta1, beta2 = _BETAS
        for row in active.nonzero().flatten().tolist():
            torch._fused_adam_(
                [flat[row] for flat in self.flats],
                [grad[row] for grad in grads],
                [first[row] for first, _ in self.moments],
                [second[row] for _, second in self.moments],
                [],
                [self.steps[row]] * len(self.flats),
                lr=self.lr[row],
                beta1=beta1,
                beta2=beta2,
                weight_decay=0.0,
                eps=_EPS,
                amsgrad=False,
                maximize=False,
            )

    def _masked_step(
        self,
        grads: list[torch.Tensor],
        active: torch.Tensor,
        used: Sequence[torch.Tensor | None],
    ) -> None:
        """The step written out, for losses that left some parameters without a gradient
        (``used``), which it skips."""
        beta1, beta2 = _BETAS
        self.steps += active
        taken = self.steps.clamp(min=1.0)
        step_size = (self.lr / (1 - beta1**taken) * active).unsqueeze(1)
        correction = (1 - beta2**taken).sqrt().unsqueeze(1)
        first_weight = ((1 - beta1) * active).unsqueeze(1)
        second_weight = ((1 - beta2) * active).unsqueeze(1)
        for index, (flat, grad) in enumerate(zip(self.flats, grads, strict=True)):
            first, second = self.moments[index]
            mask = used[index]
            weights = [w if mask is None else w * mask for w in (first_weight, second_weight)]
            first.lerp_(grad, weights[0])
            second.lerp_(grad * grad, weights[1])
            denominator = (second.sqrt() / correction).add_(_EPS)
            size = step_size if mask is None else step_size * mask
            flat.sub_(first * size / denominator)


class GroupNetwork(Protocol):
    """A network of a :class:`Group`: every tensor in and out has the member axis first."""

    @property
    def views(self) -> dict[str, torch.Tensor]:
        """Each parameter, ``[k, *shape]``."""
        ...

    def __call__(self, obs: Any, extra: torch.Tensor | None = None) -> dict[str, torch.Tensor]: ...

    def unroll(
        self, obs: Any, state: tuple[torch.Tensor, ...], starts: torch.Tensor | None = None
    ) -> tuple[dict[str, torch.Tensor], tuple[torch.Tensor, ...]]:
        """A recurrent network along sequences ``[k, T, B, ...]`` from a state whose parts are
        ``[k, num_layers, B, H]``: each head ``[k, T, B, width]`` and the final state."""
        ...

    def reset_noise(self, generators: Sequence[torch.Generator | None]) -> None: ...

    def mean_weights(self) -> AbstractContextManager[None]: ...


class Group(Protocol):
    """What a :class:`GroupLearner` trains: ``k`` members stacked (:class:`MemberGroup`), or
    one member alone (:class:`~agile_rl.runtime.solo.SoloGroup`); both derive from it and
    share :meth:`gradient_step`."""

    members: list[Algorithm]
    size: int
    device: torch.device

    def net(self, name: str) -> GroupNetwork: ...

    def hp(self, name: str) -> torch.Tensor: ...

    def gradient_step(
        self,
        optimizer: str,
        losses: torch.Tensor,
        active: torch.Tensor,
        max_grad_norm: float | torch.Tensor | None = None,
    ) -> None:
        """Minimise each active member's loss (``losses`` ``[k]``) with one step of its
        optimizer ``optimizer`` (:meth:`minimise` of that one), clipping each member's gradient
        norm to ``max_grad_norm`` when given, a number or one per member ``[k]`` (zero or less:
        no clipping, as :meth:`~agile_rl.Algorithm.gradient_step` does for one member)."""
        self.minimise(losses, (optimizer,), active, max_grad_norm)

    def minimise(
        self,
        losses: torch.Tensor,
        optimizers: tuple[str, ...],
        active: torch.Tensor,
        max_grad_norm: float | torch.Tensor | None = None,
    ) -> None: ...

    def soft_update(
        self, pairs: Sequence[tuple[str, str]], tau: torch.Tensor, active: torch.Tensor
    ) -> None: ...

    def write_back(self) -> None: ...


class MemberGroup(Group):
    """``k`` members of one algorithm whose networks stack (see :func:`group_members`).

    :param members: the members, in the order their rows take.
    :param compiled: run the stacked networks' forward passes compiled where their layouts
        allow it (:mod:`agile_rl.runtime.compiled`), from the first gradient step on: acting
        before it stays eager, so that a run's first environment steps do not wait for a
        compilation.
    """

    def __init__(self, members: Sequence[Algorithm], *, compiled: bool = False) -> None:
        self.members = list(members)
        self.size = len(self.members)
        first = self.members[0]
        self.device = first.device
        self._hyperparameters: dict[str, torch.Tensor] = {}
        trained = {name for plan in first._plans.values() for name in plan.networks}
        self.networks = {
            n: StackedNetwork([m.networks[n] for m in self.members], trainable=n in trained)
            for n in first.networks
        }
        self._tie_borrowed_encoders()
        self.compiled = compiled
        self.optimizers = {name: self._optimizer(name) for name in first._plans}
        if first.measures_neurons:
            for name in trained:
                if isinstance(first.networks[name], EvolvableNetwork):
                    self.networks[name].gradients = GradientSums()

    def _tie_borrowed_encoders(self) -> None:
        """Point each stacked network whose members' encoders are borrowed (a critic reading
        its actor's, :class:`~agile_rl.nn.modules.BorrowedEncoder`) at the stacked owners:
        every member borrows from its network of one name."""
        for name, network in self.members[0].networks.items():
            if not isinstance(getattr(network, "encoder", None), BorrowedEncoder):
                continue
            owners = {_owner_name(member, name) for member in self.members}
            assert len(owners) == 1, f"the members' {name} borrow from different networks"
            self.networks[name].borrowed = self.networks[owners.pop()]

    # -- what learners use -------------------------------------------------------------------

    def net(self, name: str) -> StackedNetwork:
        """The stacked network ``name``: call it on ``[k, B, ...]`` observations."""
        return self.networks[name]

    def hp(self, name: str) -> torch.Tensor:
        """The members' values of hyperparameter ``name`` as a ``[k]`` float tensor."""
        values = self._hyperparameters.get(name)
        if values is None:
            numbers = [float(getattr(m.spec, name)) for m in self.members]
            values = torch.tensor(numbers, device=self.device)
            self._hyperparameters[name] = values
        return values

    def minimise(
        self,
        losses: torch.Tensor,
        optimizers: tuple[str, ...],
        active: torch.Tensor,
        max_grad_norm: float | torch.Tensor | None = None,
    ) -> None:
        """One step of each named optimizer on the active members' ``losses``; gradients are
        computed for those optimizers' parameters only."""
        weight = active.to(losses.dtype)
        for stacked in self.networks.values():
            if stacked.gradients is not None:  # the inactive members' gradients are zeros
                stacked.gradients.active = active
        networks = [n for name in optimizers for n in self._plan(name).networks]
        trained = [t for n in networks for t in self.networks[n].trained_tensors()]
        probes = self._take_probes()
        inputs = trained + [probe for _, probe in probes]
        with reported():  # a compiled pass's backward may compile as it first runs
            grads = torch.autograd.grad((losses * weight).sum(), inputs, allow_unused=True)
        for (stacked, _), grad in zip(probes, grads[len(trained) :], strict=True):
            if grad is not None:  # a pass of this loss: what its hooks would have counted
                stacked.count_probe(grad)
        flat_grads, used = self._flat_grads(networks, grads[: len(trained)])
        if max_grad_norm is not None:
            _clip(flat_grads, max_grad_norm)
        start = 0
        for name in optimizers:
            end = start + len(self._plan(name).networks)
            self.optimizers[name].step(flat_grads[start:end], weight, used[start:end])
            start = end
        if self.compiled:
            self.compile_passes()

    def _take_probes(self) -> list[tuple[StackedNetwork, torch.Tensor]]:
        """The probes of compiled passes since the last step, each with the network whose
        units' gradients it measures (see :mod:`agile_rl.runtime.compiled`); the networks
        keep none."""
        probes = []
        for stacked in self.networks.values():
            if stacked.gradients is not None:
                probes += [(stacked, probe) for probe in stacked.probes]
            stacked.probes = []
        return probes

    def compile_passes(self) -> None:
        """Run the networks' forward passes compiled from now on, where their layouts allow
        it (a group made ``compiled`` does from its first gradient step)."""
        for stacked in self.networks.values():
            stacked.compile_passes()

    def soft_update(
        self, pairs: Sequence[tuple[str, str]], tau: torch.Tensor, active: torch.Tensor
    ) -> None:
        """``target <- target + tau * (online - target)`` per active member, for each
        ``(target, online)`` pair of network names (``tau`` ``[k]``)."""
        weight = (tau * active.to(tau.dtype)).unsqueeze(1)
        with torch.no_grad():
            for target, online in pairs:
                self.networks[target].flat.lerp_(self.networks[online].flat, weight)

    # -- copying back --------------------------------------------------------------------------

    def write_back(self) -> None:
        """Copy every member's networks and optimizer states back into the member."""
        for name, stacked in self.networks.items():
            stacked.write_back([m.networks[name] for m in self.members])
        for name, optimizer in self.optimizers.items():
            self._store_states(name, optimizer)
        for name, stacked in self.networks.items():
            if stacked.gradients is not None:
                for row, member in enumerate(self.members):
                    widths = unit_widths(member.networks[name])
                    member.neuron_scores[name] = stacked.gradients.scores(row, widths)

    def _store_states(self, name: str, optimizer: StackedAdam) -> None:
        """Each member's Adam state of optimizer ``name`` (none for a member that never
        stepped: its optimizer keeps its empty state)."""
        steps = optimizer.steps.tolist()
        for index, network in enumerate(self._plan(name).networks):
            firsts, seconds = self._moment_views(network, optimizer.moments[index])
            for row, member in enumerate(self.members):
                if steps[row] == 0:
                    continue
                state = member.optimizers[name].state
                step = torch.tensor(steps[row], dtype=torch.float32, device=self.device)
                for parameter_name, parameter in member.networks[network].named_parameters():
                    own = corner(stack_shape(parameter_name, parameter.shape))
                    shape = parameter.shape
                    state[parameter] = {
                        "step": step.clone(),
                        "exp_avg": firsts[parameter_name][row][own].reshape(shape).clone(),
                        "exp_avg_sq": seconds[parameter_name][row][own].reshape(shape).clone(),
                    }

    def _moment_views(
        self, network: str, moments: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        stacked = self.networks[network]
        return stacked.views_of(moments[0]), stacked.views_of(moments[1])

    # -- internals -----------------------------------------------------------------------------

    def _plan(self, optimizer: str) -> Any:
        return self.members[0]._plans[optimizer]

    def _optimizer(self, name: str) -> StackedAdam:
        """Optimizer ``name`` of every member, stacked: their learning rates, step counts and
        Adam moments (zeros where a member has not stepped)."""
        plan = self._plan(name)
        if plan.parameters:
            raise ValueError("learned parameters outside networks do not stack")
        flats = [self.networks[n].flat for n in plan.networks]
        steps = torch.zeros(self.size, device=self.device)
        moments = [(torch.zeros_like(f), torch.zeros_like(f)) for f in flats]
        for index, network in enumerate(plan.networks):
            firsts, seconds = self._moment_views(network, moments[index])
            for row, member in enumerate(self.members):
                for parameter_name, parameter in member.networks[network].named_parameters():
                    state = member.optimizers[name].state.get(parameter)
                    if state:
                        own = corner(stack_shape(parameter_name, parameter.shape))
                        first = as_stacked(parameter_name, state["exp_avg"])
                        firsts[parameter_name][row][own].copy_(first)
                        second = as_stacked(parameter_name, state["exp_avg_sq"])
                        seconds[parameter_name][row][own].copy_(second)
                        steps[row] = float(state["step"])
        return StackedAdam(flats, self.hp(plan.lr_attribute), steps, moments)

    def _flat_grads(
        self, networks: list[str], grads: Sequence[torch.Tensor | None]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
        """Each network's gradients as one ``[k, P]`` tensor, and, where the loss did not
        reach some of its parameters, the ``[P]`` mask of those it reached (a compiled pass
        differentiates :attr:`~StackedNetwork.flat` whole: a head whose outputs the loss did
        not read gets zeros, as if reached)."""
        flat_grads: list[torch.Tensor] = []
        used: list[torch.Tensor | None] = []
        start = 0
        for network in networks:
            stacked = self.networks[network]
            views = stacked.trained_tensors()
            parts = grads[start : start + len(views)]
            start += len(views)
            pieces = [
                torch.zeros_like(v) if g is None else g for g, v in zip(parts, views, strict=True)
            ]
            rows = [p.reshape(self.size, -1) for p in pieces]
            flat_grads.append(rows[0] if len(rows) == 1 else torch.cat(rows, dim=1))
            if any(grad is None for grad in parts):
                reached = [torch.full((v[0].numel(),), float(g is not None), device=self.device)
                           for g, v in zip(parts, views, strict=True)]  # fmt: skip
                used.append(torch.cat(reached))
            else:
                used.append(None)
        return flat_grads, used


def _owner_name(member: Algorithm, name: str) -> str:
    """The name of the network of ``member`` whose encoder its network ``name`` borrows."""
    encoder = member.networks[name].encoder
    assert isinstance(encoder, BorrowedEncoder)
    return next(other for other, net in member.networks.items() if net is encoder.owner)


def _clip(grads: list[torch.Tensor], max_norm: float | torch.Tensor) -> None:
    """Scale each member's gradients so that their norm (over every tensor) is at most
    ``max_norm`` (one per member, or one for all; 0 or less: not clipped), as
    ``torch.nn.utils.clip_grad_norm_`` does for one member."""
    if not isinstance(max_norm, torch.Tensor):
        if max_norm <= 0:
            return
        max_norm = torch.full((grads[0].shape[0],), float(max_norm), device=grads[0].device)
    norms = torch.stack([g.pow(2).sum(1) for g in grads]).sum(0).sqrt()
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    scale = torch.where(max_norm > 0, scale, torch.ones_like(scale)).unsqueeze(1)
    for grad in grads:
        grad.mul_(scale)


#: The type of a group learner's members (:attr:`GroupLearner.members`): the algorithm class,
#: or a protocol of what the learner reads of it. Unbounded, because the base reads nothing of
#: its members and a learner may describe them by a protocol that is no :class:`Algorithm`;
#: covariant, so that a ``TD3Group`` is a ``GroupLearner[OffPolicyAlgorithm]`` to a function
#: that takes one (the members are only read through the learner).
MemberT = TypeVar("MemberT", covariant=True)


class GroupLearner(abc.ABC, Generic[MemberT]):
    """An algorithm's acting and learning, written once for a :class:`Group` of members:
    every tensor carries the members along its first dimension. The algorithm class names it
    in ``group_learner``; a batched population runs it on members stacked
    (:class:`MemberGroup`), and a member alone runs it as a group of one
    (:class:`~agile_rl.runtime.solo.SoloGroup`: ``Algorithm.act`` and ``learn`` do that by
    default), so there is one update. Equivalence tests (not the conformance kit) hold the
    two to each other, to float rounding.

    A subclass names its members' type, ``class TD3Group(DeterministicActorCriticGroup[TD3])``,
    and :attr:`members` is then typed as a sequence of them.

    :param group: the members.
    """

    #: The members' family: "off_policy" learners implement :meth:`learn_batch`.
    family: ClassVar[str] = "off_policy"

    def __init__(self, group: Group) -> None:
        self.group = group

    @property
    def members(self) -> Sequence[MemberT]:
        """The group's members, of the algorithm class that names this learner (a group holds
        members of one class: :func:`group_members`, ``Algorithm.solo_learner``)."""
        return cast("Sequence[MemberT]", self.group.members)

    @abc.abstractmethod
    def act(self, obs: Any, *, explore: bool) -> Any:
        """Actions for observations of the members' environments, ``[k * E, ...]`` in member
        order, as each member's ``act`` would return them, concatenated (a team's: a dict of
        such arrays keyed by agent)."""

    def learn_batch(
        self, batch: Transitions, rows: torch.Tensor, active: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One gradient step for the active members (``active`` ``[k]`` bool) on a stacked
        batch ``[k, B, ...]`` of which each member uses the rows where ``rows`` (``[k, B]``,
        0 or 1) is 1; returns each member's loss ``[k]`` and, for prioritised replay, new
        priorities ``[k, B]``."""
        raise NotImplementedError


def masked_mean(values: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Each member's mean of ``values`` ``[k, B]`` over its rows (``rows`` 0 or 1)."""
    return (values * rows).sum(1) / rows.sum(1).clamp(min=1.0)


def group_members(members: Sequence[Algorithm]) -> list[list[int]]:
    """Indices of ``members`` split into groups that stack: one algorithm class with a group
    learner, networks of one layout, and, padded to the group's widest shapes, a learn step
    of the group costing less than its parts' apart (:func:`stacking_cost`, see
    :func:`_split_by_padding`); every other member is a group of its own."""
    by_key: dict[Hashable, list[int]] = {}
    groups: list[list[int]] = []
    for index, member in enumerate(members):
        key = _member_key(member)
        if key is None:
            groups.append([index])
        else:
            by_key.setdefault(key, []).append(index)
    for indices in by_key.values():
        groups += _split_by_padding(members, indices)
    return sorted(groups)


#: Methods a group learner redoes for the members: a subclass that overrides one of them
#: acts and learns through its own methods unless it names a group learner of its own.
GROUP_METHODS = frozenset({"build", "act", "learn", "policy_step"})


def group_learner_of(cls: type[Algorithm]) -> type[GroupLearner] | None:
    """The group learner that trains members of ``cls`` together: the one it, or a base class,
    names in ``group_learner``, provided no class in between overrides one of
    :data:`GROUP_METHODS` (the learner would not do what those members do)."""
    for klass in cls.__mro__:
        if "group_learner" in vars(klass):
            learner: type[GroupLearner] | None = vars(klass)["group_learner"]
            return learner
        if GROUP_METHODS & set(vars(klass)):
            return None
    return None


def stackable(member: Algorithm) -> bool:
    """Whether ``member`` can be stacked (alone: a group of one): its class has a group
    learner and its networks a layout :class:`~agile_rl.runtime.stacked.StackedNetwork`
    takes."""
    return alone_reason(member) is None


def alone_reason(member: Algorithm) -> str | None:
    """Why ``member`` trains alone, whatever the population (None: it stacks), in words a
    run's output and metrics show."""
    cls = type(member).__name__
    if group_learner_of(type(member)) is None:
        return f"{cls} has no group learner (or overrides act, learn or build without one)"
    if member.learned_parameters:
        return f"{cls} learns parameters outside its networks"
    if not member.stacks:
        return f"{cls} members train one by one"
    for name, network in member.networks.items():
        reason = unstackable(network)
        if reason is not None:
            return f"the {name} network {reason}"
    return None


def _member_key(member: Algorithm) -> Hashable | None:
    if not stackable(member):
        return None
    keys = tuple((name, layout_key(network)) for name, network in member.networks.items())
    return (type(member), keys)


def _split_by_padding(members: Sequence[Algorithm], indices: list[int]) -> list[list[int]]:
    """Members of one layout in groups: alike members (the same shapes) always stack
    (measured: 1.5x for three MADDPG teams' updates, 2.3x for sixteen recurrent PPO members'
    generations); then, the largest saving first, two groups merge, padded to each other's
    shapes, while the merged group's learn step costs less than the two apart
    (:func:`stacking_cost`). Members a mutation widened alike keep to a group of their own
    where padding the rest to them costs more than a second call (sixteen CartPole DQN
    members, four with a wider encoder and four with a wider latent, one thread: 15.0 ms a
    step as one padded group, 12.8 ms as the two groups this makes, 12.1 ms as three; adding
    members one at a time to the first group that took them had padded all sixteen)."""
    alike: dict[Hashable, _Candidate] = {}
    for index in indices:
        candidate = _Candidate.of(members[index], index)
        key = tuple(sorted(candidate.shapes.items()))
        alike[key] = alike[key].merged(candidate) if key in alike else candidate
    return [sorted(group.indices) for group in _merged(list(alike.values()))]


def _merged(candidates: list[_Candidate]) -> list[_Candidate]:
    """``candidates`` after merging, the largest saving first (ties: the earlier pair),
    while a merge saves anything; each pair's saving is computed once."""
    groups = dict(enumerate(candidates))
    ids = itertools.count(len(candidates))
    savings = {(a, b): _saving(groups[a], groups[b]) for a in groups for b in groups if a < b}
    while savings:
        pair = max(savings, key=lambda key: (savings[key], -key[0], -key[1]))
        if savings[pair] < 0:
            break
        first, second = pair
        merged = groups.pop(first).merged(groups.pop(second))
        savings = {key: value for key, value in savings.items() if not set(key) & set(pair)}
        new = next(ids)
        savings.update(((other, new), _saving(groups[other], merged)) for other in groups)
        groups[new] = merged
    return list(groups.values())


def _saving(one: _Candidate, other: _Candidate) -> float:
    return one.cost + other.cost - one.merged(other).cost


@dataclass(frozen=True)
class _Candidate:
    """A would-be group: its members' indices, its padded shapes (by network and parameter,
    as stacked), its largest batch and its number of networks."""

    indices: tuple[int, ...]
    shapes: dict[str, tuple[int, ...]]
    rows: int
    networks: int

    @classmethod
    def of(cls, member: Algorithm, index: int) -> _Candidate:
        shapes = {
            f"{name}/{key}": shape
            for name, network in member.networks.items()
            for key, shape in padded_shapes([network]).items()
        }
        return cls((index,), shapes, _rows(member), len(member.networks))

    def merged(self, other: _Candidate) -> _Candidate:
        shapes = {
            name: tuple(max(a, b) for a, b in zip(shape, other.shapes[name], strict=True))
            for name, shape in self.shapes.items()
        }
        rows = max(self.rows, other.rows)
        return _Candidate(self.indices + other.indices, shapes, rows, self.networks)

    @property
    def cost(self) -> float:
        """:func:`stacking_cost` of the group."""
        overhead = CALL_OVERHEAD * self.networks
        arithmetic = parameter_count(self.shapes) * self.rows
        if len(self.indices) == 1:
            return overhead + arithmetic
        return overhead + STACKED_COST * len(self.indices) * arithmetic


def stacking_cost(members: Sequence[Algorithm]) -> float:
    """A model of one learn step's cost for ``members`` as one group (one member: alone), in
    parameters x batch rows: :data:`CALL_OVERHEAD` per network, plus the arithmetic, which a
    group does at its widest shapes and largest batch, at :data:`STACKED_COST` times a
    member's own."""
    candidates = [_Candidate.of(member, index) for index, member in enumerate(members)]
    group = candidates[0]
    for candidate in candidates[1:]:
        group = group.merged(candidate)
    return group.cost


def _rows(member: Algorithm) -> int:
    return int(getattr(member.spec, "batch_size", 0) or DEFAULT_ROWS)
