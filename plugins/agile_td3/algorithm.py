"""Twin Delayed Deep Deterministic policy gradient.

Fujimoto, van Hoof and Meger, "Addressing Function Approximation Error in Actor-Critic
Methods", ICML 2018.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from agile_rl import (
    DeterministicActorCritic,
    DeterministicActorCriticGroup,
    Transitions,
    masked_mean,
)
from agile_td3.spec import TD3Spec


class TD3Group(DeterministicActorCriticGroup["TD3"]):
    """TD3's update, for a group of members (a member alone is a group of one)."""

    def learn_batch(
        self, batch: Transitions, rows: torch.Tensor, active: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        obs, next_obs, actions = self.inputs(batch)
        with torch.no_grad():
            next_actions = self.policy_actions("actor_target", next_obs)
            noise = self.smoothing_noise(next_actions.shape, rows)
            next_actions = (next_actions + noise).clamp(-1, 1)
            next_q = torch.minimum(
                self.q_values("critic_1_target", next_obs, next_actions),
                self.q_values("critic_2_target", next_obs, next_actions),
            )
            td_target = batch.rewards + self.bootstrap(batch) * next_q
        q_1 = self.q_values("critic_1", obs, actions)
        q_2 = self.q_values("critic_2", obs, actions)
        errors = (q_1 - td_target).pow(2) + (q_2 - td_target).pow(2)
        losses = masked_mean(batch.weights * errors, rows)
        self.group.minimise(losses, type(self.members[0]).critics, active)
        due = self.policy_delay(active)
        if due.any():
            self.update_actor("critic_1", obs, rows, due)
            self.soft_update_targets(due)
        return losses.detach(), (q_1 - td_target).detach().abs() + 1e-6

    def smoothing_noise(self, shape: torch.Size, rows: torch.Tensor) -> torch.Tensor:
        """Each member's target-policy smoothing noise for its own rows, drawn from its own
        generator by :meth:`TD3.smoothing_noise` (zeros elsewhere)."""
        noise = torch.zeros(shape, device=rows.device)
        for row, (member, count) in enumerate(zip(self.members, rows.sum(1).tolist(), strict=True)):
            if count:
                noise[row, : int(count)] = member.smoothing_noise(noise[row, : int(count)].shape)
        return noise


class TD3(DeterministicActorCritic):
    """DDPG with twin critics, delayed policy updates and target-policy smoothing
    (Fujimoto et al., 2018).

    Both critics regress onto ``r + discount * (1 - terminated) * min(Q1'(s', a'), Q2'(s', a'))``
    where ``a' = clip(mu'(s') + clip(N(0, policy_noise), -noise_clip, noise_clip), -1, 1)``; every
    ``policy_freq``-th learn call the actor climbs ``Q1(s, mu(s))`` and the targets follow. Each
    critic has its own optimizer, and both follow ``lr_critic``. Actions, exploration, n-step
    returns and prioritised replay work as in DDPG (:class:`agile_rl.DeterministicActorCritic`
    gives both their frame); the new priorities are critic 1's absolute TD errors. With
    ``share_encoders`` both critics read the actor's encoder, and both target critics the target
    actor's, as in DDPG.
    """

    critics: ClassVar[tuple[str, ...]] = ("critic_1", "critic_2")

    spec: TD3Spec
    group_learner = TD3Group

    def smoothing_noise(self, shape: torch.Size) -> torch.Tensor:
        """Target-policy smoothing noise: N(0, policy_noise), clipped to +-noise_clip."""
        noise = torch.randn(shape, generator=self.generator).to(self.device)
        clip = self.spec.noise_clip
        return (noise * self.spec.policy_noise).clamp(-clip, clip)
