"""REINFORCE with a learned baseline.

Williams, "Simple statistical gradient-following algorithms for connectionist reinforcement
learning", Machine Learning 1992; the baseline as in Sutton & Barto, "Reinforcement Learning:
An Introduction", 2nd ed., section 13.4.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.distributions import Categorical

from agile_reinforce.spec import REINFORCESpec
from agile_rl import LearnResult, OnPolicyAlgorithm, Rollout


class REINFORCE(OnPolicyAlgorithm):
    """Monte Carlo policy gradient for Discrete actions, one update per rollout.

    Each update raises the log-probability of the actions taken in proportion to how much
    better their discounted return-to-go was than the baseline's estimate. Returns that a
    rollout cuts off are completed with the baseline's value of the next observation.
    """

    spec: REINFORCESpec

    def build(self) -> None:
        if not hasattr(self.action_space, "n"):
            raise NotImplementedError("REINFORCE here handles Discrete action spaces only")
        actions = int(self.action_space.n)  # type: ignore[attr-defined]
        self.add_network("policy", {"logits": actions, "baseline": 1})
        self.add_optimizer("policy", ("policy",), "lr")

    def _forward(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.networks["policy"](obs)
        return out["logits"], out["baseline"].squeeze(-1)

    def act(self, obs: Any, *, explore: bool) -> np.ndarray:
        with torch.no_grad():
            logits, _ = self._forward(self.obs_tensor(obs))
            actions = self.sample(Categorical(logits=logits)) if explore else logits.argmax(-1)
        return actions.cpu().numpy()

    def policy_step(
        self, obs: torch.Tensor | dict[str, torch.Tensor]
    ) -> tuple[np.ndarray, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        with torch.no_grad():
            logits, baseline = self._forward(obs)
            distribution = Categorical(logits=logits)
            actions = self.sample(distribution)  # from the member's generator
        return actions.cpu().numpy(), (actions, distribution.log_prob(actions), baseline)

    def learn(
        self, rollout: Rollout, last_obs: torch.Tensor | dict[str, torch.Tensor]
    ) -> LearnResult:
        with torch.no_grad():
            _, last_value = self._forward(last_obs)
        # With lambda = 1, GAE is exactly "return-to-go minus baseline".
        batch = rollout.finish(last_value, self.spec.gamma, 1.0)
        logits, baseline = self._forward(batch.obs)
        distribution = Categorical(logits=logits)
        advantages = batch.advantages
        if self.spec.normalize_advantages and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        policy_loss = -(distribution.log_prob(batch.actions) * advantages).mean()
        baseline_loss = (baseline - batch.returns).pow(2).mean()
        loss = (
            policy_loss
            + self.spec.vf_coef * baseline_loss
            - self.spec.ent_coef * distribution.entropy().mean()
        )
        self.gradient_step("policy", loss, max_grad_norm=self.spec.max_grad_norm)
        return LearnResult(loss=float(loss.detach()))
