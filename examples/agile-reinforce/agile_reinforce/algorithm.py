"""REINFORCE with a learned baseline.

Williams, "Simple statistical gradient-following algorithms for connectionist reinforcement
learning", Machine Learning 1992; the baseline as in Sutton & Barto, "Reinforcement Learning:
An Introduction", 2nd ed., section 13.4.

The update is written once, in :class:`REINFORCEGroup`, over tensors whose first dimension is
the member axis: a population trains members of one network layout as one computation, and a
member alone runs the same code as a group of one. :class:`REINFORCE`, the member, only builds
its networks and names the group learner.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.distributions import Categorical

from agile_reinforce.spec import REINFORCESpec
from agile_rl import (
    OnPolicyAlgorithm,
    OnPolicyGroupLearner,
    PolicyRecord,
    Rollout,
    gumbel_argmax,
    masked_mean,
    normalised_advantages,
    stack_batches,
    stacked_observations,
)

Observation = torch.Tensor | dict[str, torch.Tensor]


class REINFORCEGroup(OnPolicyGroupLearner["REINFORCE"]):
    """REINFORCE's acting, policy step and update for ``k`` members at once (a member alone
    is a group of one). Every tensor has the members along its first dimension (``[k, B,
    ...]``) and every coefficient is a ``[k]`` tensor (``self.group.hp``), so each member
    keeps its own coefficients, learning rate and ``gamma`` (its rollout's returns use it),
    and draws its actions from its own generator."""

    def _heads(self, obs: Observation) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``[k, B, A]`` and baseline values ``[k, B]`` on observations ``[k, B, ...]``."""
        out = self.group.net("policy")(obs)
        return out["logits"], out["baseline"].squeeze(-1)

    def _sample(self, distribution: Categorical) -> torch.Tensor:
        """One action per row ``[k, B]``, each member's rows from its own generator."""
        return torch.stack(
            [
                gumbel_argmax(logits, member.generator)
                for logits, member in zip(distribution.logits, self.members, strict=True)
            ]
        )

    def act(self, obs: Any, *, explore: bool) -> np.ndarray:
        stacked = stacked_observations(self.members[0].obs_tensor(obs), self.group.size)
        with torch.no_grad():
            logits, _ = self._heads(stacked)
            actions = self._sample(Categorical(logits=logits)) if explore else logits.argmax(-1)
        return actions.flatten().cpu().numpy()

    def policy_step(self, obs: Observation) -> tuple[np.ndarray, PolicyRecord]:
        with torch.no_grad():
            logits, baselines = self._heads(stacked_observations(obs, self.group.size))
            distribution = Categorical(logits=logits)
            actions = self._sample(distribution)
        record = PolicyRecord(actions, distribution.log_prob(actions), baselines)
        return actions.flatten().cpu().numpy(), record

    def learn_rollouts(
        self, rollouts: Sequence[Rollout | None], last_obs: Observation
    ) -> list[float | None]:
        """One gradient step per learning member on its whole rollout. Each member's rollout
        is padded to the longest (``stack_batches``) and ``rows`` masks the padding out of
        every mean; members without a rollout sit this step out."""
        if all(rollout is None for rollout in rollouts):
            return [None] * len(rollouts)
        hp = self.group.hp
        with torch.no_grad():
            _, last_values = self._heads(stacked_observations(last_obs, self.group.size))
        # With lambda = 1, GAE is exactly "return-to-go minus baseline".
        finished = [
            None if rollout is None else rollout.finish(values, member.spec.gamma, 1.0)
            for member, rollout, values in zip(self.members, rollouts, last_values, strict=True)
        ]
        batch, counts = stack_batches(finished)
        steps = torch.arange(batch.log_probs.shape[1], device=counts.device)
        rows = (steps < counts.unsqueeze(1)).float()  # [k, N]: 1 on real steps
        logits, baselines = self._heads(batch.obs)
        distribution = Categorical(logits=logits)
        normalise = hp("normalize_advantages").unsqueeze(1) > 0
        advantages = torch.where(
            normalise, normalised_advantages(batch.advantages, rows), batch.advantages
        )
        policy_loss = -masked_mean(distribution.log_prob(batch.actions) * advantages, rows)
        baseline_loss = masked_mean((baselines - batch.returns).pow(2), rows)
        entropy = masked_mean(distribution.entropy(), rows)
        losses = policy_loss + hp("vf_coef") * baseline_loss - hp("ent_coef") * entropy
        max_grad_norm = hp("max_grad_norm")
        self.group.gradient_step("policy", losses, counts > 0, max_grad_norm=max_grad_norm)
        return [
            None if rollout is None else loss
            for rollout, loss in zip(rollouts, losses.tolist(), strict=True)
        ]


class REINFORCE(OnPolicyAlgorithm):
    """Monte Carlo policy gradient for Discrete actions, one update per rollout.

    Each update raises the log-probability of the actions taken in proportion to how much
    better their discounted return-to-go was than the baseline's estimate. Returns that a
    rollout cuts off are completed with the baseline's value of the next observation.

    The member builds its networks; acting and learning are :class:`REINFORCEGroup`'s, written
    once over the member axis. A member alone runs them as a group of one (the inherited
    ``act``, ``policy_step`` and ``learn`` do that), and a population runs them on its members
    stacked.
    """

    spec: REINFORCESpec
    group_learner = REINFORCEGroup

    def build(self) -> None:
        if not hasattr(self.action_space, "n"):
            raise NotImplementedError("REINFORCE here handles Discrete action spaces only")
        actions = int(self.action_space.n)
        self.add_network("policy", {"logits": actions, "baseline": 1})
        self.add_optimizer("policy", ("policy",), "lr")
