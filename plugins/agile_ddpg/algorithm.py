"""Deep Deterministic Policy Gradient.

Lillicrap et al., "Continuous control with deep reinforcement learning", ICLR 2016.
"""

from __future__ import annotations

import torch

from agile_ddpg.spec import DDPGSpec
from agile_rl import (
    DeterministicActorCritic,
    DeterministicActorCriticGroup,
    Transitions,
    masked_mean,
)


class DDPGGroup(DeterministicActorCriticGroup["DDPG"]):
    """DDPG's update, for a group of members (a member alone is a group of one)."""

    def learn_batch(
        self, batch: Transitions, rows: torch.Tensor, active: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        obs, next_obs, actions = self.inputs(batch)
        with torch.no_grad():
            next_actions = self.policy_actions("actor_target", next_obs)
            next_q = self.q_values("critic_target", next_obs, next_actions)
            td_target = batch.rewards + self.bootstrap(batch) * next_q
        q = self.q_values("critic", obs, actions)
        losses = masked_mean(batch.weights * (q - td_target).pow(2), rows)
        self.group.minimise(losses, ("critic",), active)
        due = self.policy_delay(active)
        if due.any():
            self.update_actor("critic", obs, rows, due)
            self.soft_update_targets(due)
        return losses.detach(), (q - td_target).detach().abs() + 1e-6


class DDPG(DeterministicActorCritic):
    """A deterministic actor trained through a learned Q(s, a) critic (Lillicrap et al., 2016).

    Acting, action scaling (tanh into [-1, 1], then the Box bounds), Gaussian or
    Ornstein-Uhlenbeck exploration noise, target networks and checkpoint state come from
    :class:`agile_rl.DeterministicActorCritic`.

    **Updates.** The critic regresses onto ``r + discount * (1 - terminated) * Q'(s', mu'(s'))``
    from the target networks; every ``policy_freq``-th learn call the actor climbs Q(s, mu(s))
    and the targets move ``tau`` of the way to the online networks. With
    ``replay_buffer.n_step_buffer`` it bootstraps from n-step returns; with
    ``replay_buffer.per_buffer`` the critic loss is weighted by importance weights whose exponent
    anneals from 0.4 to 1, and the new priorities are the critic's absolute TD errors.

    **Shared encoders.** With ``share_encoders`` the critic has heads only and reads the actor's
    current encoder output without gradient (the target critic the target actor's), so only
    the actor's loss trains the encoder; such members train as groups of one.
    """

    spec: DDPGSpec
    group_learner = DDPGGroup
