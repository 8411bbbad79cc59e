"""The frame of single-agent deterministic actor-critics (DDPG, TD3): networks, acting with
exploration noise, action scaling, target updates and checkpoint state. A subclass adds the
update, :meth:`~agile_rl.Algorithm.learn`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, TypeVar, cast

import numpy as np
import torch

from agile_rl.models.actor_critic import DeterministicActorCriticSpec
from agile_rl.nn.arch import NetworkArch
from agile_rl.nn.modules import BorrowedEncoder, EvolvableNetwork
from agile_rl.nn.transfer import transfer_weights
from agile_rl.runtime.agent import OffPolicyAlgorithm
from agile_rl.runtime.algorithms.actions import BoxActionScaler, box_action_space
from agile_rl.runtime.algorithms.noise import ornstein_uhlenbeck_step, restart_ou_noise
from agile_rl.runtime.buffers import Transitions
from agile_rl.runtime.exported import GreedyPolicy, NetworkHead, greedy_action
from agile_rl.runtime.group import GroupLearner, masked_mean
from agile_rl.runtime.stacked import flat_rows, stacked_observations


class SharedEncoderCritic(EvolvableNetwork):
    """A Q(s, a) network whose encoder is a :class:`BorrowedEncoder` of an actor (the online
    actor for a critic, the target actor for a target critic): only its heads are its own.

    :param owner: the network whose encoder it reads.
    :param arch: the architecture of its heads (the member's, which the owner has too).
    :param heads: name and output width of each head.
    :param head_extra: width of the extra head input (the action).
    :param generator: source of the initial weights.
    """

    def __init__(
        self,
        owner: EvolvableNetwork,
        arch: NetworkArch,
        heads: Mapping[str, int],
        *,
        head_extra: int,
        generator: torch.Generator | None = None,
    ) -> None:
        device = next(owner.parameters()).device
        super().__init__(arch, owner.observation_space, heads, head_extra=head_extra,
                         generator=generator, device=device)  # fmt: skip
        self.encoder = BorrowedEncoder(owner)  # replaces the encoder the base class built

    @property
    def borrowed(self) -> BorrowedEncoder:
        """What stands in for its encoder."""
        return cast(BorrowedEncoder, self.encoder)

    def rebuilt(
        self, arch: NetworkArch, generator: torch.Generator | None = None
    ) -> SharedEncoderCritic:
        """A critic of ``arch`` holding this one's head weights where shapes overlap, reading
        the same owner (which the member points at the rebuilt actor afterwards)."""
        network = SharedEncoderCritic(self.borrowed.owner, arch, self.head_sizes,
                                      head_extra=self.head_extra, generator=generator)  # fmt: skip
        transfer_weights(self, network)
        return network.train(self.training)


class DeterministicActorCritic(OffPolicyAlgorithm):
    """A tanh-squashed deterministic actor, the critics named in :attr:`critics` reading
    ``(s, a)``, and a target network for each; the spec is a
    :class:`~agile_rl.DeterministicActorCriticSpec`.

    **Action scale.** The actor's output is squashed by tanh into [-1, 1]; exploration noise is
    added there and the result clipped to [-1, 1]. :meth:`act` then rescales it linearly into the
    action space's Box bounds, and the replay buffer stores those environment actions.
    :meth:`to_unit` maps stored actions back to [-1, 1], so the critics and the actor always
    work in [-1, 1] units, whatever the bounds.

    **Exploration.** With ``O_U_noise`` each environment has its own Ornstein-Uhlenbeck process
    ``x += theta * (mean_noise - x) * dt + expl_noise * sqrt(dt) * N(0, 1)``, which restarts at
    zero where an episode starts (:meth:`reset_state`) and everywhere when the number of
    environments changes; it is saved with checkpoints. Otherwise the noise is
    ``N(mean_noise, expl_noise)``, drawn afresh at each step.

    **Acting and updates** are written once, for a group of members, in
    :class:`DeterministicActorCriticGroup` (acting, and the pieces of an update:
    ``policy_actions``, ``q_values``, ``bootstrap``, ``update_actor``,
    ``soft_update_targets``); a subclass names a group learner deriving from it that adds
    the update, and a member alone runs it as a group of one. ``learn_counter`` counts learn
    calls for a policy delay. Prioritised replay's exponent is the default of
    :meth:`~agile_rl.OffPolicyAlgorithm.importance_exponent`.

    **Shared encoders.** With ``share_encoders`` each critic is a :class:`SharedEncoderCritic`:
    it has heads only and reads the actor's encoder as it is at that moment (no copy), its
    latent computed without gradient, so the critic loss trains the critic's heads and only the
    actor's loss trains the encoder. Each target critic reads the target actor's encoder, which
    follows the actor by the soft update. Nothing is copied, so the tie holds at every step;
    :meth:`set_architecture` points the rebuilt critics at the rebuilt actors, and checkpoints
    and clones keep it (the critics' state holds their heads only). Such members stack like
    any others: a stacked critic reads the stacked actors' latents
    (:attr:`~agile_rl.runtime.stacked.StackedNetwork.borrowed`).

    Activation mutation is skipped, as in the reference implementation.
    """

    supports_activation_mutation: ClassVar[bool] = False
    #: The critics' network names; each gets an optimizer following ``lr_critic``.
    critics: ClassVar[tuple[str, ...]] = ("critic",)

    spec: DeterministicActorCriticSpec
    policy_network = "actor"

    def build(self) -> None:
        space = box_action_space(self.action_space, type(self).__name__)
        self.action_dim = int(np.prod(space.shape))
        self.scaler = BoxActionScaler(space, self.device)
        self.add_network("actor", {"action": self.action_dim})
        for name in self.critics:
            self.add_critic(name, "actor")
        self.add_network("actor_target", {"action": self.action_dim})
        for name in self.critics:
            self.add_critic(f"{name}_target", "actor_target")
        for name in ("actor", *self.critics):
            target = self.networks[f"{name}_target"]
            target.load_state_dict(self.networks[name].state_dict())
            target.requires_grad_(False)
        self.add_optimizer("actor", ("actor",), "lr_actor")
        for name in self.critics:  # one optimizer per critic, all following lr_critic
            self.add_optimizer(name, (name,), "lr_critic")
        self.learn_counter = 0
        self.ou_noise = np.zeros((self.context.num_envs, self.action_dim))

    def add_critic(self, name: str, actor: str) -> EvolvableNetwork:
        """Build and register the Q(s, a) network ``name``; with ``share_encoders`` it reads
        the encoder of the network ``actor`` (already built) instead of having its own."""
        if not self.spec.share_encoders:
            return self.add_network(name, {"q": 1}, head_extra=self.action_dim)
        critic = SharedEncoderCritic(
            self.networks[actor], self.arch, {"q": 1}, head_extra=self.action_dim,
            generator=self.generator,
        )  # fmt: skip
        self.networks[name] = critic
        return critic

    def set_architecture(self, arch: NetworkArch) -> None:
        """Rebuild every network for ``arch`` (see :meth:`~agile_rl.Algorithm.set_architecture`);
        with shared encoders, then point the rebuilt critics at the rebuilt actors."""
        super().set_architecture(arch)
        self.tie_encoders()

    def tie_encoders(self) -> None:
        """Point every :class:`SharedEncoderCritic` at the actor's encoder, and every target
        critic at the target actor's (nothing to do without ``share_encoders``)."""
        for name, network in self.networks.items():
            if isinstance(network, SharedEncoderCritic):
                actor = "actor_target" if name.endswith("_target") else "actor"
                network.borrowed.borrow_from(self.networks[actor])

    # -- acting (the group learner acts; these are each member's own part) ---------------------

    def export_policy(self) -> GreedyPolicy:
        """The actor's tanh output rescaled into the action bounds, without noise."""
        body = NetworkHead(self.networks["actor"], "action")
        action = greedy_action(self.scaler.space, squash=True)
        return GreedyPolicy(self.observation_space, body, action)

    def noisy_actions(self, unit: np.ndarray) -> np.ndarray:
        """Environment actions for policy actions ``unit`` in [-1, 1] (one row per
        environment), with one step of exploration noise added and clipped to [-1, 1]."""
        return self.to_env(np.clip(unit + self.exploration_noise(unit.shape[0]), -1.0, 1.0))

    def exploration_noise(self, num_envs: int) -> np.ndarray:
        """One step of exploration noise for ``num_envs`` environments, in [-1, 1] units."""
        shape, spec = (num_envs, self.action_dim), self.spec
        if not spec.O_U_noise:
            return self.rng.normal(spec.mean_noise, spec.expl_noise, size=shape)
        if self.ou_noise.shape != shape:
            self.ou_noise = np.zeros(shape)
        self.ou_noise = ornstein_uhlenbeck_step(
            self.ou_noise, self.rng,
            theta=spec.theta, mean=spec.mean_noise, sigma=spec.expl_noise, dt=spec.dt,
        )  # fmt: skip
        return self.ou_noise.copy()

    def reset_state(self, envs: np.ndarray | None = None) -> None:
        """Episodes start (in every environment, or where ``envs`` is true): their
        Ornstein-Uhlenbeck processes restart at zero."""
        self.ou_noise = restart_ou_noise(self.ou_noise, envs)

    def to_env(self, unit: np.ndarray) -> np.ndarray:
        """Actions in [-1, 1] as actions of the environment's Box, ``[N, *shape]``."""
        return self.scaler.to_env(unit)

    def to_unit(self, actions: torch.Tensor) -> torch.Tensor:
        """Stored environment actions back in [-1, 1], ``[N, action_dim]``."""
        return self.scaler.to_unit(actions)

    # -- the rest --------------------------------------------------------------------------------

    def extra_state(self) -> dict[str, Any]:
        return {"learn_counter": self.learn_counter, "ou_noise": self.ou_noise.copy()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.learn_counter = int(state["learn_counter"])
        self.ou_noise = np.array(state["ou_noise"], dtype=np.float64)


class CriticMember(Protocol):
    """What :class:`CriticGroup` reads from its members."""

    spec: Any  # with the fields gamma and policy_freq
    learn_counter: int

    def obs_tensor(self, obs: Any) -> torch.Tensor | dict[str, torch.Tensor]: ...

    def to_unit(self, actions: torch.Tensor) -> torch.Tensor: ...


#: The members of a :class:`CriticGroup` and of a :class:`DeterministicActorCriticGroup`.
CriticT = TypeVar("CriticT", bound=CriticMember, covariant=True)
DeterministicT = TypeVar("DeterministicT", bound=DeterministicActorCritic, covariant=True)


class CriticGroup(GroupLearner[CriticT]):
    """What actor-critics with Q(s, a) critics over Box actions in [-1, 1] units share, for a
    group of members (a member alone is a group of one): the batch's inputs, the critics'
    values, the bootstrap multiplier and a policy delay. Shapes have the member axis first:
    ``[k, B, ...]``. The members provide what :class:`CriticMember` names."""

    def inputs(self, batch: Transitions) -> tuple[Any, Any, torch.Tensor]:
        """A stacked batch's observations and next observations as the networks take them,
        and its actions in [-1, 1]."""
        return (
            self.observations(batch.obs),
            self.observations(batch.next_obs),
            self.to_unit(batch.actions),
        )

    def observations(self, obs: Any) -> Any:
        """Stacked stored observations ``[k, B, ...]`` as the networks take them."""
        return stacked_observations(self.members[0].obs_tensor(flat_rows(obs)), self.group.size)

    def to_unit(self, actions: torch.Tensor) -> torch.Tensor:
        """Stacked stored actions back in [-1, 1], ``[k, B, action_dim]``."""
        unit = self.members[0].to_unit(actions.reshape(-1, *actions.shape[2:]))
        return unit.reshape(self.group.size, -1, unit.shape[-1])

    def q_values(self, network: str, obs: Any, actions: torch.Tensor) -> torch.Tensor:
        """Q(s, a) of one critic for every member, ``[k, B]``."""
        return self.group.net(network)(obs, actions)["q"].squeeze(-1)

    def bootstrap(self, batch: Transitions) -> torch.Tensor:
        """Each member's multiplier of the next state's value, ``[k, B]``: its discount (the
        batch's n-step discounts, else its ``gamma``), zero where the episode ended."""
        gamma = self.group.hp("gamma").unsqueeze(1)
        discount = gamma if batch.discounts is None else batch.discounts
        return discount * (1.0 - batch.terminated)

    def policy_delay(self, active: torch.Tensor) -> torch.Tensor:
        """Count a learn call for the active members; return which of them update their
        actor now (every ``policy_freq``-th call of each)."""
        due = []
        for member, on in zip(self.members, active.tolist(), strict=True):
            if on:
                member.learn_counter += 1
            due.append(bool(on) and member.learn_counter % member.spec.policy_freq == 0)
        return torch.tensor(due, device=active.device)


class DeterministicActorCriticGroup(CriticGroup[DeterministicT]):
    """Acting and the pieces of an update of :class:`DeterministicActorCritic`, for a group of
    members (a member alone is a group of one); a subclass adds
    :meth:`~agile_rl.GroupLearner.learn_batch`."""

    def act(self, obs: Any, *, explore: bool) -> np.ndarray:
        size = self.group.size
        with torch.no_grad():
            stacked = stacked_observations(self.members[0].obs_tensor(obs), size)
            unit = self.policy_actions("actor", stacked).cpu().numpy()
        rows = zip(self.members, unit, strict=True)
        return np.concatenate(
            [member.noisy_actions(own) if explore else member.to_env(own) for member, own in rows]
        )

    def policy_actions(self, network: str, obs: Any) -> torch.Tensor:
        """The deterministic policy of ``network`` (the actor or its target) for every
        member, in [-1, 1]."""
        return torch.tanh(self.group.net(network)(obs)["action"])

    def update_actor(self, critic: str, obs: Any, rows: torch.Tensor, active: torch.Tensor) -> None:
        """Move each active member's actor up the gradient of its ``critic``'s Q(s, mu(s))."""
        q = self.q_values(critic, obs, self.policy_actions("actor", obs))
        self.group.minimise(-masked_mean(q, rows), ("actor",), active)

    def soft_update_targets(self, active: torch.Tensor) -> None:
        """Every target follows its network by each active member's ``tau``."""
        critics = type(self.members[0]).critics
        pairs = [(f"{name}_target", name) for name in ("actor", *critics)]
        self.group.soft_update(pairs, self.group.hp("tau"), active)
