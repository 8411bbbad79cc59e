""":class:`~agile_ppo.algorithm.PPO`'s acting and clipped-objective update (Schulman et al.,
2017) for a group of members at once: a batched population trains members of one network
layout as one computation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch.distributions import Categorical, Distribution, Independent, Normal

from agile_rl import (
    OnPolicyGroupLearner,
    PolicyRecord,
    Rollout,
    RolloutBatch,
    clipped_surrogate,
    gumbel_argmax,
    masked_mean,
    normal_draws,
    normalised_advantages,
    run_epochs,
    stack_batches,
    stacked_observations,
)

if TYPE_CHECKING:
    from agile_ppo.algorithm import PPO


class PPOGroup(OnPolicyGroupLearner):
    """PPO's acting, policy step and update, written once for a group of non-recurrent members
    (a member alone is a group of one); recurrent members run their own sequences through
    :meth:`objective`. Each member keeps its own hyperparameters, random streams and
    minibatch schedule: every member draws its epoch's permutation from its own generator,
    takes minibatches of its own ``batch_size`` (padded to the group's widest and masked),
    normalises advantages per minibatch, clips with its own ``clip_coef`` and
    ``max_grad_norm``, and stops early past its own ``target_kl``; members with fewer
    minibatches or epochs sit out the later ones."""

    members: list[PPO]  # type: ignore[assignment]

    # -- acting --------------------------------------------------------------------------------

    def _heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``[k, B, A]`` and values ``[k, B]`` on observations ``[k, B, ...]``."""
        if self.members[0].spec.share_encoders:
            out = self.group.net("actor_critic")(obs)
            return out["policy"], out["value"].squeeze(-1)
        logits = self.group.net("actor")(obs)["policy"]
        return logits, self.group.net("critic")(obs)["value"].squeeze(-1)

    def _logits(self, obs: torch.Tensor) -> torch.Tensor:
        name = "actor_critic" if self.members[0].spec.share_encoders else "actor"
        return self.group.net(name)(obs)["policy"]

    def _distribution(self, logits: torch.Tensor) -> Distribution:
        if not self.members[0].continuous:
            return Categorical(logits=logits)
        log_std = self.group.net("log_std").views["log_std"]  # [k, A]
        return Independent(Normal(logits, log_std.exp().unsqueeze(1).expand_as(logits)), 1)

    def _sample(self, distribution: Distribution) -> torch.Tensor:
        """One sample per row, each member's rows drawn from its own generator as
        :meth:`~agile_rl.Algorithm.sample` draws them."""
        generators = [member.generator for member in self.members]
        if isinstance(distribution, Categorical):
            logits = distribution.logits
            return torch.stack(
                [gumbel_argmax(x, g) for x, g in zip(logits, generators, strict=True)]
            )
        normal = cast(Normal, cast(Independent, distribution).base_dist)
        shape = normal.loc.shape[1:]
        noise = torch.stack([normal_draws(shape, g, normal.loc.device) for g in generators])
        return normal.loc + normal.scale * noise

    def _to_env(self, actions: torch.Tensor) -> np.ndarray:
        """Stacked actions ``[k, E, ...]`` as environment actions, in member order (every
        member has the same action space and squashing)."""
        return self.members[0]._to_env(actions.flatten(0, 1))

    def act(self, obs: Any, *, explore: bool) -> np.ndarray:
        first = self.members[0]
        with torch.no_grad():
            stacked = stacked_observations(first.obs_tensor(obs), self.group.size)
            logits = self._logits(stacked)
            if explore:
                actions = self._sample(self._distribution(logits))
            else:  # the most likely action
                actions = logits if first.continuous else logits.argmax(dim=-1)
        return self._to_env(actions)

    def policy_step(
        self, obs: torch.Tensor | dict[str, torch.Tensor]
    ) -> tuple[np.ndarray, PolicyRecord]:
        with torch.no_grad():
            logits, values = self._heads(stacked_observations(obs, self.group.size))
            distribution = self._distribution(logits)
            actions = self._sample(distribution)
            log_probs = distribution.log_prob(actions)
        return self._to_env(actions), PolicyRecord(actions, log_probs, values)

    # -- learning ------------------------------------------------------------------------------

    def learn_rollouts(
        self, rollouts: Sequence[Rollout | None], last_obs: torch.Tensor | dict[str, torch.Tensor]
    ) -> list[float | None]:
        if all(rollout is None for rollout in rollouts):
            return [None] * len(rollouts)
        batch, counts = self._finish(rollouts, last_obs)
        epochs = [
            0 if r is None else int(m.spec.update_epochs)
            for m, r in zip(self.members, rollouts, strict=True)
        ]
        totals, updates = run_epochs(self, batch, counts, epochs, self._update)
        means = (totals / updates.clamp(min=1.0)).tolist()
        return [loss if r is not None else None for loss, r in zip(means, rollouts, strict=True)]

    def _finish(
        self, rollouts: Sequence[Rollout | None], last_obs: torch.Tensor | dict[str, torch.Tensor]
    ) -> tuple[RolloutBatch, torch.Tensor]:
        """Each learning member's rollout with advantages (its own gamma and gae_lambda),
        stacked: ``[k, N, ...]`` and each member's length."""
        with torch.no_grad():
            _, last_values = self._heads(stacked_observations(last_obs, self.group.size))
        batches = [
            None if rollout is None
            else rollout.finish(values, member.spec.gamma, member.spec.gae_lambda)
            for member, rollout, values in zip(self.members, rollouts, last_values, strict=True)
        ]  # fmt: skip
        return stack_batches(batches)

    def _update(
        self, batch: RolloutBatch, rows: torch.Tensor, active: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One clipped-objective gradient step for the active members on their minibatches
        ``[k, S]`` (real where ``rows`` is 1); returns each member's loss and approximate KL
        ``[k]``."""
        logits, values = self._heads(cast(torch.Tensor, batch.obs))
        losses, approx_kl = self.objective(batch, logits, values, rows)
        max_grad_norm = self.group.hp("max_grad_norm")
        self.group.gradient_step("policy", losses, active, max_grad_norm=max_grad_norm)
        return losses.detach(), approx_kl

    def objective(
        self, batch: RolloutBatch, logits: torch.Tensor, values: torch.Tensor, rows: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each member's clipped-objective loss ``[k]`` on its minibatch ``[k, S]`` (real
        where ``rows`` is 1), given the current ``logits`` and ``values`` on its steps, and its
        approximate KL ``[k]`` (Schulman's k3 estimator): the policy's clipped surrogate, half
        the (optionally clipped) value error weighted by ``vf_coef``, less ``ent_coef`` times
        the entropy, advantages normalised per minibatch where ``normalize_advantages``."""
        hp = self.group.hp
        distribution = self._distribution(logits)
        log_ratio = distribution.log_prob(batch.actions) - batch.log_probs
        normalise = hp("normalize_advantages").unsqueeze(1) > 0
        advantages = torch.where(
            normalise, normalised_advantages(batch.advantages, rows), batch.advantages
        )
        clip = hp("clip_coef")
        policy_loss, approx_kl = clipped_surrogate(log_ratio, advantages, clip, rows)
        value_loss = (values - batch.returns).pow(2)
        old = batch.values
        clip_column = clip.unsqueeze(1)
        clipped = (old + (values - old).clamp(-clip_column, clip_column) - batch.returns).pow(2)
        clip_values = hp("clip_value_loss").unsqueeze(1) > 0
        value_loss = torch.where(clip_values, torch.max(value_loss, clipped), value_loss)
        entropy = masked_mean(distribution.entropy(), rows)
        losses = (
            policy_loss
            + hp("vf_coef") * 0.5 * masked_mean(value_loss, rows)
            - hp("ent_coef") * entropy
        )
        return losses, approx_kl
