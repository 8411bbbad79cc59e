"""Proximal Policy Optimization.

Schulman et al., "Proximal Policy Optimization Algorithms", 2017, with generalised advantage
estimation (Schulman et al., "High-Dimensional Continuous Control Using Generalized Advantage
Estimation", ICLR 2016).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch.distributions import Categorical, Distribution, Independent, Normal

from agile_cli.agent import OnPolicyAlgorithm
from agile_cli.rollout import Rollout, RolloutBatch
from agile_ppo.spec import PPOSpec


class LogStd(torch.nn.Module):
    """The state-independent log standard deviation of a Gaussian policy."""

    def __init__(self, size: int, value: float) -> None:
        super().__init__()
        self.log_std = torch.nn.Parameter(torch.full((size,), float(value)))

    def rebuilt(self, arch: Any, generator: torch.Generator | None = None) -> LogStd:
        """Architecture changes leave it as it is."""
        twin = LogStd(self.log_std.numel(), 0.0).to(self.log_std.device)
        twin.load_state_dict(self.state_dict())
        return twin


class PPO(OnPolicyAlgorithm):
    """Clipped-objective actor-critic for Discrete and Box action spaces."""

    spec: PPOSpec
    supports_activation_mutation = False
    lr: float
    batch_size: int
    learn_step: int
    gamma: float
    gae_lambda: float
    clip_coef: float
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    update_epochs: int
    action_std_init: float

    def build(self) -> None:
        if self.spec.recurrent:
            raise NotImplementedError("recurrent PPO arrives with the LSTM encoder")
        self.continuous = isinstance(self.action_space, gym.spaces.Box)
        if self.continuous:
            outputs = int(np.prod(self.action_space.shape))
        elif isinstance(self.action_space, gym.spaces.Discrete):
            outputs = int(self.action_space.n)
        else:
            raise NotImplementedError(f"PPO does not handle {type(self.action_space).__name__}")
        if self.spec.share_encoders:
            self.add_network("actor_critic", {"policy": outputs, "value": 1})
            trained = ("actor_critic",)
        else:
            self.add_network("actor", {"policy": outputs})
            self.add_network("critic", {"value": 1})
            trained = ("actor", "critic")
        if self.continuous:
            self.networks["log_std"] = LogStd(outputs, self.action_std_init)  # type: ignore[assignment]
            trained = (*trained, "log_std")
        self.add_optimizer("policy", trained, "lr")

    # -- acting ----------------------------------------------------------------------------------

    def _heads(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if self.spec.share_encoders:
            out = self.networks["actor_critic"](obs)
            return out["policy"], out["value"].squeeze(-1)
        return self.networks["actor"](obs)["policy"], self.networks["critic"](obs)["value"].squeeze(
            -1
        )

    def _distribution(self, logits: torch.Tensor) -> Distribution:
        if not self.continuous:
            return Categorical(logits=logits)
        std = self.networks["log_std"].log_std.exp().expand_as(logits)  # type: ignore[union-attr]
        return Independent(Normal(logits, std), 1)

    def _to_env(self, actions: torch.Tensor) -> np.ndarray:
        array = actions.cpu().numpy()
        if not self.continuous:
            return array
        space = self.action_space
        if getattr(self.context.network, "squash_output", False):
            array = np.tanh(array)
            return space.low + (array + 1.0) * 0.5 * (space.high - space.low)  # type: ignore[attr-defined]
        return np.clip(array, space.low, space.high)  # type: ignore[attr-defined]

    def act(self, obs: Any, *, explore: bool) -> np.ndarray:
        with torch.no_grad():
            logits, _ = self._heads(self.obs_tensor(obs))
            if explore:
                actions = self._distribution(logits).sample()
            else:  # the most likely action
                actions = logits if self.continuous else logits.argmax(dim=-1)
        return self._to_env(actions)

    def policy_step(
        self, obs: torch.Tensor | dict[str, torch.Tensor]
    ) -> tuple[np.ndarray, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        with torch.no_grad():
            logits, values = self._heads(obs)
            distribution = self._distribution(logits)
            actions = distribution.sample()
            log_probs = distribution.log_prob(actions)
        return self._to_env(actions), (actions, log_probs, values)

    # -- learning --------------------------------------------------------------------------------

    def learn(self, rollout: Rollout, last_obs: torch.Tensor | dict[str, torch.Tensor]) -> float:
        with torch.no_grad():
            _, last_values = self._heads(last_obs)
        batch = rollout.finish(last_values, self.gamma, self.gae_lambda)
        losses = []
        for _ in range(int(self.update_epochs)):
            order = torch.randperm(len(batch), generator=self.generator).to(self.device)
            for start in range(0, len(batch), int(self.batch_size)):
                loss, approx_kl = self._update(batch, order[start : start + int(self.batch_size)])
                losses.append(loss)
            if self.spec.target_kl is not None and approx_kl > self.spec.target_kl:
                break
        return float(np.mean(losses)) if losses else 0.0

    def _update(self, batch: RolloutBatch, rows: torch.Tensor) -> tuple[float, float]:
        """One clipped-objective gradient step on the minibatch ``rows``."""
        obs = _rows(batch.obs, rows)
        logits, values = self._heads(obs)
        distribution = self._distribution(logits)
        log_probs = distribution.log_prob(batch.actions[rows])
        log_ratio = log_probs - batch.log_probs[rows]
        ratio = log_ratio.exp()
        advantages = batch.advantages[rows]
        if self.spec.normalize_advantages and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        clip = float(self.clip_coef)
        policy_loss = -torch.min(
            ratio * advantages, ratio.clamp(1.0 - clip, 1.0 + clip) * advantages
        ).mean()
        returns = batch.returns[rows]
        value_loss = (values - returns).pow(2)
        if self.spec.clip_value_loss:  # keep the value update near the old estimate
            old = batch.values[rows]
            clipped = old + (values - old).clamp(-clip, clip)
            value_loss = torch.max(value_loss, (clipped - returns).pow(2))
        entropy = distribution.entropy().mean()
        loss = policy_loss + self.vf_coef * 0.5 * value_loss.mean() - self.ent_coef * entropy
        optimizer = self.optimizers["policy"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.parameters(), self.max_grad_norm)
        optimizer.step()
        with torch.no_grad():
            approx_kl = float(((ratio - 1.0) - log_ratio).mean())  # Schulman's k3 estimator
        return float(loss.detach()), approx_kl


def _rows(obs: torch.Tensor | dict[str, torch.Tensor], rows: torch.Tensor) -> Any:
    if isinstance(obs, dict):
        return {key: value[rows] for key, value in obs.items()}
    return obs[rows]
