"""Soft Actor-Critic.

Haarnoja, Zhou, Abbeel and Levine, "Soft Actor-Critic: Off-Policy Maximum Entropy Deep
Reinforcement Learning with a Stochastic Actor", ICML 2018; the learned temperature of
Haarnoja et al., "Soft Actor-Critic Algorithms and Applications", 2018; for Discrete actions,
Christodoulou, "Soft Actor-Critic for Discrete Action Settings", 2019.

The update is written once, for a group of members (:class:`SACGroup`): a batched population
runs it on members stacked, and a member alone on itself as a group of one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces

from agile_rl import (
    BoxActionScaler,
    CriticGroup,
    GreedyPolicy,
    LogStd,
    NetworkHead,
    OffPolicyAlgorithm,
    Transitions,
    box_action_space,
    greedy_action,
    gumbel_argmax,
    masked_mean,
    normal_draws,
    stacked_observations,
)
from agile_sac.spec import SACSpec

#: The policy's log standard deviation is squashed into this range (a smooth clamp).
LOG_STD_RANGE = (-5.0, 2.0)
#: For Discrete actions, the default target entropy is this share of the uniform policy's.
DISCRETE_ENTROPY_SHARE = 0.89
_LOG_2PI = math.log(2.0 * math.pi)


class SACGroup(CriticGroup["SAC"]):
    """SAC's acting and update, for a group of members (a member alone is a group of one).
    Every member draws its policy's noise from its own generator, for its own rows only, so a
    member computes the same in any group. Shapes have the member axis first: ``[k, B, ...]``.
    """

    # -- acting --------------------------------------------------------------------------------

    def act(self, obs: Any, *, explore: bool) -> np.ndarray:
        first = self.members[0]
        with torch.no_grad():
            stacked = stacked_observations(first.obs_tensor(obs), self.group.size)
            out = self.group.net("actor")(stacked)
            counts = [out[next(iter(out))].shape[1]] * self.group.size
            if first.discrete:
                logits = out["logits"]
                chosen = self._categorical(logits, counts) if explore else logits.argmax(dim=-1)
                return chosen.reshape(-1).cpu().numpy()
            unit = self._squashed(out, counts)[0] if explore else torch.tanh(out["mean"])
        return first.to_env(unit.reshape(-1, unit.shape[-1]).cpu().numpy())

    # -- the update ----------------------------------------------------------------------------

    def learn_batch(
        self, batch: Transitions, rows: torch.Tensor, active: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        counts = [int(count) for count in rows.sum(1).tolist()]
        obs, next_obs = self.observations(batch.obs), self.observations(batch.next_obs)
        alpha = self.log_alpha().detach().exp().unsqueeze(1)  # [k, 1]
        with torch.no_grad():
            next_value = self._soft_value(next_obs, counts, alpha)
            td_target = batch.rewards + self.bootstrap(batch) * next_value
        q_1, q_2 = self._taken(obs, batch.actions)
        errors = (q_1 - td_target).pow(2) + (q_2 - td_target).pow(2)
        losses = masked_mean(batch.weights * errors, rows)
        self.group.minimise(losses, ("critics",), active)
        due = self.policy_delay(active)
        if due.any():
            self._update_policy(obs, rows, counts, alpha, due)
        pairs = [(f"{name}_target", name) for name in SAC.critics]
        self.group.soft_update(pairs, self.group.hp("tau"), active)
        return losses.detach(), (q_1 - td_target).detach().abs() + 1e-6

    def log_alpha(self) -> torch.Tensor:
        """Each member's log temperature, ``[k]``."""
        return self.group.net("log_alpha").views["log_std"][:, 0]

    def _soft_value(self, obs: Any, counts: Sequence[int], alpha: torch.Tensor) -> torch.Tensor:
        """``E_a~pi [min_i Q_i'(s, a) - alpha log pi(a|s)]`` from the target critics, ``[k, B]``
        (sampled for Box actions, exact for Discrete ones)."""
        if self.members[0].discrete:
            probs, log_probs = self._categorical_policy(obs)
            q = torch.minimum(*(self._q_table(f"{n}_target", obs) for n in SAC.critics))
            return (probs * (q - alpha.unsqueeze(2) * log_probs)).sum(-1)
        actions, log_probs = self._squashed(self.group.net("actor")(obs), counts)
        q = torch.minimum(*(self.q_values(f"{n}_target", obs, actions) for n in SAC.critics))
        return q - alpha * log_probs

    def _taken(self, obs: Any, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both critics' values of the stored actions, ``[k, B]`` each."""
        if self.members[0].discrete:
            index = actions.long().reshape(*actions.shape[:2], 1)
            q_1, q_2 = (
                self._q_table(name, obs).gather(2, index).squeeze(2) for name in SAC.critics
            )
            return q_1, q_2
        unit = self.to_unit(actions)
        q_1, q_2 = (self.q_values(name, obs, unit) for name in SAC.critics)
        return q_1, q_2

    def _update_policy(
        self,
        obs: Any,
        rows: torch.Tensor,
        counts: Sequence[int],
        alpha: torch.Tensor,
        due: torch.Tensor,
    ) -> None:
        """The actor's step (down ``alpha log pi - min_i Q_i``), then the temperature's, for
        the members whose policy delay is up (``due``); only they draw noise."""
        first = self.members[0]
        counts = [count if on else 0 for count, on in zip(counts, due.tolist(), strict=True)]
        if first.discrete:
            probs, log_probs = self._categorical_policy(obs)
            q = torch.minimum(*(self._q_table(name, obs) for name in SAC.critics))
            actor_losses = (probs * (alpha.unsqueeze(2) * log_probs - q)).sum(-1)
            entropy_terms = (probs * log_probs).sum(-1).detach()
        else:
            actions, log_probs = self._squashed(self.group.net("actor")(obs), counts)
            q = torch.minimum(*(self.q_values(name, obs, actions) for name in SAC.critics))
            actor_losses = alpha * log_probs - q
            entropy_terms = log_probs.detach()
        self.group.minimise(masked_mean(actor_losses, rows), ("actor",), due)
        if first.spec.auto_alpha:
            gap = masked_mean(entropy_terms + first.target_entropy, rows)
            self.group.minimise(-self.log_alpha() * gap, ("alpha",), due)

    # -- policies ------------------------------------------------------------------------------

    def _squashed(
        self, out: dict[str, torch.Tensor], counts: Sequence[int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions ``tanh(mean + std * noise)`` in [-1, 1] and their log-probabilities
        ``[k, B]`` (the Gaussian's, corrected for the tanh)."""
        mean = out["mean"]
        low, high = LOG_STD_RANGE
        log_std = low + 0.5 * (high - low) * (torch.tanh(out["log_std"]) + 1.0)
        noise = self._noise(mean.shape, counts)
        pre_tanh = mean + log_std.exp() * noise
        gaussian = -0.5 * noise.pow(2) - log_std - 0.5 * _LOG_2PI
        # log(1 - tanh(u)^2), computed stably as 2 * (log 2 - u - softplus(-2u))
        jacobian = 2.0 * (math.log(2.0) - pre_tanh - F.softplus(-2.0 * pre_tanh))
        return torch.tanh(pre_tanh), (gaussian - jacobian).sum(-1)

    def _noise(self, shape: torch.Size, counts: Sequence[int]) -> torch.Tensor:
        """Standard normal noise for each member's first ``count`` rows, from its generator
        (zeros in the rows that pad its batch)."""
        noise = torch.zeros(shape, device=self.group.device)
        for row, (member, count) in enumerate(zip(self.members, counts, strict=True)):
            if count:
                noise[row, :count] = normal_draws((count, *shape[2:]), member.generator,
                                                  self.group.device)  # fmt: skip
        return noise

    def _categorical(self, logits: torch.Tensor, counts: Sequence[int]) -> torch.Tensor:
        """One action per row drawn from ``softmax(logits)`` with each member's generator."""
        chosen = torch.zeros(logits.shape[:2], dtype=torch.long, device=logits.device)
        for row, (member, count) in enumerate(zip(self.members, counts, strict=True)):
            chosen[row, :count] = gumbel_argmax(logits[row, :count], member.generator)
        return chosen

    def _categorical_policy(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The Discrete policy's probabilities and log-probabilities, ``[k, B, actions]``."""
        log_probs = self.group.net("actor")(obs)["logits"].log_softmax(dim=-1)
        return log_probs.exp(), log_probs

    def _q_table(self, network: str, obs: Any) -> torch.Tensor:
        """A Discrete critic's value of every action, ``[k, B, actions]``."""
        return self.group.net(network)(obs)["q"]


class SAC(OffPolicyAlgorithm):
    """A stochastic actor trained to maximise return plus ``alpha`` times its entropy, with
    twin critics and target critics (Haarnoja et al., 2018).

    **Box actions.** The actor outputs a Gaussian's mean and log standard deviation (squashed
    into [-5, 2]); actions are ``tanh`` of a sample, in [-1, 1], rescaled linearly into the
    action space's bounds (greedy actions: ``tanh`` of the mean). Both critics read ``(s, a)``
    in [-1, 1] units. **Discrete actions.** The actor outputs logits, each critic the value of
    every action, and expectations over the policy are computed exactly.

    **Updates.** Both critics regress onto ``r + discount * (1 - terminated) * (min_i Q_i'(s',
    a') - alpha log pi(a'|s'))`` with ``a' ~ pi(s')``; every ``policy_freq``-th learn call the
    actor descends ``alpha log pi(a|s) - min_i Q_i(s, a)`` and, with ``auto_alpha``, the log
    temperature descends ``-log(alpha) * (log pi(a|s) + target_entropy)``; the target critics
    follow by ``tau`` at every call. n-step returns and prioritised replay (priorities: critic
    1's absolute TD errors) work as in TD3. The log temperature is a one-value network,
    ``log_alpha``, saved, cloned and mutated with the member.
    """

    critics: ClassVar[tuple[str, ...]] = ("critic_1", "critic_2")

    spec: SACSpec
    policy_network = "actor"
    group_learner = SACGroup

    def build(self) -> None:
        self.discrete = isinstance(self.action_space, spaces.Discrete)
        if isinstance(self.action_space, spaces.Discrete):
            actions = int(self.action_space.n)
            actor_heads, critic_heads, extra = {"logits": actions}, {"q": actions}, 0
            default_target = DISCRETE_ENTROPY_SHARE * math.log(actions)
        else:
            box = box_action_space(self.action_space, "SAC")
            self.scaler = BoxActionScaler(box, self.device)
            actions = int(np.prod(box.shape))
            actor_heads, critic_heads, extra = (
                {"mean": actions, "log_std": actions},
                {"q": 1},
                actions,
            )
            default_target = -float(actions)
        self.add_network("actor", actor_heads)
        for name in self.critics:
            self.add_network(name, critic_heads, head_extra=extra)
        for name in self.critics:
            target = self.add_network(f"{name}_target", critic_heads, head_extra=extra)
            target.load_state_dict(self.networks[name].state_dict())
            target.requires_grad_(False)
        log_alpha = LogStd(1, math.log(self.spec.alpha)).to(self.device)
        self.networks["log_alpha"] = log_alpha  # type: ignore[assignment]  # a plain nn.Module
        self.add_optimizer("actor", ("actor",), "lr_actor")
        self.add_optimizer("critics", self.critics, "lr_critic")
        if self.spec.auto_alpha:
            self.add_optimizer("alpha", ("log_alpha",), "lr_alpha")
        target_entropy = self.spec.target_entropy
        self.target_entropy = default_target if target_entropy is None else target_entropy
        self.learn_counter = 0

    @property
    def alpha(self) -> float:
        """The entropy temperature now."""
        log_alpha = cast(LogStd, self.networks["log_alpha"]).log_std
        return float(log_alpha.detach().exp()[0])

    def export_policy(self) -> GreedyPolicy:
        """The most likely action: ``tanh`` of the mean rescaled into the bounds, or the
        argmax of the logits."""
        if self.discrete:
            body = NetworkHead(self.networks["actor"], "logits")
            return GreedyPolicy(self.observation_space, body, greedy_action(self.action_space))
        body = NetworkHead(self.networks["actor"], "mean")
        action = greedy_action(self.scaler.space, squash=True)
        return GreedyPolicy(self.observation_space, body, action)

    def to_env(self, unit: np.ndarray) -> np.ndarray:
        """Box actions in [-1, 1] as actions of the environment, ``[N, *shape]``."""
        return self.scaler.to_env(unit)

    def to_unit(self, actions: torch.Tensor) -> torch.Tensor:
        """Stored Box actions back in [-1, 1], ``[N, action_dim]``."""
        return self.scaler.to_unit(actions)

    def extra_state(self) -> dict[str, Any]:
        return {"learn_counter": self.learn_counter}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.learn_counter = int(state["learn_counter"])
