"""Deep Deterministic Policy Gradient.

Lillicrap et al., "Continuous control with deep reinforcement learning", ICLR 2016.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces

from agile_cli.agent import LearnResult, OffPolicyAlgorithm
from agile_cli.buffers import Transitions
from agile_ddpg.spec import DDPGSpec


class DDPG(OffPolicyAlgorithm):
    """A deterministic actor trained through a learned Q(s, a) critic (Lillicrap et al., 2016).

    **Action scale.** The actor's output is squashed by tanh into [-1, 1]; exploration noise is
    added there and the result clipped to [-1, 1]. :meth:`act` then rescales it linearly into the
    action space's Box bounds, and the replay buffer stores those environment actions.
    :meth:`learn` maps stored actions back to [-1, 1], so the critics and the actor always work
    in [-1, 1] units, whatever the bounds.

    **Exploration.** With ``O_U_noise`` each environment has its own Ornstein-Uhlenbeck process
    ``x += theta * (mean_noise - x) * dt + expl_noise * sqrt(dt) * N(0, 1)``, which restarts at
    zero where an episode starts (:meth:`reset_state`) and everywhere when the number of
    environments changes; it is saved with checkpoints. Otherwise the noise is
    ``N(mean_noise, expl_noise)``, drawn afresh at each step.

    **Updates.** The critic regresses onto ``r + discount * (1 - terminated) * Q'(s', mu'(s'))``
    from the target networks; every ``policy_freq``-th learn call the actor climbs Q(s, mu(s))
    and the targets move ``tau`` of the way to the online networks. With
    ``replay_buffer.n_step_buffer`` it bootstraps from n-step returns; with
    ``replay_buffer.per_buffer`` the critic loss is weighted by importance weights whose exponent
    anneals from 0.4 to 1, and the new priorities are the critic's absolute TD errors.

    Activation mutation is skipped, as in the reference implementation.
    """

    supports_activation_mutation: ClassVar[bool] = False
    critics: ClassVar[tuple[str, ...]] = ("critic",)

    spec: DDPGSpec
    lr_actor: float
    lr_critic: float
    batch_size: int
    learn_step: int
    gamma: float
    tau: float
    policy_freq: int
    theta: float
    dt: float
    expl_noise: float
    mean_noise: float

    def build(self) -> None:
        space = _box_actions(self.action_space, type(self).__name__)
        self.action_dim = int(np.prod(space.shape))
        self._low = space.low.reshape(-1).astype(np.float32)
        self._high = space.high.reshape(-1).astype(np.float32)
        span = np.where(self._high > self._low, self._high - self._low, 1.0).astype(np.float32)
        self._env_low = torch.as_tensor(self._low, device=self.device)
        self._env_span = torch.as_tensor(span, device=self.device)
        self.add_network("actor", {"action": self.action_dim})  # first: parameter mutation's
        for name in self.critics:
            self.add_network(name, {"q": 1}, head_extra=self.action_dim)
        for name in ("actor", *self.critics):
            online = self.networks[name]
            target = self.add_network(f"{name}_target", online.head_sizes, online.head_extra)
            target.load_state_dict(online.state_dict())
            target.requires_grad_(False)
        self.add_optimizer("actor", ("actor",), "lr_actor")
        for name in self.critics:  # one optimizer per critic, all following lr_critic
            self.add_optimizer(name, (name,), "lr_critic")
        self.learn_counter = 0
        self.ou_noise = np.zeros((self.context.num_envs, self.action_dim))
        self.n_step_returns = False  # set by the trainer when the buffer holds n-step returns

    # -- acting ----------------------------------------------------------------------------------

    def act(self, obs: Any, *, explore: bool) -> np.ndarray:
        with torch.no_grad():
            unit = self.policy_actions("actor", self.obs_tensor(obs)).cpu().numpy()
        if explore:
            unit = np.clip(unit + self.exploration_noise(unit.shape[0]), -1.0, 1.0)
        return self.to_env(unit)

    def exploration_noise(self, num_envs: int) -> np.ndarray:
        """One step of exploration noise for ``num_envs`` environments, in [-1, 1] units."""
        shape = (num_envs, self.action_dim)
        if not self.spec.O_U_noise:
            return self.rng.normal(self.mean_noise, self.expl_noise, size=shape)
        if self.ou_noise.shape != shape:
            self.ou_noise = np.zeros(shape)
        drift = self.theta * (self.mean_noise - self.ou_noise) * self.dt
        diffusion = self.expl_noise * np.sqrt(self.dt) * self.rng.standard_normal(shape)
        self.ou_noise = self.ou_noise + drift + diffusion
        return self.ou_noise.copy()

    def reset_state(self, envs: np.ndarray | None = None) -> None:
        """Episodes start (in every environment, or where ``envs`` is true): their
        Ornstein-Uhlenbeck processes restart at zero."""
        if envs is None or len(envs) != self.ou_noise.shape[0]:
            self.ou_noise = np.zeros_like(self.ou_noise)
        else:
            self.ou_noise[np.asarray(envs, dtype=bool)] = 0.0

    def to_env(self, unit: np.ndarray) -> np.ndarray:
        """Actions in [-1, 1] as actions of the environment's Box, ``[N, *shape]``."""
        scaled = self._low + (unit + 1.0) * 0.5 * (self._high - self._low)
        scaled = np.clip(scaled, self._low, self._high)
        return scaled.reshape(-1, *self.action_space.shape).astype(self.action_space.dtype)

    def to_unit(self, actions: torch.Tensor) -> torch.Tensor:
        """Stored environment actions back in [-1, 1], ``[N, action_dim]``."""
        flat = actions.reshape(actions.shape[0], -1).to(torch.float32)
        return (flat - self._env_low) / self._env_span * 2.0 - 1.0

    # -- learning --------------------------------------------------------------------------------

    def learn(self, batch: Transitions) -> LearnResult:
        obs, next_obs = self.obs_tensor(batch.obs), self.obs_tensor(batch.next_obs)
        actions = self.to_unit(batch.actions)
        with torch.no_grad():
            next_actions = self.policy_actions("actor_target", next_obs)
            next_q = self.q_values("critic_target", next_obs, next_actions)
            td_target = batch.rewards + self.bootstrap(batch) * next_q
        q = self.q_values("critic", obs, actions)
        loss = (batch.weights * (q - td_target).pow(2)).mean()
        self.minimise(loss, ("critic",))
        self.learn_counter += 1
        if self.learn_counter % self.policy_freq == 0:
            self.update_actor("critic", obs)
            self.soft_update_targets()
        return LearnResult(float(loss.detach()), (q - td_target).detach().abs() + 1e-6)

    def policy_actions(self, network: str, obs: Any) -> torch.Tensor:
        """The deterministic policy of ``network`` (the actor or its target), in [-1, 1]."""
        return torch.tanh(self.networks[network](obs)["action"])

    def q_values(self, network: str, obs: Any, actions: torch.Tensor) -> torch.Tensor:
        """Q(s, a) of one critic, shape ``[N]``."""
        return self.networks[network](obs, actions)["q"].squeeze(-1)

    def bootstrap(self, batch: Transitions) -> torch.Tensor:
        """What multiplies the next state's value: the discount, zero where the episode ended."""
        discount = batch.discounts if self.n_step_returns else self.gamma
        return discount * (1.0 - batch.terminated)

    def update_actor(self, critic: str, obs: Any) -> None:
        """Move the actor up the gradient of ``critic``'s Q(s, mu(s))."""
        actor_loss = -self.q_values(critic, obs, self.policy_actions("actor", obs)).mean()
        self.minimise(actor_loss, ("actor",))

    def soft_update_targets(self) -> None:
        """target <- target + tau * (online - target), for the actor and every critic."""
        self.soft_update([(f"{name}_target", name) for name in ("actor", *self.critics)], self.tau)

    # -- the rest --------------------------------------------------------------------------------

    @property
    def per_beta(self) -> float:
        """Prioritised replay's importance exponent, annealed from 0.4 to 1 over training."""
        progress = self.record.steps / self.context.training.max_steps
        return min(1.0, 0.4 + 0.6 * progress)

    def extra_state(self) -> dict[str, Any]:
        return {"learn_counter": self.learn_counter, "ou_noise": self.ou_noise.copy()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.learn_counter = int(state["learn_counter"])
        self.ou_noise = np.array(state["ou_noise"], dtype=np.float64)


def _box_actions(space: spaces.Space, name: str) -> spaces.Box:
    """The action space, if it is a Box with finite bounds; otherwise a clear refusal."""
    if not isinstance(space, spaces.Box):
        raise NotImplementedError(
            f"{name} needs a Box (continuous) action space, but the environment's is "
            f"{type(space).__name__}; use DQN or PPO for discrete actions"
        )
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise NotImplementedError(
            f"{name} rescales actions into the Box bounds, which must be finite; wrap the "
            "environment in gymnasium.wrappers.RescaleAction"
        )
    return space
