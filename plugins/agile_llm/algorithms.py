"""The LLM algorithms: what a group of members does with its batches of prompts, and how it is
scored. Each writes its step (``train_group``) and its scoring (``score_group``) once, over the
group's passes (:mod:`.groups`); a member alone is a group of one.

- :class:`SFT`: next-token cross-entropy on the response tokens; fitness: minus the held-out
  loss.
- :class:`DPO` (Rafailov et al., 2023, arXiv:2305.18290): the preference loss against the base
  model with every adapter off; fitness: held-out preference accuracy.
- :class:`GRPO` (Shao et al., 2024, arXiv:2402.03300) and its variants :class:`GSPO`
  (sequence-level ratio) and :class:`CISPO` (clipped, detached importance weights), and
  :class:`LLMREINFORCE` (a batch-mean baseline, per-token discount): sample completions, score
  them with the reward function, and take policy-gradient steps; fitness: the mean reward of
  greedy completions of held-out prompts.
- :class:`LLMPPO` (Ouyang et al., 2022): a value head on the last hidden state and GAE over
  the completion's tokens, with the KL to the reference as a per-token reward.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np
import torch

from agile_llm import groups, multiturn, objectives, text
from agile_llm.objectives import IGNORE
from agile_llm.population import LLMMember, Scores
from agile_llm.replay import GroupReplay
from agile_llm.text import log_probs

Row = dict[str, Any]
#: A sampled batch as the policy-gradient algorithms learn from it: ``ids``, ``mask`` and
#: ``labels`` ``[N, T]``, then per-token tensors ``[N, T - 1]`` (``counted``, ``old``,
#: ``reference``; LLMPPO's ``values`` and ``returns``) and the ``advantage``.
Rollout = dict[str, Any]

#: Held-out outputs shown by ``agile evaluate``.
SAMPLES = 3
#: ``importance_sampling_level`` values that take one ratio per completion.
SEQUENCE_LEVELS = ("sequence", "trajectory", "turn")


def _logits(model: Any, batch: text.Sequences) -> torch.Tensor:
    """SFT's pass: the logits at every position."""
    positions = (batch.mask.cumsum(dim=-1) - 1).clamp(min=0)
    logits: torch.Tensor = model(input_ids=batch.ids, attention_mask=batch.mask,
                                 position_ids=positions).logits  # fmt: skip
    return logits


def _summed(model: Any, batch: text.Sequences) -> torch.Tensor:
    """DPO's pass: each row's summed log-probability of its response."""
    values, _counted = log_probs(model, batch.ids, batch.mask, batch.labels)
    return values.sum(dim=1)


class SFT(LLMMember):
    """Supervised fine-tuning on (prompt, response) rows; the prompt tokens are masked."""

    def sequences(self, rows: list[Row], data: Any) -> text.Sequences:
        """Each row's prompt then response tokens (and an end token), the response labelled."""
        prompts = self._prompts(rows, data)
        end = [self.tokenizer.eos_token_id]
        responses = [ids + end for ids in self._responses([data.response(r) for r in rows])]
        return text.sequence_batch(
            self.tokenizer, list(zip(prompts, responses, strict=True)),
            self.shared.context_length, self.device,
        )  # fmt: skip

    def _prompts(self, rows: list[Row], data: Any) -> list[list[int]]:
        """Each row's prompt tokens, as many of its last ones as a training row can hold."""
        return self.prompt_ids(self.render_prompts(rows, data), self.shared.context_length)

    def _responses(self, targets: list[str]) -> list[list[int]]:
        """Each target's tokens, as many of its first ones as a training row can hold."""
        return text.encode_all(self.tokenizer, targets, self.shared.context_length)

    @classmethod
    def train_group(cls, members: list[Self], rows: list[list[Row]], data: Any) -> list[float]:
        """Next-token cross-entropy on each member's response tokens, ``update_epochs``
        times over its batch."""
        batches = [m.sequences(r, data) for m, r in zip(members, rows, strict=True)]

        def loss(i: int, batch: text.Sequences, logits: torch.Tensor, part: slice) -> torch.Tensor:
            return objectives.sft_loss(logits, batch.labels)

        def rows_of(i: int, part: slice) -> text.Sequences:
            return batches[i].take(part)

        return groups.learn(members, [len(r) for r in rows], rows_of, _logits, loss)

    @classmethod
    def score_group(cls, members: list[Self], rows: list[Row], data: Any) -> list[Scores]:
        """Each member's held-out loss (the mean of its chunks', ``batch_size`` rows each) and
        the exact match of its greedy completions."""

        def sequences(i: int, chunk: slice) -> text.Sequences:
            return members[i].sequences(rows[chunk], data)

        def loss(i: int, batch: text.Sequences, logits: torch.Tensor, chunk: slice) -> float:
            return float(objectives.sft_loss(logits, batch.labels))

        chunks = groups.chunks(members, len(rows))
        losses = groups.measure(members, chunks, sequences, _logits, loss)
        outputs = groups.held_out(members, rows, data)
        return [m.loss_scores(own, out, rows, data)
                for m, own, out in zip(members, losses, outputs, strict=True)]  # fmt: skip

    def loss_scores(
        self, losses: list[float], outputs: list[str], rows: list[Row], data: Any
    ) -> Scores:
        """The held-out scores of chunk ``losses`` and greedy ``outputs`` of ``rows``."""
        targets = [data.response(r).strip() for r in rows]
        exact = float(np.mean([o.strip() == t for o, t in zip(outputs, targets, strict=True)]))
        loss = float(np.mean(losses))
        return Scores(-loss, {"held-out loss": loss, "exact match": exact},
                      _samples(rows, data, outputs, targets))  # fmt: skip


class DPO(SFT):
    """Direct preference optimisation on (prompt, chosen, rejected) rows."""

    def pairs(self, rows: list[Row], data: Any) -> text.Sequences:
        """Chosen rows then rejected rows, one batch."""
        prompts = self._prompts(rows, data)
        end = [self.tokenizer.eos_token_id]
        chosen = [ids + end for ids in self._responses([data.chosen(r) for r in rows])]
        rejected = [ids + end for ids in self._responses([data.rejected(r) for r in rows])]
        pairs = list(zip(prompts + prompts, chosen + rejected, strict=True))
        return text.sequence_batch(self.tokenizer, pairs, self.shared.context_length, self.device)

    def pair_loss(
        self, policy: torch.Tensor, reference: torch.Tensor, chosen: torch.Tensor
    ) -> objectives.PreferenceLoss:
        """DPO on ``[2B]`` summed log-probabilities (chosen rows, then rejected) under the
        policy and the reference; ``chosen`` is the chosen rows' labels (for ``nll_alpha``)."""
        half = len(policy) // 2
        beta = float(self.spec.beta)
        result = objectives.dpo_loss(policy[:half], policy[half:], reference[:half],
                                     reference[half:], beta)  # fmt: skip
        nll_alpha = float(getattr(self.spec, "nll_alpha", 0.0) or 0.0)
        if nll_alpha:
            tokens = chosen[:, 1:].ne(IGNORE).sum().clamp(min=1)
            result = result._replace(loss=result.loss - nll_alpha * policy[:half].sum() / tokens)
        return result

    @classmethod
    def train_group(cls, members: list[Self], rows: list[list[Row]], data: Any) -> list[float]:
        """DPO's loss on each member's pairs against the base with every adapter off (its
        log-probabilities taken once, without gradients), ``update_epochs`` times over the
        batch; a micro-batch is some of the pairs, chosen and rejected rows both."""
        batches = [m.pairs(r, data) for m, r in zip(members, rows, strict=True)]
        sizes = [len(r) for r in rows]
        parts = [m.micro_batches(size) for m, size in zip(members, sizes, strict=True)]

        def pairs(i: int, part: slice) -> text.Sequences:  # its chosen rows, then rejected
            chosen = torch.arange(part.start, part.stop)
            return batches[i].take(torch.cat([chosen, chosen + sizes[i]]))

        reference = groups.measure(members, parts, pairs, _summed, adapters=False)

        def loss(i: int, batch: text.Sequences, policy: torch.Tensor, part: slice) -> torch.Tensor:
            own = reference[i][parts[i].index(part)]
            return members[i].pair_loss(policy, own, batch.labels[: len(policy) // 2]).loss

        return groups.learn(members, sizes, pairs, _summed, loss)

    @classmethod
    def score_group(cls, members: list[Self], rows: list[Row], data: Any) -> list[Scores]:
        """Each member's held-out preference accuracy, reward margin and loss (by chunks of
        ``batch_size`` pairs), and greedy completions of the first rows."""
        chunks = groups.chunks(members, len(rows))
        batches = {(i, c.start): members[i].pairs(rows[c], data)
                   for i, own in enumerate(chunks) for c in own}  # fmt: skip

        def pairs(i: int, chunk: slice) -> text.Sequences:
            return batches[i, chunk.start]

        reference = groups.measure(members, chunks, pairs, _summed, adapters=False)

        def result(
            i: int, batch: text.Sequences, policy: torch.Tensor, chunk: slice
        ) -> tuple[objectives.PreferenceLoss, int]:
            own = reference[i][chunks[i].index(chunk)]
            chosen = batch.labels[: len(policy) // 2]
            return members[i].pair_loss(policy, own, chosen), chunk.stop - chunk.start

        results = groups.measure(members, chunks, pairs, _summed, result)
        outputs = groups.held_out(members, rows[:SAMPLES], data)
        return [m.preference_scores(own, out, rows, data)
                for m, own, out in zip(members, results, outputs, strict=True)]  # fmt: skip

    def preference_scores(
        self, results: list[tuple[objectives.PreferenceLoss, int]], outputs: list[str],
        rows: list[Row], data: Any,
    ) -> Scores:  # fmt: skip
        """The held-out scores of each chunk's preference result (with its size) and the
        greedy ``outputs`` of the first rows."""
        n = len(rows)
        metrics = {
            "preference accuracy": sum(float(r.accuracy) * k for r, k in results) / n,
            "reward margin": sum(float(r.margin) * k for r, k in results) / n,
            "held-out loss": sum(float(r.loss) * k for r, k in results) / n,
        }
        targets = [data.chosen(r).strip() for r in rows[:SAMPLES]]
        return Scores(metrics["preference accuracy"], metrics,
                      _samples(rows, data, outputs, targets))  # fmt: skip


class GRPO(LLMMember):
    """Group-relative policy optimisation: ``group_size`` sampled completions per prompt, each
    with its reward standardised within the group as its advantage."""

    #: How the importance ratio is taken: per token (``token``), per completion
    #: (``sequence``) or as CISPO's clipped, detached weights (``cispo``).
    ratio: ClassVar[str] = "token"

    def build(self) -> None:
        age = self.shared.group_replay_age
        #: Group replay's store (``replay_buffer.group_replay_max_age``), of asynchronous
        #: rollouts over rows; None without it.
        self.group_replay = GroupReplay(age) if age else None

    def policy_terms(self, current: torch.Tensor, old: torch.Tensor, reference: torch.Tensor,
                     advantage: torch.Tensor, counted: torch.Tensor,
                     ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """Each token's loss and whether it counts (:func:`objectives.policy_loss`), for
        ``[N, T]`` log-probabilities now, at sampling and under the reference, per-token
        advantages and the counted tokens; the ratio per completion with
        ``importance_sampling_level`` sequence or trajectory."""
        spec = self.spec
        level = getattr(spec, "importance_sampling_level", None)
        ratio = "sequence" if level in SEQUENCE_LEVELS and self.ratio == "token" else self.ratio
        bounds = getattr(spec, "off_policy_token_mask_bounds", None)
        masks = objectives.OffPolicyMasks(
            tuple(bounds) if bounds is not None else None,
            getattr(spec, "off_policy_sequence_mask_threshold", None),
        )  # fmt: skip
        shaped = getattr(spec, "use_kl_advantage_shaping", False)  # the KL is in the advantage
        penalty = objectives.Penalty(
            0.0 if shaped else self.kl_weight(),
            getattr(spec, "kl_clamp", None),
            bool(getattr(spec, "use_bias_correction_kl", False)),
        )
        low, high = self.clip_range()
        return objectives.policy_loss(current, old, reference, advantage, counted,
                                      ratio=ratio, clip_low=low, clip_high=high,  # type: ignore[arg-type]
                                      penalty=penalty, masks=masks)  # fmt: skip

    def token_kl(self, old: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
        """Each sampled token's KL estimate to the reference (clamped to ``kl_clamp``)."""
        kl = objectives.kl_penalty(old, reference)
        clamp = getattr(self.spec, "kl_clamp", None)
        return kl if clamp is None else kl.clamp(max=float(clamp))

    def kl_weight(self) -> float:
        """The KL penalty's weight."""
        return float(getattr(self.spec, "beta", 0.0) or 0.0)

    def loss_norm(self) -> objectives.LossNorm:
        """What the loss averages over (``algorithm.loss_norm``; each completion's tokens,
        then completions, for an algorithm without the field)."""
        norm: objectives.LossNorm = getattr(self.spec, "loss_norm", "episode")
        return norm

    def clip_range(self) -> tuple[float, float]:
        """The importance ratio's bounds: ``1 -/+ clip_coef``, or CISPO's ``clip_bounds``."""
        bounds = getattr(self.spec, "clip_bounds", None)
        if bounds is not None:
            return float(bounds[0]), float(bounds[1])
        clip = float(self.spec.clip_coef)
        return 1.0 - clip, 1.0 + clip

    def group(self) -> int:
        """How many completions (episodes) are sampled of each prompt (seed)."""
        return int(getattr(self.spec, "group_size", 1))

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        """``[P * G]`` advantages of ``[P * G]`` rewards (groups of ``G`` consecutive)."""
        grouped = rewards.view(-1, self.group())
        if getattr(self.spec, "adv_norm", "mean_std") == "mean_only":
            advantage = grouped - grouped.mean(dim=1, keepdim=True)
        else:
            advantage = objectives.group_advantages(grouped)
        advantage = advantage.reshape(-1)
        if getattr(self.spec, "whiten_advantages", False) and advantage.numel() > 1:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-6)
        limit = getattr(self.spec, "adv_clip_range", None)
        return advantage.clamp(-limit, limit) if limit else advantage

    def token_advantages(self, advantage: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:
        """Per-token advantages ``[N, T]``: each completion's, on every token."""
        return advantage.unsqueeze(1).expand_as(counted)

    # -- one step ----------------------------------------------------------------------------

    @classmethod
    def train_group(
        cls, members: list[Self], rows: list[list[Row]], data: Any, ahead: Sampled | None = None
    ) -> list[float]:
        """Each member's :meth:`rollouts` of its rows (sampled ``ahead`` by asynchronous
        rollouts, when given), then ``update_epochs`` passes of its loss
        (:meth:`rollout_loss`) over them; a member whose rollout is empty (every advantage
        zero, with ``filter_zero_adv``) does not step."""
        rollouts = cls.rollouts(members, rows, data, ahead)
        sizes = [0 if r is None else int(r["ids"].shape[0]) for r in rollouts]

        def loss(i: int, batch: text.Sequences, output: Any, part: slice) -> torch.Tensor:
            rollout = rollouts[i]
            assert rollout is not None  # a member without one has no part
            return members[i].rollout_loss(rollout, output, part)

        forward = functools.partial(cls.training_pass, temperature=members[0].sampled_at())
        return groups.learn(members, sizes, _rows_of(rollouts), forward, loss)

    @staticmethod
    def training_pass(model: Any, batch: text.Sequences, temperature: float = 1.0) -> Any:
        """The pass :meth:`rollout_loss` learns from: each labelled token's log-probability
        at the sampling ``temperature``."""
        return text.labelled_log_probs(model, batch, temperature)

    def sampled_at(self) -> float:
        """The temperature completions are sampled at; their log-probabilities, at sampling,
        under the reference and as the policy learns, are those of that distribution (the
        logits divided by it), as 2.58 computes them. A group shares it."""
        return float(getattr(self.spec, "temperature", 1.0) or 1.0)

    @classmethod
    def rollouts(
        cls, members: list[Self], rows: list[list[Row]], data: Any, ahead: Sampled | None = None
    ) -> list[Rollout | None]:
        """Each member's rollout: ``group_size`` completions of each of its prompts, sampled
        in one generation call (or ``ahead``; episodes of each seed of a multi-turn
        environment, played in step), scored, with their advantages and log-probabilities at
        sampling and under the reference; None for a member whose ``filter_zero_adv`` kept
        no row."""
        rollouts: list[Rollout | None]
        none: list[torch.Tensor | None] = [None] * len(members)
        if data.env_type == "multiturn":
            if ahead is not None and ahead.episodes is not None:
                played, olds = ahead.episodes, list(ahead.old) if ahead.old else none
            else:
                played, olds = play_episodes(members, rows, data, explore=True), none
            episodes = zip(members, played, olds, strict=True)
            rollouts = [m.episodes_rollout(own, old) for m, own, old in episodes]
        else:
            sampled = ahead or cls.sample(members, rows, data)
            olds = none if sampled.old is None else list(sampled.old)
            pieces = zip(members, sampled.done, rows, sampled.rendered, olds, strict=True)
            rollouts = [m.rollout_of(d, r, t, data, old) for m, d, r, t, old in pieces]
        _at_sampling(members, rollouts)
        return rollouts

    @classmethod
    def sample(
        cls, members: list[Self], rows: list[list[Row]], data: Any, engine: Any = None
    ) -> Sampled:
        """Each member's ``group_size`` completions of each of its rows' prompts, in one
        generation call (by ``engine``, when given: asynchronous rollouts' copy of the model,
        which also gives their log-probabilities at sampling)."""
        if data.env_type == "multiturn":  # episodes, played by the copy's adapters
            played = play_episodes(members, rows, data, explore=True, engine=engine)
            batches = [m.transcripts(own).sequences() for m, own in zip(members, played,
                                                                        strict=True)]  # fmt: skip
            olds = None if engine is None else engine.log_probs(members, batches)
            return Sampled([], [], olds, played)
        rendered = [m.render_prompts(r, data) for m, r in zip(members, rows, strict=True)]
        prompts = [m.prompt_ids(t) for m, t in zip(members, rendered, strict=True)]
        done = groups.sample(members, prompts, [m.group() for m in members], engine)
        old = None if engine is None else engine.sampling_log_probs(members, done)
        return Sampled(rendered, done, old)

    def rollout_of(
        self, done: text.Completions, rows: list[Row], rendered: list[str], data: Any,
        old: torch.Tensor | None = None,
    ) -> Rollout | None:  # fmt: skip
        """The sampled completions of ``rows`` (``group_size`` each, in order) scored, with
        their advantages (and ``old``, their log-probabilities at sampling, when another copy
        of the model sampled them; a tied group may take a stored completion, with group
        replay: :mod:`agile_llm.replay`); None when every advantage is zero and
        ``filter_zero_adv`` drops them all, or every group ties and the replay buffer's
        ``drop_uninformative_groups`` drops them."""
        group = self.group()
        repeated = [r for r in rows for _ in range(group)]
        prompt_texts = [p for p in rendered for _ in range(group)]
        rewards = torch.as_tensor(data.reward(done.texts, repeated, prompt_texts),
                                  dtype=torch.float32, device=self.device)  # fmt: skip
        if self.group_replay is not None and old is not None:
            done, old, rewards = self.group_replay.apply(
                rendered, group, done, old, rewards, self.updates, int(self.tokenizer.pad_token_id)
            )
        self.last_rewards = rewards
        labels = done.ids.masked_fill(~done.completion, IGNORE)
        rollout: Rollout | None = {"ids": done.ids, "mask": done.mask, "labels": labels,
                                   "advantage": self.advantages(rewards)}  # fmt: skip
        if old is not None:
            rollout["old"] = old  # type: ignore[index]  # just made
        if getattr(data, "drop_uninformative", False):
            rollout = _informative(rollout, rewards, self.group())  # type: ignore[arg-type]
        return self._kept(rollout) if rollout is not None else None

    def _kept(self, rollout: Rollout) -> Rollout | None:
        """``rollout`` with its counted tokens, less the rows of zero advantage when
        ``filter_zero_adv`` asks (None when that leaves none)."""
        advantage = rollout["advantage"]
        if getattr(self.spec, "filter_zero_adv", False):
            keep = advantage != 0
            if not bool(keep.any()):
                return None
            rollout = {name: value[keep] for name, value in rollout.items()}
        rollout["counted"] = rollout["labels"][:, 1:].ne(IGNORE).float()
        return rollout

    def rollout_loss(self, rollout: Rollout, output: Any, part: slice) -> torch.Tensor:
        """The loss of the rollout's rows ``part``, given a :meth:`training_pass`'s output for
        them (their log-probabilities now)."""
        current = output[:, : rollout["ids"].shape[1] - 1]
        counted = rollout["counted"][part]
        if "token_advantage" in rollout:  # each turn's own, in a multi-turn episode
            advantage = rollout["token_advantage"][part]
        else:
            advantage = self.token_advantages(rollout["advantage"][part], counted)
        old, reference = rollout["old"][part], rollout["reference"][part]
        if getattr(self.spec, "use_kl_advantage_shaping", False):
            advantage = advantage - self.kl_weight() * self.token_kl(old, reference)
        loss, kept = self.policy_terms(current, old, reference, advantage, counted)
        mini = self.mini_batch_of(part, int(rollout["ids"].shape[0]))
        share = (part.stop - part.start) / (mini.stop - mini.start)
        window = float(rollout["counted"][mini].sum())  # the tokens of one optimiser step
        return objectives.reduce_loss(loss, kept, counted, self.loss_norm(), window, share)

    # -- multi-turn environments -----------------------------------------------------------

    def conversation(self, data: Any) -> multiturn.Conversation:
        """How this member's episodes are written as tokens."""
        model_type = getattr(getattr(self.shared.base, "config", None), "model_type", None)
        return multiturn.Conversation(self.tokenizer, data.chat_prompts, data.strict_boundary,
                                      lambda prompt: self.prompt_ids([prompt])[0],
                                      model_type)  # fmt: skip

    def episodes_rollout(
        self, episodes: list[multiturn.Episode], old: torch.Tensor | None = None
    ) -> Rollout | None:
        """Played episodes (``group_size`` consecutive ones per seed) as a rollout: each
        transcript's generated tokens trained with its return's group-relative advantage, or,
        with ``advantage_granularity: turn``, with each turn's return-to-go's (and ``old``,
        their log-probabilities under the copy that played them, with asynchronous
        rollouts)."""
        batch = self.transcripts(episodes)
        returns = torch.tensor([e.total for e in episodes], dtype=torch.float32,
                               device=self.device)  # fmt: skip
        self.last_rewards = returns
        advantage = self.advantages(returns)
        rollout = {"ids": batch.ids, "mask": batch.mask, "labels": batch.labels,
                   "advantage": advantage}  # fmt: skip
        if getattr(self.spec, "advantage_granularity", "auto") == "turn":
            fallback = getattr(self.spec, "turn_advantage_trajectory_fallback", True)
            turns = multiturn.turn_advantages(episodes, self.group(),
                                              advantage if fallback else None)  # fmt: skip
            rollout["token_advantage"] = multiturn.per_token(batch.turn, turns).to(self.device)
        if old is not None:
            rollout["old"] = old.to(self.device)
        return self._kept(rollout)

    # -- scoring -----------------------------------------------------------------------------

    @classmethod
    def score_group(cls, members: list[Self], rows: list[Row], data: Any) -> list[Scores]:
        """Each member's mean reward of greedy completions of the held-out prompts (of a
        multi-turn environment, the summary of its greedy episodes of the held-out seeds),
        ``batch_size`` at a time."""
        samples = int(getattr(data, "eval_samples", 0))
        greedy = cls.scores(members, rows, data, 0) if not samples or data.eval_greedy else None
        if not samples:
            assert greedy is not None
            return greedy
        sampled = cls.scores(members, rows, data, samples)
        if greedy is None:
            return sampled
        return [_with_greedy(s, g) for s, g in zip(sampled, greedy, strict=True)]

    @classmethod
    def scores(cls, members: list[Self], rows: list[Row], data: Any, samples: int) -> list[Scores]:
        """Each member's scores of greedy completions (episodes) of ``rows``, or of
        ``samples`` sampled ones of each (``training.eval_samples_per_task``)."""
        if data.env_type == "multiturn":
            played = held_out_play(members, rows, data, samples)
            return [m.episode_scores(own, data) for m, own in zip(members, played, strict=True)]
        rendered = members[0].render_prompts(rows, data)
        outputs = groups.held_out(members, rows, data, rendered, samples=samples)
        copies = max(samples, 1)
        rows = [row for row in rows for _ in range(copies)]
        rendered = [prompt for prompt in rendered for _ in range(copies)]
        return [m.reward_scores(out, rows, rendered, data)
                for m, out in zip(members, outputs, strict=True)]  # fmt: skip

    def episode_scores(self, episodes: list[multiturn.Episode], data: Any) -> Scores:
        """The held-out scores of greedy ``episodes``: their summary, the mean return first."""
        metrics = multiturn.summary(episodes, data)
        shown = [multiturn.shown(e) for e in episodes[:SAMPLES]]
        return Scores(metrics["mean return"], metrics, shown)

    def reward_scores(
        self, outputs: list[str], rows: list[Row], rendered: list[str], data: Any
    ) -> Scores:
        """The held-out scores of the greedy ``outputs`` of ``rows`` (prompts ``rendered``)."""
        rewards = [float(r) for r in data.reward(outputs, rows, rendered)]
        metrics = {"mean reward": float(np.mean(rewards))}
        accuracy = data.accuracy(np.asarray(rewards))
        if accuracy is not None:
            metrics["accuracy"] = float(accuracy)
        targets = [str(data.answer(r)) for r in rows]
        return Scores(metrics["mean reward"], metrics, _samples(rows, data, outputs, targets))


def _with_greedy(sampled: Scores, greedy: Scores) -> Scores:
    """Sampled scores (the fitness) with the greedy ones beside them, as ``greedy ...``."""
    metrics = {**sampled.metrics, **{f"greedy {k}": v for k, v in greedy.metrics.items()}}
    return Scores(sampled.fitness, metrics, sampled.samples)


def _rows_of(rollouts: list[Rollout | None]) -> groups.Rows:
    """Member ``i``'s rows ``part`` of its rollout, for a pass."""

    def rows(i: int, part: slice) -> text.Sequences:
        rollout = rollouts[i]
        assert rollout is not None  # a member without one has no part
        return text.Sequences(rollout["ids"], rollout["mask"], rollout["labels"]).take(part)

    return rows


@dataclass
class Sampled:
    """Completions sampled for each member of a group: its rows' prompt texts, its
    completions, and (sampled by another copy of the model) their log-probabilities then."""

    rendered: list[list[str]]
    done: list[text.Completions]
    old: list[torch.Tensor] | None = None
    #: The episodes played, in a multi-turn environment (``rendered`` and ``done`` empty).
    episodes: list[list[multiturn.Episode]] | None = None


def _informative(rollout: Rollout, rewards: torch.Tensor, group: int) -> Rollout | None:
    """``rollout`` less its groups whose completions all got the same reward (None: all)."""
    grouped = rewards.view(-1, group)
    keep = (grouped.max(dim=1).values > grouped.min(dim=1).values).repeat_interleave(group)
    if not bool(keep.any()):
        return None
    return {name: value[keep] for name, value in rollout.items()}


def _at_sampling(members: Sequence[GRPO], rollouts: list[Rollout | None]) -> None:
    """Fill each rollout's log-probabilities at sampling (its adapter; unless another copy of
    the model sampled it and gave them) and under the reference (every adapter off, for a
    member with a KL penalty), each a pass for every member."""
    parts = [[] if r is None else m.micro_batches(int(r["ids"].shape[0]))
             for m, r in zip(members, rollouts, strict=True)]  # fmt: skip
    penalised = [own if float(getattr(m.spec, "beta", 0.0)) > 0 else []
                 for m, own in zip(members, parts, strict=True)]  # fmt: skip
    rows = _rows_of(rollouts)

    def own_width(i: int, batch: text.Sequences, output: torch.Tensor, part: slice) -> Any:
        rollout = rollouts[i]
        assert rollout is not None
        return output[:, : rollout["ids"].shape[1] - 1]

    unsampled = [[] if r is None or "old" in r else own
                 for r, own in zip(rollouts, parts, strict=True)]  # fmt: skip
    scored = functools.partial(text.labelled_log_probs, temperature=members[0].sampled_at())
    old = groups.measure(members, unsampled, rows, scored, own_width)
    reference = groups.measure(members, penalised, rows, scored, own_width, adapters=False)
    for rollout, at_sampling, base in zip(rollouts, old, reference, strict=True):
        if rollout is not None:
            if "old" not in rollout:
                rollout["old"] = torch.cat(at_sampling)
            rollout["reference"] = torch.cat(base) if base else rollout["old"]


class GSPO(GRPO):
    """GRPO with the importance ratio and its clip taken per completion (sequence level)."""

    ratio: ClassVar[str] = "sequence"


class CISPO(GRPO):
    """GRPO's sampling and advantages with CISPO's clipped importance-sampling weights."""

    ratio: ClassVar[str] = "cispo"


class LLMREINFORCE(GRPO):
    """REINFORCE with a baseline: one completion per prompt (``group_size`` if the spec has
    one), advantage = reward minus the batch's mean reward, discounted by ``gamma`` per token
    from the end of the completion; PPO's ratio clip when a batch is reused."""

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        return rewards - rewards.mean()

    def token_advantages(self, advantage: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:
        gamma = float(getattr(self.spec, "gamma", 1.0))
        remaining = counted.flip(1).cumsum(dim=1).flip(1) - counted  # tokens after this one
        return advantage.unsqueeze(1) * gamma**remaining


def _samples(
    rows: list[dict[str, Any]], data: Any, outputs: list[str], targets: list[str]
) -> list[tuple[str, str, str]]:
    shown = []
    for row, output, target in list(zip(rows, outputs, targets, strict=False))[:SAMPLES]:
        prompt = " | ".join(turn["content"] for turn in data.messages(row))
        shown.append((prompt, output, target))
    return shown


def play_episodes(
    members: Sequence[GRPO], rows: list[list[Row]], data: Any, *, explore: bool,
    copies: int | None = None, engine: Any = None,
) -> list[list[multiturn.Episode]]:  # fmt: skip
    """Each member's episodes of a multi-turn environment (``copies`` per seed of its
    ``rows``: by default ``group_size`` each when exploring, else one), played in step: each
    turn is one generation call for every member's running episodes, each row through its
    member's adapter (``engine``'s copy of it, with asynchronous rollouts)."""
    first = members[0]
    seeds = [
        (int(row["seed"]), i)
        for i, (member, own) in enumerate(zip(members, rows, strict=True))
        for row in own
        for _ in range(copies or (member.group() if explore else 1))
    ]

    def turn(prompts: list[list[int]], owners: list[int]) -> text.Completions:
        seed = groups.draw(members) if explore else None
        return groups.generate(members, prompts, owners, explore=explore, seed=seed,
                               engine=engine)  # fmt: skip

    played = multiturn.play(data, seeds, first.conversation(data), turn,
                            context=first.row_tokens(),
                            reply_room=first.output_tokens())  # fmt: skip
    return [[e for e in played if e.owner == i] for i in range(len(members))]


def held_out_play(
    members: Sequence[GRPO], rows: list[Row], data: Any, samples: int = 0
) -> list[list[multiturn.Episode]]:
    """Each member's greedy episode of each seed of ``rows`` (or ``samples`` sampled ones),
    ``batch_size`` seeds at a time: one :func:`play_episodes` per chunk position for every
    member."""
    played: list[list[multiturn.Episode]] = [[] for _ in members]
    for position in groups.positions(groups.chunks(members, len(rows))):
        taking = [members[i] for i, _ in position]
        new = play_episodes(taking, [rows[c] for _, c in position], data, explore=bool(samples),
                            copies=max(samples, 1))  # fmt: skip
        for (i, _), episodes in zip(position, new, strict=True):
            played[i] += episodes
    return played
