"""PPO for language models: a value head on the adapted model and GAE over completion tokens.

One completion is sampled per prompt. Each completion token is one action; its reward is
``-beta`` times the per-token KL estimate to the base model (every adapter off), and the
completion's task reward is added on its last token. Advantages come from GAE with a value
head (a linear layer on the last hidden state of the member's adapted model), are optionally
whitened over the batch's tokens, and feed PPO's clipped surrogate; the value head is fitted to
the GAE returns with a clipped squared error.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, Self

import torch

from agile_llm import groups, multiturn, objectives, text
from agile_llm.algorithms import GRPO, SEQUENCE_LEVELS, Rollout, Row
from agile_llm.objectives import IGNORE
from agile_llm.text import log_probs_and_states


class LLMPPO(GRPO):
    """Proximal policy optimisation of an LLM adapter with a learned value head, as in RL
    from human feedback (Ouyang et al., 2022, "Training language models to follow
    instructions with human feedback", arXiv:2203.02155; PPO: Schulman et al., 2017,
    arXiv:1707.06347; GAE: Schulman et al., 2016, arXiv:1506.02438).

    The policy is the member's adapter (AdamW at ``lr_actor``); the value head,
    ``Linear(hidden_size, 1)`` on the adapter's last hidden state, has its own AdamW
    (``optimizers["critic"]``, at ``lr_critic``). The value loss also trains the adapter,
    which the policy and the value head share. Fitness: as GRPO, the mean reward of greedy
    completions of held-out prompts.
    """

    lr_field: ClassVar[str] = "lr_actor"
    value_head: torch.nn.Linear

    def build(self) -> None:
        super().build()
        hidden = int(self.shared.base.config.hidden_size)
        self.value_head = torch.nn.Linear(hidden, 1).to(device=self.device, dtype=torch.float32)
        with torch.no_grad():  # V = 0 at first: no dependence on the global RNG
            self.value_head.weight.zero_()
            self.value_head.bias.zero_()
        rate = self.spec.lr_critic if self.spec.lr_critic is not None else self.spec.lr_actor
        self.optimizers["critic"] = torch.optim.AdamW(
            self.value_head.parameters(), lr=float(rate), weight_decay=0.0
        )

    def base_rate(self, optimizer: str) -> float:
        """The critic's rate is ``lr_critic`` (``lr_actor``'s when null)."""
        if optimizer != "critic":
            return super().base_rate(optimizer)
        critic = self.spec.lr_critic
        return float(critic if critic is not None else self.spec.lr_actor)

    def values(self, hidden: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:
        """``[N, T - 1]`` values by this member's head of the last hidden states ``hidden``
        ``[N, T - 1, H]`` (0 where not counted)."""
        return self.value_head(hidden.float()).squeeze(-1) * counted

    # -- rollout -------------------------------------------------------------------------------

    @classmethod
    def rollouts(
        cls, members: list[Self], rows: list[list[Row]], data: Any, ahead: Any = None
    ) -> list[Rollout | None]:
        """Each member's rollout: one completion of each of its prompts, sampled in one
        generation call (an episode of each seed, in a multi-turn environment), or ``ahead``
        by asynchronous rollouts' copy; a pass for their log-probabilities (the copy's, when
        it sampled them) and each row's values by its own member's head, one under the
        reference (members with a KL penalty); then rewards, GAE advantages and returns
        (:meth:`scored`, :meth:`episodes_scored`)."""
        sampled = ahead or cls.sample(members, rows, data)
        if data.env_type == "multiturn":
            assert sampled.episodes is not None
            played = sampled.episodes
            batches = [m.transcripts(own) for m, own in zip(members, played, strict=True)]
            measured = cls.passes(members, [b.sequences() for b in batches], sampled.old)
            sets = zip(members, played, batches, measured, strict=True)
            return [m.episodes_scored(own, b, p) for m, own, b, p in sets]
        done, rendered = sampled.done, sampled.rendered
        labels = [d.ids.masked_fill(~d.completion, IGNORE) for d in done]
        pairs = zip(done, labels, strict=True)
        sequences = [text.Sequences(d.ids, d.mask, own) for d, own in pairs]
        measured = cls.passes(members, sequences, sampled.old)
        rowed = zip(members, done, labels, rows, rendered, measured, strict=True)
        return [m.scored(d, own, r, t, data, p) for m, d, own, r, t, p in rowed]

    @classmethod
    def passes(
        cls, members: list[Self], sequences: list[text.Sequences],
        sampled: list[torch.Tensor] | None = None,
    ) -> list[dict[str, torch.Tensor]]:  # fmt: skip
        """Each member's passes over its sampled ``sequences``, every member's in one
        computation: ``old`` log-probabilities (``sampled``'s, where a copy of the model gave
        them), ``counted`` tokens, the head's ``values`` (measured now, before the update),
        and the ``reference`` log-probabilities (members with a KL penalty; else ``old``)."""
        pairs = zip(members, sequences, strict=True)
        parts = [m.micro_batches(int(q.ids.shape[0])) for m, q in pairs]
        penalised = [own if float(m.spec.beta) > 0 else []
                     for m, own in zip(members, parts, strict=True)]  # fmt: skip

        def completions(i: int, part: slice) -> text.Sequences:
            return sequences[i].take(part)

        def valued(i: int, batch: text.Sequences, output: Any, part: slice) -> Any:
            old, counted, hidden = output
            return old, counted, members[i].values(hidden, counted)

        temperature = members[0].sampled_at()
        forward = functools.partial(cls.training_pass, temperature=temperature)
        at_sampling = groups.measure(members, parts, completions, forward, valued)
        scored = functools.partial(text.labelled_log_probs, temperature=temperature)
        reference = groups.measure(members, penalised, completions, scored, adapters=False)
        found = []
        for i in range(len(members)):
            old, counted, values = (
                torch.cat(pieces) for pieces in zip(*at_sampling[i], strict=True)
            )
            old = old if sampled is None else sampled[i].to(old.device)
            base = torch.cat(reference[i]) if reference[i] else old
            found.append({"old": old, "counted": counted, "values": values, "reference": base})
        return found

    def episodes_scored(
        self, episodes: list[multiturn.Episode], batch: multiturn.Transcripts,
        passes: dict[str, torch.Tensor],
    ) -> Rollout:  # fmt: skip
        """The rollout of played ``episodes`` (their transcripts ``batch``): each turn's
        reward on its last generated token, the KL penalty on every one, and GAE over the
        generated tokens across turns (the environment's tokens between them are skipped, not
        an end), as 2.58 trains LLMPPO over episodes."""
        placed = torch.zeros_like(passes["old"])
        turn = batch.turn[:, 1:]  # aligned with the shifted labels
        for row, episode in enumerate(episodes):
            for number, reward in enumerate(episode.rewards):
                positions = (turn[row] == number).nonzero().flatten()
                if len(positions):
                    placed[row, positions[-1]] += reward
        self.last_rewards = torch.tensor([e.total for e in episodes], dtype=torch.float32,
                                         device=self.device)  # fmt: skip
        counted = passes["counted"].float()
        rewards = self.penalised(placed, passes["old"], passes["reference"], counted)
        return self.advantaged(batch.ids, batch.mask, batch.labels, rewards, passes)

    def scored(
        self, done: text.Completions, labels: torch.Tensor, rows: list[Row], rendered: list[str],
        data: Any, passes: dict[str, torch.Tensor],
    ) -> Rollout:  # fmt: skip
        """The rollout of sampled completions ``done`` of ``rows`` (prompts ``rendered``),
        given the passes at sampling (``old`` log-probabilities, ``counted`` tokens, the
        head's ``values``, the ``reference`` log-probabilities): rewards, GAE advantages and
        returns."""
        rewards = torch.as_tensor(data.reward(done.texts, rows, rendered),
                                  dtype=torch.float32, device=self.device)  # fmt: skip
        self.last_rewards = rewards
        counted = passes["counted"].float()
        token = self.token_rewards(rewards, passes["old"], passes["reference"], counted)
        return self.advantaged(done.ids, done.mask, labels, token, passes)

    def token_rewards(self, rewards: torch.Tensor, old: torch.Tensor, reference: torch.Tensor,
                      counted: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """``[N, T]`` rewards: ``-beta * KL`` on every counted token, plus each completion's
        reward on its last counted token."""
        last = counted * (counted.cumsum(dim=1) == counted.sum(dim=1, keepdim=True))
        return self.penalised(last * rewards.unsqueeze(1), old, reference, counted)

    def penalised(self, placed: torch.Tensor, old: torch.Tensor, reference: torch.Tensor,
                  counted: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """Rewards ``placed`` on tokens, with ``-beta * KL`` on every counted token."""
        return -float(self.spec.beta) * self.token_kl(old, reference) * counted + placed

    def advantaged(
        self, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor,
        token_rewards: torch.Tensor, passes: dict[str, torch.Tensor],
    ) -> Rollout:  # fmt: skip
        """The rollout of sampled rows given their per-token rewards ``[N, T - 1]`` and the
        passes at sampling: GAE advantages (whitened with ``whiten_advantages``) and
        returns."""
        old, values, counted = passes["old"], passes["values"], passes["counted"].float()
        advantage, returns = objectives.generalised_advantages(
            token_rewards, values, counted, float(self.spec.gamma), float(self.spec.gae_lambda)
        )
        if self.spec.whiten_advantages:
            advantage = whiten(advantage, counted)
        return {"ids": ids, "mask": mask, "labels": labels, "old": old, "counted": counted,
                "values": values, "returns": returns, "advantage": advantage}  # fmt: skip

    # -- loss ----------------------------------------------------------------------------------

    @staticmethod
    def training_pass(model: Any, batch: text.Sequences, temperature: float = 1.0) -> Any:
        """The pass :meth:`rollout_loss` learns from: each labelled token's log-probability
        (at the sampling ``temperature``), and the last hidden state it is chosen in."""
        return log_probs_and_states(model, batch.ids, batch.mask, batch.labels, temperature)

    def rollout_loss(self, rollout: Rollout, output: Any, part: slice) -> torch.Tensor:
        """The loss of the rollout's rows ``part`` given a :meth:`training_pass`'s output for
        them: the clipped surrogate plus ``vf_coef`` times the value loss; in the first
        ``critic_warmup_steps`` updates, the value loss alone, on states the adapter does not
        learn from (the policy stays the initial one)."""
        width = rollout["ids"].shape[1] - 1
        current, hidden = output[0][:, :width], output[2][:, :width]
        counted = rollout["counted"][part]
        old = rollout["old"][part]
        if self.updates < self.spec.critic_warmup_steps:  # the value head alone learns
            alone = self.values(hidden.detach(), counted)
            value = self.value_loss(alone, rollout["values"][part], rollout["returns"][part],
                                    counted)  # fmt: skip
            return float(self.spec.vf_coef) * value
        policy = self.policy_loss(current, old, rollout["advantage"][part], counted)
        value = self.value_loss(self.values(hidden, counted), rollout["values"][part],
                                rollout["returns"][part], counted)  # fmt: skip
        return policy + float(self.spec.vf_coef) * value

    def kl_weight(self) -> float:
        """None in the loss: the KL is in the reward (:meth:`token_rewards`)."""
        return 0.0

    def policy_loss(self, current: torch.Tensor, old: torch.Tensor,
                    advantage: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """PPO's clipped surrogate on per-token advantages (per completion, with the mean
        advantage of its tokens, at ``importance_sampling_level: sequence``), averaged over
        each completion's tokens, then completions."""
        if getattr(self.spec, "importance_sampling_level", None) in SEQUENCE_LEVELS:
            pooled = (advantage * counted).sum(dim=1) / counted.sum(dim=1).clamp(min=1)
            advantage = pooled.unsqueeze(1).expand_as(counted)
        loss, kept = self.policy_terms(current, old, old, advantage, counted)
        return objectives.reduce_loss(loss, kept, counted, "episode", 0.0, 1.0)

    def value_loss(self, values: torch.Tensor, old: torch.Tensor, returns: torch.Tensor,
                   counted: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """Half the squared error to the returns, the larger of the unclipped one and the one
        with the values kept within ``clip_coef`` of those at sampling, per counted token."""
        _, high = self.clip_range()
        clipped = old + (values - old).clamp(-(high - 1.0), high - 1.0)
        error = torch.max((values - returns) ** 2, (clipped - returns) ** 2)
        per_row = (error * counted).sum(dim=1) / counted.sum(dim=1).clamp(min=1)
        return 0.5 * per_row.mean()

    # -- optimisers, hyperparameters, checkpoints ----------------------------------------------

    def step(self) -> None:
        """Clip the value head's gradient too, on its own or (``share_grad_clip``) with the
        adapter's by one coefficient of their joint norm, then step both optimizers."""
        head = list(self.value_head.parameters())
        if self.spec.max_grad_norm:
            joint = [*self.trained_parameters(), *head] if self.spec.share_grad_clip else head
            torch.nn.utils.clip_grad_norm_(joint, self.spec.max_grad_norm)
        super().step()

    def parameters(self) -> Any:
        yield from super().parameters()
        yield from self.value_head.parameters()

    def extra_state(self) -> dict[str, Any]:
        head = self.value_head.state_dict()
        return {"value_head": {name: t.detach().cpu().clone() for name, t in head.items()}}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        if "value_head" in state:  # copied into this member's own head, in place
            self.value_head.load_state_dict(state["value_head"])


def whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` standardised over the positions ``mask`` counts (mean 0, unbiased variance
    1), and 0 elsewhere; unchanged but masked when fewer than two positions count."""
    count = mask.sum()
    if count < 2:
        return values * mask
    mean = (values * mask).sum() / count
    variance = ((values - mean) ** 2 * mask).sum() / (count - 1)
    return (values - mean) * torch.rsqrt(variance + 1e-8) * mask
