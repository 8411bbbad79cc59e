"""The frame of decentralised actors trained through centralised critics (MADDPG, MATD3):
networks, exploration, action scaling and checkpoint state on the member; acting and the
update (critics every call, actors and targets when the member's policy delay says) on its
group learner, written once for a group of members (a subclass changes the parts it
varies)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar, cast

import numpy as np
import torch
from gymnasium import spaces

from agile_rl.models.actor_critic import CentralisedActorCriticSpec
from agile_rl.nn import sampling
from agile_rl.runtime.algorithms.actions import BoxActionScaler
from agile_rl.runtime.algorithms.noise import ornstein_uhlenbeck_step, restart_ou_noise
from agile_rl.runtime.buffers import Transitions
from agile_rl.runtime.exported import GreedyPolicy, NetworkHead, TeamPolicy, greedy_action
from agile_rl.runtime.group import GroupLearner, masked_mean
from agile_rl.runtime.multi_agent import MultiAgentOffPolicyAlgorithm
from agile_rl.runtime.stacked import flat_rows

# Weight of the penalty on discrete actors' squared logits, which keeps them from growing
# without bound under the straight-through gradient: Lowe et al.'s 1e-3. A stronger one (0.1,
# tried for #19) kept the speaker of MPE's speaker-listener from ever saying anything the
# listener could use: MATD3's final elites averaged -32.5 over 200 episodes, against -25.0
# at 1e-3 (seeds 1-5).
LOGIT_PENALTY = 1e-3


#: The members of a :class:`CentralisedActorCriticGroup`.
CentralisedT = TypeVar("CentralisedT", bound="CentralisedActorCritic", covariant=True)


class CentralisedActorCriticGroup(GroupLearner[CentralisedT]):
    """Acting and the update of :class:`CentralisedActorCritic`, for a group of members (a
    member alone is a group of one). Shapes have the member axis first: ``[k, B, ...]``; every
    member draws its noise (exploration, Gumbel samples, target smoothing) from its own
    generator for its own rows only, so a member computes the same in any group.

    **The update** (:meth:`learn_batch`): every critic regresses onto :meth:`td_targets`
    (``r_i + gamma * (1 - terminated_i) * V'_i``, ``V'_i`` from :meth:`next_values` at
    :meth:`target_actions`, both for a subclass to change); then the members whose
    :meth:`~CentralisedActorCritic.actors_due` says so update their actors
    (:meth:`update_actors`: actor ``i`` climbs its first critic with its own action from its
    current policy and the other agents' actions from the batch) and their targets follow.
    """

    # -- acting --------------------------------------------------------------------------------

    def act(self, obs: Any, *, explore: bool) -> dict[str, np.ndarray]:
        """Each agent's actions for the members' environments (``[k * E]`` rows per agent,
        member after member)."""
        actions: dict[str, list[np.ndarray]] = {}
        with torch.no_grad():
            for agent in self.members[0].agents:
                out = self.group.net(f"actor.{agent}")(self.agent_obs(obs, agent))["action"]
                actions[agent] = [
                    member.env_action(agent, own, explore)
                    for member, own in zip(self.members, out, strict=True)
                ]
        return {agent: np.concatenate(parts) for agent, parts in actions.items()}

    def agent_obs(self, obs: Mapping[str, Any], agent: str) -> torch.Tensor:
        """One agent's observations ``[k * B, ...]`` (member after member) as its networks
        take them, ``[k, B, width]``."""
        flat = self.members[0].agent_obs(obs, agent)
        return flat.reshape(self.group.size, -1, flat.shape[-1])

    def joint_obs(self, obs: Mapping[str, Any]) -> torch.Tensor:
        """Every agent's observations side by side, as the critics read them."""
        return torch.cat([self.agent_obs(obs, agent) for agent in self.members[0].agents], dim=2)

    # -- the update ----------------------------------------------------------------------------

    def learn_batch(
        self, batch: Transitions, rows: torch.Tensor, active: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        first = self.members[0]
        counts = [int(count) for count in rows.sum(1).tolist()]
        obs = flat_rows(batch.obs)
        joint = self.joint_obs(obs)
        stored = cast("dict[str, torch.Tensor]", batch.actions)
        taken = {agent: self.critic_action(agent, stored[agent]) for agent in first.agents}
        actions = torch.cat([taken[agent] for agent in first.agents], dim=2)
        losses = self.critic_losses(joint, actions, self.td_targets(batch, counts), rows)
        self.group.minimise(losses, first.critics, active)
        due = self.actors_due(active)
        if due.any():
            counts = [count if on else 0 for count, on in zip(counts, due.tolist(), strict=True)]
            self.update_actors(obs, joint, taken, rows, counts, due)
            self.soft_update_targets(due)
        return losses.detach(), None

    def actors_due(self, active: torch.Tensor) -> torch.Tensor:
        """Count a learn call for the active members; return which of them update their
        actors and targets now (:meth:`CentralisedActorCritic.actors_due`)."""
        due = []
        for member, on in zip(self.members, active.tolist(), strict=True):
            if on:
                member.learn_counter += 1
            due.append(bool(on) and member.actors_due())
        return torch.tensor(due, device=active.device)

    def critic_action(self, agent: str, stored: torch.Tensor) -> torch.Tensor:
        """Stored actions ``[k, B, ...]`` as a critic reads them, ``[k, B, width]``."""
        unit = self.members[0].critic_action(agent, stored.reshape(-1, *stored.shape[2:]))
        return unit.reshape(self.group.size, -1, unit.shape[-1])

    def td_targets(self, batch: Transitions, counts: Sequence[int]) -> dict[str, torch.Tensor]:
        """Each agent's regression target ``r_i + gamma * (1 - terminated_i) * V'_i``,
        ``[k, B]``, where ``V'_i`` is :meth:`next_values` at the target actors' next actions
        (``gamma`` each member's, or the batch's n-step discounts if it has them)."""
        rewards, terminated = batch.rewards, batch.terminated
        assert isinstance(rewards, dict) and isinstance(terminated, dict)
        gamma = self.group.hp("gamma").unsqueeze(1)
        discount = gamma if batch.discounts is None else batch.discounts
        with torch.no_grad():
            next_obs = flat_rows(batch.next_obs)
            next_values = self.next_values(
                self.joint_obs(next_obs), self.target_actions(next_obs, counts)
            )
            return {
                agent: rewards[agent] + discount * (1.0 - terminated[agent]) * next_values[agent]
                for agent in self.members[0].agents
            }

    def target_actions(self, next_obs: Mapping[str, Any], counts: Sequence[int]) -> torch.Tensor:
        """Every agent's next action from its target actor, side by side (critics' units);
        ``counts`` are each member's real rows (a subclass drawing noise needs them)."""
        return torch.cat(
            [self.greedy(agent, self._target_out(next_obs, agent)) for agent in self._agents()],
            dim=2,
        )

    def _target_out(self, next_obs: Mapping[str, Any], agent: str) -> torch.Tensor:
        return self.group.net(f"actor_target.{agent}")(self.agent_obs(next_obs, agent))["action"]

    def greedy(self, agent: str, out: torch.Tensor) -> torch.Tensor:
        """An actor's output as its deterministic action: tanh, or the argmax's one-hot."""
        first = self.members[0]
        if agent in first.boxes:
            return torch.tanh(out)
        return torch.nn.functional.one_hot(out.argmax(dim=-1), first.widths[agent]).float()

    def next_values(self, next_obs: torch.Tensor, next_actions: torch.Tensor) -> dict[str, Any]:
        """Each agent's target-critic value of the next joint state and actions, ``[k, B]``."""
        return {
            agent: self.q_value(f"critic_target.{agent}", next_obs, next_actions)
            for agent in self._agents()
        }

    def critic_losses(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        targets: dict[str, torch.Tensor],
        rows: torch.Tensor,
    ) -> torch.Tensor:
        """Each member's critic loss ``[k]``: every critic's mean squared TD error, summed."""
        losses = [
            masked_mean((self.q_value(f"{critic}.{agent}", obs, actions) - targets[agent])
                        .pow(2), rows)
            for critic in self.members[0].critics
            for agent in self._agents()
        ]  # fmt: skip
        return torch.stack(losses).sum(0)

    def q_value(self, network: str, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Critic ``network``'s value of joint observations and actions, ``[k, B]``."""
        return self.group.net(network)(obs, actions)["q"].squeeze(-1)

    def update_actors(
        self,
        obs: Mapping[str, Any],
        joint: torch.Tensor,
        taken: dict[str, torch.Tensor],
        rows: torch.Tensor,
        counts: Sequence[int],
        due: torch.Tensor,
    ) -> None:
        """Each due member's actors climb their first critic, each agent with its own action
        re-chosen by its policy (``counts``: the rows each member draws noise for)."""
        first, losses = self.members[0], []
        for agent in first.agents:
            out = self.group.net(f"actor.{agent}")(self.agent_obs(obs, agent))["action"]
            own = self.policy_action(agent, out, counts)
            actions = torch.cat([own if a == agent else taken[a] for a in first.agents], dim=2)
            value = self.q_value(f"{first.critics[0]}.{agent}", joint, actions)
            losses.append(-masked_mean(value, rows))
            if agent not in first.boxes:
                losses.append(LOGIT_PENALTY * masked_mean(out.pow(2).mean(-1), rows))
        self.group.minimise(torch.stack(losses).sum(0), ("actors",), due)

    def policy_action(self, agent: str, out: torch.Tensor, counts: Sequence[int]) -> torch.Tensor:
        """A differentiable action: tanh, or a straight-through Gumbel-softmax sample."""
        first = self.members[0]
        if agent in first.boxes:
            return torch.tanh(out)
        noise = self.member_noise(out.shape, counts, sampling.gumbel_noise)
        soft = torch.softmax(out + noise, dim=-1)
        hard = torch.nn.functional.one_hot(soft.argmax(dim=-1), first.widths[agent]).float()
        return hard - soft.detach() + soft

    def member_noise(
        self,
        shape: torch.Size,
        counts: Sequence[int],
        draw: Callable[[tuple[int, ...], torch.Generator], torch.Tensor],
    ) -> torch.Tensor:
        """Noise of ``shape`` ``[k, B, ...]``: each member's first ``count`` rows drawn by
        ``draw(shape, generator)`` from its own generator, zeros in the rows that pad."""
        noise = torch.zeros(shape, device=self.group.device)
        for row, (member, count) in enumerate(zip(self.members, counts, strict=True)):
            if count:
                noise[row, :count] = draw((count, *shape[2:]), member.generator).to(noise.device)
        return noise

    def soft_update_targets(self, due: torch.Tensor) -> None:
        """target <- target + tau * (online - target), for every actor and critic of the due
        members."""
        roles = ("actor", *self.members[0].critics)
        pairs = [(f"{role}_target.{a}", f"{role}.{a}") for role in roles for a in self._agents()]
        self.group.soft_update(pairs, self.group.hp("tau"), due)

    def _agents(self) -> list[str]:
        return self.members[0].agents


class CentralisedActorCritic(MultiAgentOffPolicyAlgorithm):
    """Decentralised actors trained through centralised critics, as in MADDPG (Lowe et al.,
    2017); the spec is a :class:`~agile_rl.CentralisedActorCriticSpec`.

    Every agent has its own actor, reading only its own observations, and for each name in
    :attr:`critics` its own critic ``Q_i(x, a_1, ..., a_n)`` reading every agent's observations
    ``x`` and actions, so the agents may differ in observation and action spaces.

    **Actions.** A Box agent's actor output is squashed by tanh into [-1, 1], explored with
    Gaussian or Ornstein-Uhlenbeck noise there (as in DDPG), and rescaled into the Box bounds
    for the environment; critics see [-1, 1] units. A Discrete agent's actor outputs logits:
    it explores by sampling its softmax, and with chance ``expl_noise`` takes a uniformly
    random action instead; it acts greedily when evaluated, and critics see one-hot actions;
    its policy gradient flows through a straight-through Gumbel-softmax sample, and a small
    penalty on its squared logits (:data:`LOGIT_PENALTY`) keeps them bounded.

    **Acting and the update** are written once, for a group of members, in
    :attr:`group_learner` (:class:`CentralisedActorCriticGroup`; a member alone runs it as a
    group of one); the member keeps its own part: exploration (:meth:`env_action`), stored
    actions as critics read them (:meth:`critic_action`) and its policy delay
    (:meth:`actors_due`, over ``learn_counter``, which counts learn calls). All actors share one
    optimizer following ``lr_actor``; each critic name has one, over every agent, following
    ``lr_critic``; a team's loss is the sum of its agents'.

    Activation mutation is skipped, as in the reference implementation.
    """

    supports_activation_mutation: ClassVar[bool] = False
    critics: ClassVar[tuple[str, ...]] = ("critic",)
    group_learner = CentralisedActorCriticGroup

    spec: CentralisedActorCriticSpec
    policy_role = "actor"  # parameter mutation perturbs every actor.<agent>

    def build(self) -> None:
        self.widths = {agent: _action_width(space) for agent, space in self.action_spaces.items()}
        self.boxes = {
            agent: BoxActionScaler(space, self.device)
            for agent, space in self.action_spaces.items()
            if isinstance(space, spaces.Box)
        }
        self.starts = {
            agent: int(space.start)
            for agent, space in self.action_spaces.items()
            if isinstance(space, spaces.Discrete)
        }
        joint = self.joint_observation_space()
        self.policy_network = f"actor.{self.agents[0]}"
        for agent in self.agents:
            heads, space = {"action": self.widths[agent]}, self.observation_spaces[agent]
            self.add_network(f"actor.{agent}", heads, observation_space=space)
        for critic in self.critics:
            for agent in self.agents:
                total = sum(self.widths.values())
                self.add_network(f"{critic}.{agent}", {"q": 1}, total, observation_space=joint)
        for name in list(self.networks):
            online = self.networks[name]
            role, agent = name.split(".")
            target = self.add_network(
                f"{role}_target.{agent}", online.head_sizes, online.head_extra,
                observation_space=online.observation_space,
            )  # fmt: skip
            target.load_state_dict(online.state_dict())
            target.requires_grad_(False)
        self.add_optimizer("actors", self._names("actor"), "lr_actor")
        for critic in self.critics:
            self.add_optimizer(critic, self._names(critic), "lr_critic")
        self.learn_counter = 0
        self.ou_noise = {a: np.zeros((self.context.num_envs, self.widths[a])) for a in self.boxes}

    def _names(self, role: str) -> tuple[str, ...]:
        return tuple(f"{role}.{agent}" for agent in self.agents)

    # -- acting (the group learner acts; these are each member's own part) ---------------------

    def export_policy(self) -> TeamPolicy:
        """Each agent's actor without exploration: the argmax of a Discrete agent's logits, a
        Box agent's tanh output rescaled into its bounds."""
        policies = {}
        for agent in self.agents:
            body = NetworkHead(self.networks[f"actor.{agent}"], "action")
            action = greedy_action(self.action_spaces[agent], squash=True)
            space = self.observation_spaces[agent]
            policies[agent] = GreedyPolicy(space, body, action, flatten=True)
        return TeamPolicy(policies)

    def env_action(self, agent: str, out: torch.Tensor, explore: bool) -> np.ndarray:
        """Agent ``agent``'s environment actions for its actor's output ``out`` (one row per
        environment): the argmax or the rescaled tanh, or, exploring, a softmax sample (or a
        uniform action) or the tanh with one step of noise."""
        if agent not in self.boxes:
            if not explore:
                return out.argmax(dim=-1).cpu().numpy() + self.starts[agent]
            out = out + sampling.gumbel_noise(out.shape, self.generator, self.device)
            return self.random_actions(agent, out.argmax(dim=-1).cpu().numpy())
        unit = torch.tanh(out).cpu().numpy()
        if explore:
            unit = np.clip(unit + self.exploration_noise(agent, unit.shape[0]), -1.0, 1.0)
        return self.boxes[agent].to_env(unit)

    def random_actions(self, agent: str, sampled: np.ndarray) -> np.ndarray:
        """A Discrete agent's exploring actions: ``sampled`` from its softmax, each replaced
        by a uniformly random action with chance ``expl_noise``."""
        size = sampled.shape[0]
        replaced = self.rng.random(size) < self.spec.expl_noise
        uniform = self.rng.integers(0, self.widths[agent], size)
        return np.where(replaced, uniform, sampled) + self.starts[agent]

    def exploration_noise(self, agent: str, num_envs: int) -> np.ndarray:
        """One step of a Box agent's exploration noise for ``num_envs`` environments."""
        shape, spec = (num_envs, self.widths[agent]), self.spec
        if not spec.O_U_noise:
            return self.rng.normal(spec.mean_noise, spec.expl_noise, size=shape)
        state = self.ou_noise[agent]
        if state.shape != shape:
            state = np.zeros(shape)
        self.ou_noise[agent] = ornstein_uhlenbeck_step(
            state, self.rng,
            theta=spec.theta, mean=spec.mean_noise, sigma=spec.expl_noise, dt=spec.dt,
        )  # fmt: skip
        return self.ou_noise[agent].copy()

    def reset_state(self, envs: np.ndarray | None = None) -> None:
        """Episodes start: their Ornstein-Uhlenbeck processes restart at zero."""
        for agent, state in self.ou_noise.items():
            self.ou_noise[agent] = restart_ou_noise(state, envs)

    def critic_action(self, agent: str, stored: torch.Tensor) -> torch.Tensor:
        """Stored actions as a critic reads them: one-hot, or [-1, 1] units, ``[N, width]``."""
        if agent in self.boxes:
            return self.boxes[agent].to_unit(stored)
        index = stored.long() - self.starts[agent]
        return torch.nn.functional.one_hot(index, self.widths[agent]).float()

    def actors_due(self) -> bool:
        """Whether this learn call (already counted in ``learn_counter``) also updates the
        actors and targets: every call here; a policy delay overrides it."""
        return True

    # -- checkpoints -----------------------------------------------------------------------------

    def extra_state(self) -> dict[str, Any]:
        noise = {agent: state.copy() for agent, state in self.ou_noise.items()}
        return {"learn_counter": self.learn_counter, "ou_noise": noise}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.learn_counter = int(state["learn_counter"])
        self.ou_noise = {a: np.array(v, dtype=np.float64) for a, v in state["ou_noise"].items()}


def _action_width(space: spaces.Space) -> int:
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.Box):
        return int(np.prod(space.shape))
    raise NotImplementedError(
        f"each agent's actions must be Box or Discrete, not {type(space).__name__}"
    )
