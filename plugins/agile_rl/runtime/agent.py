"""The base class every algorithm implementation derives from: one instance is one member.

The core owns the population, the evolutionary loop, checkpoints and logging. An algorithm
builds its networks, learned parameters and optimizers from the member's architecture, acts,
and learns; the base class keeps the member's own copy of its spec (whose hyperparameters
mutation changes), architecture and learning-rate changes that keep what can be kept, cloning,
and a complete state for checkpoints.

What the runners tell a member arrives as arguments (``learn``'s batch or rollout, the
importance exponent's ``progress``); what they read from it is declared here: its spec's
``batch_size`` and ``learn_step``, :attr:`Algorithm.policy_network`, and :class:`LearnResult`.
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch.distributions import Distribution
from torch.utils.hooks import RemovableHandle

from agile_cli import (
    AgentContext,
    AlgorithmSpec,
    MemberBasics,
    MemberRecord,
    MutationSpec,
)
from agile_rl.nn import sampling
from agile_rl.nn.arch import NetworkArch
from agile_rl.nn.eager import eager_optimizers
from agile_rl.nn.modules import EvolvableNetwork, preprocess, unscaled_images
from agile_rl.nn.neurons import GradientSums, keep_functions, reset_dormant, watch_units
from agile_rl.nn.transfer import transfer_optimizer_state
from agile_rl.runtime.on_policy_group import OnPolicyGroupLearner
from agile_rl.runtime.rollout import PolicyRecord
from agile_rl.runtime.saved import check_saved_arch
from agile_rl.runtime.solo import SoloGroup, one_member
from agile_rl.spec import RLAlgorithmSpec

if TYPE_CHECKING:
    from agile_rl.runtime.exported import ExportedPolicy
    from agile_rl.runtime.group import GroupLearner


@dataclass
class _OptimizerPlan:
    networks: tuple[str, ...]
    lr_attribute: str
    parameters: tuple[str, ...] = ()


def _saved_scores(saved: Any) -> dict[str, dict[str, torch.Tensor]]:
    """The neuron scores a member's state holds: by network and producing layer, 1-D tensors;
    what is not so (or nothing: checkpoints written before the dormant-neuron resets) is
    left out, and those units are not reset."""
    if not isinstance(saved, dict):
        return {}
    return {
        str(network): {
            str(layer): score.detach().clone()
            for layer, score in layers.items()
            if isinstance(score, torch.Tensor) and score.dim() == 1
        }
        for network, layers in saved.items()
        if isinstance(layers, dict)
    }


def as_networks_read(spec: AlgorithmSpec, space: gym.Space) -> gym.Space:
    """``space`` as a member of ``spec`` reads it: its images unscaled where the spec says
    ``normalize_images: false`` (:class:`~agile_rl.spec.RLAlgorithmSpec`)."""
    if isinstance(spec, RLAlgorithmSpec) and not spec.normalize_images:
        return unscaled_images(space)
    return space


class Algorithm(MemberBasics, abc.ABC):
    """One population member of some algorithm.

    Subclasses implement :meth:`build` (create networks with :meth:`add_network`, learned
    tensors that are not networks with :meth:`add_parameter`, and optimizers with
    :meth:`add_optimizer`) and :meth:`act`, plus the learning interface of their family
    (:class:`OffPolicyAlgorithm` or :class:`OnPolicyAlgorithm`).

    Hyperparameters are read from ``self.spec``, the member's own copy of its spec, which
    :meth:`set_hyperparameter` replaces when mutation changes one.
    """

    supports_activation_mutation: ClassVar[bool] = True
    group_learner: ClassVar[type[GroupLearner] | None] = None
    """Acts and learns for a group of members of this class at once (a lone member is a group
    of one); None: each member acts and learns through its own methods."""
    policy_network: str | None = None
    """The name of the network that acts, whose weights parameter mutation perturbs. Set it on
    the class, or in :meth:`build` when it depends on the spec; None (plugins written before it
    existed) means the first network built."""

    def __init__(
        self,
        spec: AlgorithmSpec,
        *,
        observation_space: gym.Space,
        action_space: gym.Space,
        arch: NetworkArch,
        context: AgentContext,
        index: int = 0,
    ) -> None:
        self.spec = spec.model_copy()  # this member's own: mutation replaces it
        self.observation_space = as_networks_read(spec, observation_space)
        self.action_space = action_space
        self.arch = arch
        self.context = context
        self.device = context.device
        self.index = index
        self.record = MemberRecord()
        self._seed_generators()
        self.networks: dict[str, EvolvableNetwork] = {}
        self.learned_parameters: dict[str, torch.nn.Parameter] = {}
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self._plans: dict[str, _OptimizerPlan] = {}
        self._parameter_lists: dict[str, list[torch.nn.Parameter]] = {}
        mutation = context.mutation
        #: Whether training sums the gradients of this member's units, for the dormant-neuron
        #: resets of its parameter mutations (:mod:`agile_rl.nn.neurons`).
        self.measures_neurons = (
            mutation is not None
            and mutation.dormant_threshold is not None
            and mutation.probabilities.params_mut > 0
        )
        #: The last training's gradient score of each unit, by network and producing layer.
        self.neuron_scores: dict[str, dict[str, torch.Tensor]] = {}
        self._watching: list[tuple[str, GradientSums, list[RemovableHandle]]] = []
        self.build()

    # -- what subclasses implement -----------------------------------------------------------

    @abc.abstractmethod
    def build(self) -> None:
        """Create the networks and optimizers from ``self.arch``."""

    def act(self, obs: Any, *, explore: bool) -> Any:
        """Actions for a batch of observations (explore: training; otherwise evaluation): an
        array, or for a multi-agent algorithm a dict of arrays keyed by agent. By default,
        the :attr:`group_learner`'s ``act`` for this member alone (a group of one)."""
        return self.solo_learner().act(obs, explore=explore)

    def solo_learner(self) -> GroupLearner:
        """The class's :attr:`group_learner` over this member alone, a group of one
        (:class:`~agile_rl.runtime.solo.SoloGroup`): its own networks and optimizers, no copy.

        :raises NotImplementedError: the class names no group learner (it then implements
            ``act`` and ``learn`` itself)."""
        learner = type(self).group_learner
        if learner is None:
            raise NotImplementedError(
                f"{type(self).__name__} names no group_learner: name one, or implement act "
                "and learn"
            )
        return learner(SoloGroup(self))

    @property
    def stacks(self) -> bool:
        """Whether this member's networks may be stacked with other members' (a batched
        population); True by default. A member whose computations cannot be stacked returns
        False and trains as a group of one."""
        return True

    def export_policy(self) -> ExportedPolicy | None:
        """The greedy policy as a standalone torch module, for ``agile export``: raw
        observation batches in, the actions ``act(obs, explore=False)`` returns out (see
        :mod:`agile_rl.runtime.exported`; build it from :class:`~agile_rl.GreedyPolicy`).
        None (the default): this algorithm has no such form.

        :raises NotImplementedError: this member cannot be exported; the message says why.
        """
        return None

    def reset_state(self, envs: np.ndarray | None = None) -> None:
        """Called when episodes start: after ``env.reset()`` (``envs`` None: in every
        sub-environment) and, while training, after a vector step with the boolean mask of
        the sub-environments whose next observation begins a new episode (with next-step
        autoreset, those whose step only reset them). A recurrent algorithm forgets their
        hidden state here; the base class keeps none.
        """

    # -- helpers for subclasses ----------------------------------------------------------------

    def add_network(
        self,
        name: str,
        heads: dict[str, int],
        head_extra: int = 0,
        *,
        noisy_std: float | None = None,
        observation_space: gym.Space | None = None,
    ) -> EvolvableNetwork:
        """Build a network of this member's architecture and register it under ``name``.

        :param heads: output width of each head.
        :param head_extra: width of an extra head input, e.g. the action of a Q(s, a) critic.
        :param noisy_std: give the heads noisy layers of this initial noise scale
            (:class:`~agile_rl.nn.noisy.NoisyLinear`).
        :param observation_space: what the network reads, if not the member's observations
            (e.g. one agent's, or every agent's joined for a centralised critic).
        """
        network = EvolvableNetwork(
            self.arch, observation_space or self.observation_space, heads,
            head_extra=head_extra, generator=self.generator, device=self.device,
            noisy_std=noisy_std,
        )  # fmt: skip
        self.networks[name] = network
        return network

    def add_parameter(self, name: str, initial: torch.Tensor) -> torch.nn.Parameter:
        """A learned tensor that is not a network (e.g. Soft Actor-Critic's log temperature),
        starting at ``initial``, on the member's device, registered under ``name``.

        Like a network's weights, it can be trained by an optimizer (``add_optimizer(...,
        parameters=(name,))``), is saved and restored with checkpoints, copied by
        :meth:`clone`, and kept, with its optimizer state, through architecture changes. Keep
        it in ``self.learned_parameters[name]``: update it in place (an optimizer step), do
        not replace it.
        """
        parameter = torch.nn.Parameter(initial.detach().clone().to(self.device))
        self.learned_parameters[name] = parameter
        return parameter

    def add_optimizer(
        self,
        name: str,
        networks: tuple[str, ...],
        lr_attribute: str,
        parameters: tuple[str, ...] = (),
    ) -> None:
        """An Adam optimizer over ``networks`` and the learned ``parameters`` (names given to
        :meth:`add_parameter`) whose learning rate is the hyperparameter ``lr_attribute`` of
        the spec, following it when it mutates."""
        self._plans[name] = _OptimizerPlan(networks, lr_attribute, parameters)
        self.optimizers[name] = self._make_optimizer(self._plans[name])

    def parameter_list(self, network: str) -> list[torch.nn.Parameter]:
        """The parameters of one network as a list, cached until the architecture changes
        (walking a module's parameters costs more than a small network's forward pass)."""
        cached = self._parameter_lists.get(network)
        if cached is None:
            cached = self._parameter_lists[network] = list(self.networks[network].parameters())
        return cached

    def gradient_step(
        self, optimizer: str, loss: torch.Tensor, max_grad_norm: float | None = None
    ) -> None:
        """Minimise ``loss`` with one step of the named optimizer, clipping the gradient norm
        of its parameters to ``max_grad_norm`` when given (and positive)."""
        self.minimise(loss, (optimizer,), max_grad_norm)

    def minimise(
        self, loss: torch.Tensor, optimizers: tuple[str, ...], max_grad_norm: float | None = None
    ) -> None:
        """One gradient step of ``loss`` by each named optimizer; gradients are computed for
        their parameters only (e.g. an actor's loss leaves its critic's alone), and their norm
        over all of them is clipped to ``max_grad_norm`` when given (and positive)."""
        parameters = [p for name in optimizers for p in self._trained(name)]
        for name in optimizers:
            self.optimizers[name].zero_grad(set_to_none=True)
        loss.backward(inputs=parameters)
        if max_grad_norm:
            torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
        for name in optimizers:
            self.optimizers[name].step()

    def soft_update(self, pairs: Iterable[tuple[str, str]], tau: float) -> None:
        """``target <- target + tau * (online - target)`` for each ``(target, online)`` pair of
        network names (one fused operation over every tensor)."""
        pairs = list(pairs)
        targets: list[torch.Tensor] = [
            p for target, _ in pairs for p in self.parameter_list(target)
        ]
        online: list[torch.Tensor] = [p for _, source in pairs for p in self.parameter_list(source)]
        with torch.no_grad():
            torch._foreach_lerp_(targets, online, tau)

    def sample(self, distribution: Distribution) -> torch.Tensor:
        """One sample of ``distribution`` (Categorical, Normal, Bernoulli, or Independent of
        them) drawn from this member's generator: use it instead of ``distribution.sample()``,
        which draws from torch's global generator and so breaks ``--seed``."""
        return sampling.sample(distribution, self.generator)

    def obs_tensor(self, obs: Any) -> torch.Tensor | dict[str, torch.Tensor]:
        """Observations from the environment as the networks take them."""
        return preprocess(self.observation_space, obs, self.device)

    # -- evolution -------------------------------------------------------------------------------

    @property
    def policy(self) -> EvolvableNetwork:
        """The network named by :attr:`policy_network` (the first one built when that is None),
        whose weights parameter mutation perturbs."""
        if self.policy_network is None:
            return next(iter(self.networks.values()))
        return self.networks[self.policy_network]

    @property
    def policies(self) -> list[EvolvableNetwork]:
        """Every network parameter mutation perturbs: :attr:`policy`, or each agent's actor."""
        return [self.policy]

    def describe_network(self) -> str:
        """The member's network in a few words, for the progress table (its architecture)."""
        return self.arch.describe()

    def set_hyperparameter(self, name: str, value: float | int) -> None:
        """Change a hyperparameter: the member's spec is replaced by a copy with the new value
        (not validated again: mutation keeps values within their bounds); every optimizer using
        it as learning rate follows."""
        self.spec = self.spec.model_copy(update={name: value})
        for optimizer_name, plan in self._plans.items():
            if plan.lr_attribute == name:
                for group in self.optimizers[optimizer_name].param_groups:
                    group["lr"] = value

    def set_architecture(self, arch: NetworkArch) -> None:
        """Rebuild every network for ``arch``, keeping weights and optimizer state that fit
        (learned parameters are not rebuilt: they and their optimizer state are kept)."""
        old_networks = self.networks
        self._parameter_lists = {}
        old_params = {name: self._named_parameters(plan) for name, plan in self._plans.items()}
        self.arch = arch
        self.networks = {
            name: network.rebuilt(arch, generator=self.generator)
            for name, network in old_networks.items()
        }
        for name, plan in self._plans.items():
            old = self.optimizers[name]
            self.optimizers[name] = self._make_optimizer(plan)
            transfer_optimizer_state(
                old, old_params[name], self.optimizers[name], self._named_parameters(plan)
            )

    def architecture(self) -> dict[str, Any]:
        """The networks' architecture as JSON-able data (:class:`~agile_cli.Rebuildable`)."""
        return self.arch.to_dict()

    def adopt_architecture(
        self, architecture: dict[str, Any], *, keep_function: bool = False
    ) -> None:
        """Rebuild the networks for ``architecture`` unless they have it already, keeping the
        weights that fit, and with ``keep_function`` what they compute where the additions
        allow it (:class:`~agile_cli.Rebuildable`, :func:`~agile_rl.nn.neurons.keep_functions`).

        :raises ValueError: ``architecture`` does not describe a network architecture.
        """
        try:
            arch = NetworkArch.from_dict(architecture)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not an architecture of {type(self).__name__}: {exc}") from None
        if arch == self.arch:
            return
        old = dict(self.networks)
        self.set_architecture(arch)
        if keep_function:
            keep_functions(old, self.networks)

    def mutate_network(self, kind: str, spec: MutationSpec, rng: np.random.Generator) -> str:
        """Apply the evolution loop's network mutation ``kind`` (``architecture``,
        ``parameters`` or ``activation``, see :mod:`agile_rl.mutation`) with the manifest's
        mutation ``spec``, drawing from ``rng``; returns a label of what changed."""
        from agile_rl.mutation import mutate_network

        return mutate_network(self, kind, spec, rng)

    def after_parameter_mutation(self) -> None:
        """Called after the policy's weights were perturbed (e.g. to refresh copies)."""

    # -- dormant neurons -----------------------------------------------------------------------

    @property
    def trained_networks(self) -> list[str]:
        """The names of the networks an optimizer trains (not their target copies)."""
        trained = {name for plan in self._plans.values() for name in plan.networks}
        return [name for name in self.networks if name in trained]

    def watch_neurons(self) -> None:
        """Until :meth:`stop_watching_neurons`, the member's own forward passes sum its units'
        gradients (when it :attr:`measures_neurons`); a stacked group sums them itself."""
        if not self.measures_neurons or self._watching:
            return
        for name in self.trained_networks:
            network = self.networks[name]
            if isinstance(network, EvolvableNetwork):
                sums = GradientSums()
                self._watching.append((name, sums, watch_units(network, sums)))

    def stop_watching_neurons(self) -> None:
        """Remove :meth:`watch_neurons`' hooks; what they summed becomes
        :attr:`neuron_scores`."""
        if not self._watching:
            return
        for _, _, handles in self._watching:
            for handle in handles:
                handle.remove()
        self.neuron_scores = {name: sums.scores(0) for name, sums, _ in self._watching}
        self._watching = []

    def reset_dormant(self, threshold: float, rng: np.random.Generator) -> int:
        """Re-initialise the units whose :attr:`neuron_scores` call them dormant at
        ``threshold`` (:func:`~agile_rl.nn.neurons.reset_dormant`), clearing the optimizer
        moments of what was rewritten; returns how many units were reset."""
        count = 0
        for name, scores in self.neuron_scores.items():
            network = self.networks.get(name)
            if not isinstance(network, EvolvableNetwork):
                continue
            reset, touched = reset_dormant(network, scores, threshold, rng)
            count += reset
            for optimizer in self.optimizers.values():
                for parameter, index in touched:
                    state = optimizer.state.get(parameter, {})
                    for key in ("exp_avg", "exp_avg_sq"):
                        if key in state:
                            state[key][index] = 0.0
        return count

    def clone(self, index: int) -> Algorithm:
        """An independent copy (networks, learned parameters, optimizers, spec, record) with
        ``index``.

        A copy under a new index gets random generators of its own (from the run's member seed
        and that index), so that copies of one parent explore differently; a copy under the
        same index continues its parent's streams."""
        twin = copy.deepcopy(self)
        if index != self.index:
            twin.index = index
            twin._seed_generators()
        return twin

    # -- checkpoints ---------------------------------------------------------------------------

    def save_portable(self, directory: Path) -> bool:
        """Save the member in a format other tools read (e.g. a PEFT adapter folder) into
        ``directory``, next to the run's ``elite.pt``; returns whether it wrote anything (by
        default nothing: ``elite.pt`` is the member)."""
        return False

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to restore this member exactly."""
        return {
            "index": self.index,
            "arch": self.arch.to_dict(),
            "hyperparameters": self.hyperparameters(),
            "networks": {name: net.state_dict() for name, net in self.networks.items()},
            "parameters": {
                name: parameter.detach().clone()
                for name, parameter in self.learned_parameters.items()
            },
            "optimizers": {name: opt.state_dict() for name, opt in self.optimizers.items()},
            "record": copy.deepcopy(self.record.__dict__),
            "torch_rng": self.generator.get_state(),
            "numpy_rng": self.rng.bit_generator.state,
            "extra": self.extra_state(),
            "neuron_scores": copy.deepcopy(self.neuron_scores),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (the architecture is rebuilt first)."""
        self.index = state["index"]
        arch = NetworkArch.from_dict(state["arch"])
        if arch != self.arch:  # rebuilding takes milliseconds: remote backends restore often
            check_saved_arch(arch, self.networks.values(), state["networks"], self.context.network)
            self.set_architecture(arch)
        for name, value in state["hyperparameters"].items():
            self.set_hyperparameter(name, value)
        for name, network_state in state["networks"].items():
            self.networks[name].load_state_dict(network_state)
        with torch.no_grad():  # checkpoints made before learned parameters existed have none
            for name, value in state.get("parameters", {}).items():
                self.learned_parameters[name].copy_(value)
        for name, optimizer_state in state["optimizers"].items():
            self.optimizers[name].load_state_dict(optimizer_state)
        self.record = MemberRecord(**state["record"])
        self.generator.set_state(state["torch_rng"])
        self.rng.bit_generator.state = state["numpy_rng"]
        self.load_extra_state(state["extra"])
        self.neuron_scores = _saved_scores(state.get("neuron_scores"))

    def extra_state(self) -> dict[str, Any]:
        """Algorithm-specific state to checkpoint (e.g. DQN's epsilon)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` saved."""

    # -- internals -----------------------------------------------------------------------------

    def _trained(self, optimizer: str) -> list[torch.nn.Parameter]:
        """What an optimizer trains: its networks' parameters, then its learned parameters."""
        plan = self._plans[optimizer]
        networks = [p for name in plan.networks for p in self.parameter_list(name)]
        return networks + [self.learned_parameters[name] for name in plan.parameters]

    def _named_parameters(self, plan: _OptimizerPlan) -> dict[str, torch.nn.Parameter]:
        named = {
            f"{network}.{name}": parameter
            for network in plan.networks
            for name, parameter in self.networks[network].named_parameters()
        }
        for name in plan.parameters:
            named[f"learned_parameters.{name}"] = self.learned_parameters[name]
        return named

    def _make_optimizer(self, plan: _OptimizerPlan) -> torch.optim.Optimizer:
        parameters = list(self._named_parameters(plan).values())
        lr = getattr(self.spec, plan.lr_attribute)
        eager_optimizers()
        # fused: one kernel for every tensor of the step, much faster for small networks
        return torch.optim.Adam(parameters, lr=lr, fused=True)

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """Every network's parameters, then the learned parameters."""
        for network in self.networks.values():
            yield from network.parameters()
        yield from self.learned_parameters.values()


@dataclass
class LearnResult:
    """What one call of ``learn`` reports, in either family: its loss and, for prioritised
    replay, new priorities of the batch's rows."""

    loss: float
    priorities: torch.Tensor | None = None


#: Prioritised replay's importance exponent anneals from this to 1 over a member's training.
INITIAL_IMPORTANCE_EXPONENT = 0.4


class OffPolicyAlgorithm(Algorithm):
    """An algorithm that learns from batches sampled out of the shared replay buffer.

    The runner reads ``self.spec.batch_size`` (rows per batch) and ``self.spec.learn_step``
    (environment steps per learn call), and, with prioritised replay,
    :meth:`importance_exponent`.
    """

    spec: Any  # an AlgorithmSpec with a learn_step field

    def learn(self, batch: Any) -> LearnResult:
        """One gradient step on a :class:`~agile_rl.runtime.buffers.Transitions` batch. By
        default, the :attr:`~Algorithm.group_learner`'s ``learn_batch`` for this member alone:
        the one update, on a group of one."""
        stacked = one_member(batch)
        rows = torch.ones_like(stacked.weights)
        active = torch.ones(1, dtype=torch.bool)  # on the CPU: reading it never waits on a GPU
        losses, priorities = self.solo_learner().learn_batch(stacked, rows, active)
        return LearnResult(float(losses[0]), None if priorities is None else priorities[0])

    def importance_exponent(self, progress: float) -> float:
        """Prioritised replay's importance-sampling exponent (beta) for the next batch.

        :param progress: the fraction of the member's step budget done (its steps over
            ``training.max_steps``, at most 1).
        :returns: by default, annealed linearly from 0.4 to 1 over training (Schaul et al.,
            2016).
        """
        start = INITIAL_IMPORTANCE_EXPONENT
        return min(1.0, start + (1.0 - start) * progress)


class OnPolicyAlgorithm(Algorithm):
    """An algorithm that learns from the rollouts it just collected.

    The runner reads ``self.spec.learn_step``, the length of a rollout in environment steps.
    """

    spec: Any  # an AlgorithmSpec with a learn_step field
    #: Its learning takes rollouts whose image observations (a uint8 box) are stored as the
    #: environment gave them, a quarter of their preprocessed size, and preprocesses them
    #: itself (:meth:`obs_tensor`); False: rollouts hold what :meth:`obs_tensor` made.
    stores_pixel_bytes: ClassVar[bool] = False

    def policy_step(
        self, obs: torch.Tensor | dict[str, torch.Tensor]
    ) -> tuple[np.ndarray, PolicyRecord | tuple[torch.Tensor, ...]]:
        """For preprocessed observations: the environment actions, and the
        ``(actions, log_probs, values)`` tensors :meth:`learn` needs, followed for a recurrent
        policy by the hidden state it acted from (a :class:`~agile_rl.PolicyRecord`). By
        default, the :attr:`~Algorithm.group_learner`'s ``policy_step`` for this member alone
        (its stacked record's member dimension taken off)."""
        actions, record = self._solo_on_policy().policy_step(obs)
        state = None if record.state is None else tuple(part[0] for part in record.state)
        return actions, PolicyRecord(
            record.actions[0], record.log_probs[0], record.values[0], state
        )

    def learn(self, rollout: Any, last_obs: torch.Tensor | dict[str, torch.Tensor]) -> LearnResult:
        """Update on a :class:`~agile_rl.runtime.rollout.Rollout` whose next observation is
        ``last_obs``; returns the mean loss as a :class:`LearnResult` (anything else stops the
        run, naming what it got). By default, the :attr:`~Algorithm.group_learner`'s
        ``learn_rollouts`` for this member alone."""
        [loss] = self._solo_on_policy().learn_rollouts([rollout], last_obs)
        return LearnResult(float(loss or 0.0))

    def _solo_on_policy(self) -> OnPolicyGroupLearner:
        """The class's group learner over this member alone (:meth:`~Algorithm.solo_learner`),
        which the default ``policy_step`` and ``learn`` need to be an
        :class:`~agile_rl.OnPolicyGroupLearner`."""
        learner = self.solo_learner()
        if not isinstance(learner, OnPolicyGroupLearner):
            raise TypeError(
                f"{type(self).__name__}.group_learner is {type(learner).__name__}, not an "
                "OnPolicyGroupLearner: name one, or implement policy_step and learn"
            )
        return learner
