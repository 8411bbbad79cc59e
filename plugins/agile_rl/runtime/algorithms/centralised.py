"""The frame of decentralised actors trained through centralised critics (MADDPG, MATD3):
networks, acting with exploration, action scaling, the critics' targets and loss, the actors'
update and checkpoint state, and one learn step (critics every call, actors and targets when
:meth:`actors_due` says; a subclass changes the parts it varies)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, cast

import numpy as np
import torch
from gymnasium import spaces

from agile_rl.models.actor_critic import CentralisedActorCriticSpec
from agile_rl.nn import sampling
from agile_rl.runtime.agent import LearnResult
from agile_rl.runtime.algorithms.actions import BoxActionScaler
from agile_rl.runtime.algorithms.noise import ornstein_uhlenbeck_step, restart_ou_noise
from agile_rl.runtime.buffers import Transitions
from agile_rl.runtime.exported import GreedyPolicy, NetworkHead, TeamPolicy, greedy_action
from agile_rl.runtime.multi_agent import MultiAgentOffPolicyAlgorithm

# Weight of the penalty on discrete actors' squared logits, which keeps them from growing
# without bound under the straight-through gradient: Lowe et al.'s 1e-3. A stronger one (0.1,
# tried for #19) kept the speaker of MPE's speaker-listener from ever saying anything the
# listener could use: MATD3's final elites averaged -32.5 over 200 episodes, against -25.0
# at 1e-3 (seeds 1-5).
LOGIT_PENALTY = 1e-3


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

    **Pieces of an update.** :meth:`td_targets` (``r_i + gamma * (1 - terminated_i) * V'_i``,
    with :meth:`next_values` at :meth:`target_actions`, both for a subclass to change),
    :meth:`critic_loss`, :meth:`update_actors` (actor ``i`` climbs its first critic with its own
    action from its current policy and the other agents' actions from the batch) and
    :meth:`soft_update_targets`. All actors share one optimizer following ``lr_actor``; each
    critic name has one, over every agent, following ``lr_critic``; a team's loss is the sum of
    its agents'. ``learn_counter`` counts learn calls for a policy delay.

    Activation mutation is skipped, as in the reference implementation.
    """

    supports_activation_mutation: ClassVar[bool] = False
    critics: ClassVar[tuple[str, ...]] = ("critic",)

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

    # -- acting ----------------------------------------------------------------------------------

    def act(self, obs: Any, *, explore: bool) -> dict[str, np.ndarray]:
        actions = {}
        with torch.no_grad():
            for agent in self.agents:
                out = self.networks[f"actor.{agent}"](self.agent_obs(obs, agent))["action"]
                actions[agent] = self._env_action(agent, out, explore)
        return actions

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

    def _env_action(self, agent: str, out: torch.Tensor, explore: bool) -> np.ndarray:
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

    # -- learning --------------------------------------------------------------------------------

    def learn(self, batch: Transitions) -> LearnResult:
        """Every critic regresses onto its TD target; then, when :meth:`actors_due`, every
        actor climbs its critic and the targets follow."""
        # a multi-agent buffer samples observations and actions by agent
        agent_obs = cast("dict[str, torch.Tensor]", batch.obs)
        stored = cast("dict[str, torch.Tensor]", batch.actions)
        obs = self.joint_obs(agent_obs)
        taken = {agent: self.critic_action(agent, stored[agent]) for agent in self.agents}
        actions = torch.cat([taken[agent] for agent in self.agents], dim=1)
        loss = self.critic_loss(obs, actions, self.td_targets(batch))
        self.minimise(loss, self.critics)
        self.learn_counter += 1
        if self.actors_due():
            self.update_actors(agent_obs, obs, taken)
            self.soft_update_targets()
        return LearnResult(float(loss.detach()))

    def actors_due(self) -> bool:
        """Whether this learn call also updates the actors and targets (every call here; a
        policy delay overrides it)."""
        return True

    def td_targets(self, batch: Transitions) -> dict[str, torch.Tensor]:
        """Each agent's regression target ``r_i + gamma * (1 - terminated_i) * V'_i``, where
        ``V'_i`` is :meth:`next_values` at the target actors' next actions (``gamma`` is the
        batch's n-step discounts, if it has them)."""
        rewards, terminated = batch.rewards, batch.terminated
        assert isinstance(rewards, dict) and isinstance(terminated, dict)
        discount = self.spec.gamma if batch.discounts is None else batch.discounts
        with torch.no_grad():
            next_obs = self.joint_obs(batch.next_obs)
            next_values = self.next_values(next_obs, self.target_actions(batch.next_obs))
            return {
                agent: rewards[agent] + discount * (1.0 - terminated[agent]) * next_values[agent]
                for agent in self.agents
            }

    def critic_action(self, agent: str, stored: torch.Tensor) -> torch.Tensor:
        """Stored actions as a critic reads them: one-hot, or [-1, 1] units, ``[N, width]``."""
        if agent in self.boxes:
            return self.boxes[agent].to_unit(stored)
        index = stored.long() - self.starts[agent]
        return torch.nn.functional.one_hot(index, self.widths[agent]).float()

    def target_actions(self, next_obs: Mapping[str, Any]) -> torch.Tensor:
        """Every agent's next action from its target actor, side by side (critics' units)."""
        columns = []
        for agent in self.agents:
            out = self.networks[f"actor_target.{agent}"](self.agent_obs(next_obs, agent))
            columns.append(self.greedy(agent, out["action"]))
        return torch.cat(columns, dim=1)

    def greedy(self, agent: str, out: torch.Tensor) -> torch.Tensor:
        """An actor's output as its deterministic action: tanh, or the argmax's one-hot."""
        if agent in self.boxes:
            return torch.tanh(out)
        return torch.nn.functional.one_hot(out.argmax(dim=-1), self.widths[agent]).float()

    def next_values(self, next_obs: torch.Tensor, next_actions: torch.Tensor) -> dict[str, Any]:
        """Each agent's target-critic value of the next joint state and actions, ``[N]``."""
        return {
            agent: self.q_value(f"critic_target.{agent}", next_obs, next_actions)
            for agent in self.agents
        }

    def critic_loss(
        self, obs: torch.Tensor, actions: torch.Tensor, targets: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """The team's critic loss: each critic's mean squared TD error, summed."""
        losses = [
            (self.q_value(f"{critic}.{agent}", obs, actions) - targets[agent]).pow(2).mean()
            for critic in self.critics
            for agent in self.agents
        ]
        return torch.stack(losses).sum()

    def q_value(self, network: str, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.networks[network](obs, actions)["q"].squeeze(-1)

    def update_actors(
        self, agent_obs: Mapping[str, Any], obs: torch.Tensor, taken: dict[str, torch.Tensor]
    ) -> None:
        """Each actor climbs its first critic with its own action re-chosen by its policy."""
        losses = []
        for agent in self.agents:
            out = self.networks[f"actor.{agent}"](self.agent_obs(agent_obs, agent))["action"]
            joint = torch.cat(
                [self.policy_action(agent, out) if a == agent else taken[a] for a in self.agents],
                dim=1,
            )
            losses.append(-self.q_value(f"{self.critics[0]}.{agent}", obs, joint).mean())
            if agent not in self.boxes:
                losses.append(LOGIT_PENALTY * out.pow(2).mean())
        self.minimise(torch.stack(losses).sum(), ("actors",))

    def policy_action(self, agent: str, out: torch.Tensor) -> torch.Tensor:
        """A differentiable action: tanh, or a straight-through Gumbel-softmax sample."""
        if agent in self.boxes:
            return torch.tanh(out)
        noise = sampling.gumbel_noise(out.shape, self.generator, self.device)
        soft = torch.softmax(out + noise, dim=-1)
        hard = torch.nn.functional.one_hot(soft.argmax(dim=-1), self.widths[agent]).float()
        return hard - soft.detach() + soft

    def soft_update_targets(self) -> None:
        """target <- target + tau * (online - target), for every actor and critic."""
        self.soft_update([(self._target(n), n) for n in self._online_names()], self.spec.tau)

    def _online_names(self) -> list[str]:
        return [n for n in self.networks if n.split(".")[0] in ("actor", *self.critics)]

    @staticmethod
    def _target(name: str) -> str:
        role, agent = name.split(".")
        return f"{role}_target.{agent}"

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
