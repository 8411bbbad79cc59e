""":class:`~agile_ppo.algorithm.PPO`'s acting and clipped-objective update (Schulman et al.,
2017) for a group of members at once: a batched population trains members of one network
layout as one computation."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
import torch
from torch.distributions import Categorical, Distribution, Independent, Normal

from agile_rl import (
    Minibatches,
    OnPolicyGroupLearner,
    PolicyRecord,
    RecurrentState,
    Rollout,
    RolloutBatch,
    SequenceBatch,
    clipped_surrogate,
    gumbel_argmax,
    masked_mean,
    normal_draws,
    normalised_advantages,
    row_minibatches,
    run_epochs,
    stack_batches,
    stacked_observations,
)

if TYPE_CHECKING:
    from agile_ppo.episodes import Episodes


class PPOMember(Protocol):
    """What the group reads of a member (a :class:`~agile_ppo.algorithm.PPO`): written here so
    that the algorithm's module imports this one and never the other way."""

    spec: Any
    continuous: bool
    recurrent: bool
    generator: torch.Generator
    hidden_state: RecurrentState | None

    @property
    def trunks(self) -> tuple[str, ...]: ...

    def obs_tensor(self, obs: Any) -> torch.Tensor | dict[str, torch.Tensor]: ...

    def to_env(self, actions: torch.Tensor) -> np.ndarray: ...

    def current_state(self, batch: int) -> RecurrentState: ...

    def minibatch_rows(
        self, batch: RolloutBatch | SequenceBatch | Episodes, size: int
    ) -> list[torch.Tensor]: ...

    def sequences(
        self, rollout: Rollout, last_values: torch.Tensor
    ) -> tuple[SequenceBatch | Episodes, int]: ...


class PPOGroup(OnPolicyGroupLearner[PPOMember]):
    """PPO's acting, policy step and update, written once for a group of non-recurrent members
    (a member alone is a group of one); recurrent members run their own sequences through
    :meth:`objective`. Each member keeps its own hyperparameters, random streams and
    minibatch schedule: every member draws its epoch's permutation from its own generator,
    takes minibatches of its own ``batch_size`` (padded to the group's widest and masked),
    normalises advantages per minibatch, clips with its own ``clip_coef`` and
    ``max_grad_norm``, and stops early past its own ``target_kl``; members with fewer
    minibatches or epochs sit out the later ones."""

    # -- acting --------------------------------------------------------------------------------

    def _pixels(self, obs: Any) -> torch.Tensor:
        """Rollout observations as the networks take them: images a rollout kept as bytes
        (:attr:`~agile_rl.runtime.agent.OnPolicyAlgorithm.stores_pixel_bytes`) preprocessed,
        anything else as it is."""
        if isinstance(obs, torch.Tensor) and obs.dtype == torch.uint8:
            return cast(torch.Tensor, self.members[0].obs_tensor(obs))
        return cast(torch.Tensor, obs)

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
        return self.members[0].to_env(actions.flatten(0, 1))

    def act(self, obs: Any, *, explore: bool) -> np.ndarray:
        first = self.members[0]
        with torch.no_grad():
            stacked = stacked_observations(first.obs_tensor(obs), self.group.size)
            step = self._recurrent_step(stacked)[0] if first.recurrent else None
            logits = self._logits(stacked) if step is None else step
            if explore:
                actions = self._sample(self._distribution(logits))
            else:  # the most likely action
                actions = logits if first.continuous else logits.argmax(dim=-1)
        return self._to_env(actions)

    def policy_step(
        self, obs: torch.Tensor | dict[str, torch.Tensor]
    ) -> tuple[np.ndarray, PolicyRecord]:
        """Actions and the stacked record; a recurrent group's record carries the state each
        member acted from, ``[k, num_layers, E, H]`` per part (padded to the widest)."""
        stacked = stacked_observations(obs, self.group.size)
        state: RecurrentState | None = None
        with torch.no_grad():
            if self.members[0].recurrent:
                logits, values, state = self._recurrent_step(cast(torch.Tensor, stacked))
            else:
                logits, values = self._heads(stacked)
            distribution = self._distribution(logits)
            actions = self._sample(distribution)
            log_probs = distribution.log_prob(actions)
        return self._to_env(actions), PolicyRecord(actions, log_probs, values, state)

    # -- recurrent members -----------------------------------------------------------------------

    def _recurrent_step(
        self, obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, RecurrentState]:
        """One step of every member's environments ``[k, E, ...]`` from its hidden state,
        which moves on: the logits, the values and the (stacked) state acted from."""
        state = self._states(obs.shape[1])
        logits, values, after = self._unroll(obs.unsqueeze(1), state)
        for row, member in enumerate(self.members):
            own = cast("RecurrentState", member.hidden_state)
            member.hidden_state = tuple(
                part[row][..., : mine.shape[-1]] for part, mine in zip(after, own, strict=True)
            )
        return logits[:, 0], values[:, 0], state

    def _states(self, batch: int) -> RecurrentState:
        """Every member's state to act from in ``batch`` environments, stacked and padded to
        the group's widest hidden state."""
        return _stack_padded([member.current_state(batch) for member in self.members])

    def _unroll(
        self, obs: torch.Tensor, state: RecurrentState, starts: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, RecurrentState]:
        """Logits ``[k, T, B, ...]``, values ``[k, T, B]`` and the final state along
        sequences ``[k, T, B, ...]`` (each trunk network reads its part of the state)."""
        trunks = self.members[0].trunks
        outputs: dict[str, torch.Tensor] = {}
        final: list[torch.Tensor] = []
        width = len(state) // len(trunks)
        for index, name in enumerate(trunks):
            part = state[index * width : (index + 1) * width]
            out, after = self.group.net(name).unroll(obs, part, starts)
            outputs.update(out)
            final += after
        return outputs["policy"], outputs["value"].squeeze(-1), tuple(final)

    def _learn_sequences(
        self, rollouts: Sequence[Rollout | None], last_obs: torch.Tensor | dict[str, torch.Tensor]
    ) -> list[float | None]:
        """Recurrent members learn on sequences (each member's own, cut as it cuts them),
        re-run from the states stored at their starts."""
        last_values = self.bootstrap_values(last_obs)
        finished = [
            None if rollout is None else member.sequences(rollout, values)
            for member, rollout, values in zip(self.members, rollouts, last_values, strict=True)
        ]  # fmt: skip
        epochs = [
            0 if f is None else int(m.spec.update_epochs)
            for m, f in zip(self.members, finished, strict=True)
        ]
        cut = self._sequence_minibatches(finished)
        totals, updates = run_epochs(self, epochs, cut, self._sequence_update)
        means = (totals / updates.clamp(min=1.0)).tolist()
        return [loss if r is not None else None for loss, r in zip(means, rollouts, strict=True)]

    def _sequence_minibatches(self, finished: Sequence[tuple[Any, int] | None]) -> Minibatches:
        """Each epoch, every member still in it draws its order of sequences and cuts its
        minibatches (:meth:`~agile_ppo.algorithm.PPO.minibatch_rows`); the ``j``-th
        minibatches of the members are one group minibatch, a member without one (or whose
        holds no valid step) inactive in it."""
        device = self.group.device

        def cut(epoch: int, epochs: list[int]) -> Iterator[tuple[Any, torch.Tensor]]:
            plans = [
                member.minibatch_rows(*own) if own is not None and epoch < count else []
                for member, own, count in zip(self.members, finished, epochs, strict=True)
            ]
            for index in range(max(len(plan) for plan in plans)):
                chosen = [
                    own[0].select(plan[index]) if index < len(plan) and own is not None else None
                    for own, plan in zip(finished, plans, strict=True)
                ]
                has = [one is not None and bool(one.valid.any()) for one in chosen]
                if any(has):
                    kept = [one if on else None for one, on in zip(chosen, has, strict=True)]
                    yield kept, torch.tensor(has, device=device)

        return cut

    def bootstrap_values(self, last_obs: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        """Recurrent members' values ``[k, E]`` of the observations after their rollouts'
        last step, from their current states."""
        stacked = cast(torch.Tensor, stacked_observations(last_obs, self.group.size))
        with torch.no_grad():
            _, values, _ = self._unroll(stacked.unsqueeze(1), self._states(stacked.shape[1]))
        return values[:, 0]

    def rerun(
        self, chosen: Sequence[SequenceBatch | None]
    ) -> tuple[RolloutBatch, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Members' minibatches of sequences re-run from their stored states: their steps,
        the current logits and values on them, and the float mask of valid steps, flattened
        over time and sequences (``[k, L * S, ...]``; padding is invalid)."""
        batch, rows, state, starts = _stack_sequences(chosen)
        logits, values, _ = self._unroll(self._pixels(batch.obs), state, starts)
        flat = RolloutBatch(*(cast(torch.Tensor, field).flatten(1, 2) for field in batch))
        return flat, logits.flatten(1, 2), values.flatten(1, 2), rows.flatten(1, 2)

    def _sequence_update(
        self, chosen: list[SequenceBatch | None], active: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One clipped-objective gradient step on each active member's minibatch of sequences,
        re-run from their stored states: the loss and approximate KL ``[k]``."""
        losses, approx_kl = self.objective(*self.rerun(chosen))
        max_grad_norm = self.group.hp("max_grad_norm")
        self.group.gradient_step("policy", losses, active, max_grad_norm=max_grad_norm)
        return losses.detach(), approx_kl

    # -- learning ------------------------------------------------------------------------------

    def learn_rollouts(
        self, rollouts: Sequence[Rollout | None], last_obs: torch.Tensor | dict[str, torch.Tensor]
    ) -> list[float | None]:
        if all(rollout is None for rollout in rollouts):
            return [None] * len(rollouts)
        if self.members[0].recurrent:
            return self._learn_sequences(rollouts, last_obs)
        batch, counts = self._finish(rollouts, last_obs)
        epochs = [
            0 if r is None else int(m.spec.update_epochs)
            for m, r in zip(self.members, rollouts, strict=True)
        ]
        totals, updates = run_epochs(
            self, epochs, row_minibatches(self, batch, counts), self._update
        )
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
        self, minibatch: tuple[RolloutBatch, torch.Tensor], active: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One clipped-objective gradient step for the active members on their minibatches
        ``[k, S]`` (real where ``rows`` is 1); returns each member's loss and approximate KL
        ``[k]``."""
        batch, rows = minibatch
        logits, values = self._heads(self._pixels(batch.obs))
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


def _stack_padded(states: Sequence[RecurrentState]) -> RecurrentState:
    """Members' hidden states (parts ``[num_layers, B, H_i]``) stacked, each part padded with
    zeros to the widest ``H``: ``[k, num_layers, B, H]``."""
    return tuple(
        _stacked_with_zeros([state[index] for state in states]) for index in range(len(states[0]))
    )


def _stacked_with_zeros(parts: Sequence[Any]) -> torch.Tensor:
    """Tensors of one rank stacked along a new first dimension, each padded with zeros at the
    end of every dimension to the largest (None: all zeros)."""
    present = [part for part in parts if part is not None]
    if len(present) == len(parts) and len({part.shape for part in present}) == 1:
        return torch.stack(present)
    shape = [max(part.shape[d] for part in present) for d in range(present[0].dim())]
    stacked = present[0].new_zeros((len(parts), *shape))
    for row, part in enumerate(parts):
        if part is not None:
            index: tuple[Any, ...] = (row, *(slice(0, size) for size in part.shape))
            stacked[index] = part
    return stacked


def _stack_sequences(
    chosen: Sequence[SequenceBatch | None],
) -> tuple[RolloutBatch, torch.Tensor, RecurrentState, torch.Tensor]:
    """Members' minibatches of sequences (``[L_i, S_i, ...]``, None for a member without one)
    as one: the steps ``[k, L, S, ...]`` (obs, actions, log_probs, values, advantages,
    returns), the ``[k, L, S]`` float mask of valid steps, the stored states ``[k,
    num_layers, S, H]`` and the episode starts ``[k, L, S]``; padding is invalid zeros."""
    fields = [
        _stacked_with_zeros([None if one is None else one[index] for one in chosen])
        for index in range(6)
    ]
    valid = _stacked_with_zeros([None if one is None else one.valid for one in chosen])
    starts = _stacked_with_zeros([None if one is None else one.starts for one in chosen])
    template = next(one for one in chosen if one is not None)
    state = tuple(
        _stacked_with_zeros([None if one is None else one.initial_state[index] for one in chosen])
        for index in range(len(template.initial_state))
    )
    return RolloutBatch(*fields), valid.float(), state, starts.bool()
