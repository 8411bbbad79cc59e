"""The LLM algorithms: what one member does with a batch of prompts, and how it is scored.

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

from typing import Any, TypeVar

import numpy as np
import torch

from agile_llm import multiturn, objectives, text, together
from agile_llm.objectives import IGNORE
from agile_llm.population import LLMMember, Scores
from agile_llm.text import log_probs

T = TypeVar("T")

#: Held-out outputs shown by ``agile evaluate``.
SAMPLES = 3
#: ``importance_sampling_level`` values that take one ratio per completion.
SEQUENCE_LEVELS = ("sequence", "trajectory", "turn")


def _scaled(loss: torch.Tensor, rows: slice, total: int) -> torch.Tensor:
    """A micro-batch's share of the batch's mean loss."""
    return loss * ((rows.stop - rows.start) / total)


class SFT(LLMMember):
    """Supervised fine-tuning on (prompt, response) rows; the prompt tokens are masked."""

    def _sequences(self, rows: list[dict[str, Any]], data: Any) -> text.Sequences:
        prompts = self._prompts(rows, data)
        end = [self.tokenizer.eos_token_id]
        responses = [ids + end for ids in self._responses([data.response(r) for r in rows])]
        return text.sequence_batch(
            self.tokenizer, list(zip(prompts, responses, strict=True)),
            self.shared.context_length, self.device,
        )  # fmt: skip

    def _prompts(self, rows: list[dict[str, Any]], data: Any) -> list[list[int]]:
        """Each row's prompt tokens, as many of its last ones as a training row can hold."""
        return self.prompt_ids(self.render_prompts(rows, data), self.shared.context_length)

    def _responses(self, targets: list[str]) -> list[list[int]]:
        """Each target's tokens, as many of its first ones as a training row can hold."""
        return text.encode_all(self.tokenizer, targets, self.shared.context_length)

    def _loss(self, model: Any, batch: text.Sequences, rows: slice) -> torch.Tensor:
        ids, mask = batch.ids[rows], batch.mask[rows]
        positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        return objectives.sft_loss(logits, batch.labels[rows])

    @classmethod
    def train_together(
        cls, members: list[LLMMember], rows: list[list[dict[str, Any]]], data: Any
    ) -> list[float] | None:
        """Every member's :meth:`train_step` as one computation (see :mod:`.together`)."""
        if cls is not SFT or not together.can_stack(members):
            return None  # DPO inherits SFT's sequences, not its loss
        return together.sft_step(members, rows, data)  # type: ignore[arg-type]

    def train_step(self, rows: list[dict[str, Any]], data: Any) -> float:
        batch = self._sequences(rows, data)
        model = self.model().train()
        loss = torch.zeros((), device=self.device)
        for _ in range(self.spec.update_epochs):
            total = torch.zeros((), device=self.device)
            for part in self.micro_batches(len(rows)):
                loss = _scaled(self._loss(model, batch, part), part, len(rows))
                loss.backward()
                total += loss.detach()
            self.step()
            loss = total
        return float(loss)

    def score(self, rows: list[dict[str, Any]], data: Any) -> Scores:
        model = self.model().eval()
        losses = []
        with torch.no_grad():
            for chunk in _chunks(rows, self.spec.batch_size):
                losses.append(float(self._loss(model, self._sequences(chunk, data), slice(None))))
        return self._scores(losses, self._greedy(rows, data), rows, data)

    @classmethod
    def score_together(
        cls, members: list[LLMMember], rows: list[dict[str, Any]], data: Any
    ) -> list[Scores] | None:
        """Every member's :meth:`score` as one computation (see :mod:`.together`)."""
        if cls is not SFT or not together.can_stack(members):
            return None
        losses = together.sft_losses(members, rows, data)  # type: ignore[arg-type]
        outputs = together.greedy(members, rows, data)
        return [m._scores(loss, out, rows, data)  # type: ignore[attr-defined]
                for m, loss, out in zip(members, losses, outputs, strict=True)]  # fmt: skip

    def _scores(
        self, losses: list[float], outputs: list[str], rows: list[dict[str, Any]], data: Any
    ) -> Scores:
        """The held-out scores of chunk ``losses`` and greedy ``outputs`` of ``rows``."""
        targets = [data.response(r).strip() for r in rows]
        exact = float(np.mean([o.strip() == t for o, t in zip(outputs, targets, strict=True)]))
        loss = float(np.mean(losses))
        return Scores(-loss, {"held-out loss": loss, "exact match": exact},
                      _samples(rows, data, outputs, targets))  # fmt: skip

    def _greedy(self, rows: list[dict[str, Any]], data: Any) -> list[str]:
        outputs: list[str] = []
        for chunk in _chunks(rows, self.spec.batch_size):
            prompts = self.prompt_ids(self.render_prompts(chunk, data))
            outputs += self.complete(prompts, explore=False).texts
        return outputs


class DPO(SFT):
    """Direct preference optimisation on (prompt, chosen, rejected) rows."""

    def _pairs(self, rows: list[dict[str, Any]], data: Any) -> text.Sequences:
        """Chosen rows then rejected rows, one batch."""
        prompts = self._prompts(rows, data)
        end = [self.tokenizer.eos_token_id]
        chosen = [ids + end for ids in self._responses([data.chosen(r) for r in rows])]
        rejected = [ids + end for ids in self._responses([data.rejected(r) for r in rows])]
        pairs = list(zip(prompts + prompts, chosen + rejected, strict=True))
        return text.sequence_batch(self.tokenizer, pairs, self.shared.context_length, self.device)

    def _summed(self, model: Any, batch: text.Sequences, rows: torch.Tensor) -> torch.Tensor:
        values, _counted = log_probs(model, batch.ids[rows], batch.mask[rows], batch.labels[rows])
        return values.sum(dim=1)

    def _preference(self, model: Any, batch: text.Sequences, part: slice, n: int) -> Any:
        rows = torch.arange(part.start or 0, part.stop if part.stop is not None else n)
        both = torch.cat([rows, rows + n])
        with torch.no_grad(), self.shared.reference():
            reference = self._summed(model, batch, both)
        policy = self._summed(model, batch, both)
        return self.pair_loss(policy, reference, batch.labels[rows])

    def pair_loss(self, policy: torch.Tensor, reference: torch.Tensor, chosen: torch.Tensor) -> Any:
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
    def train_together(
        cls, members: list[LLMMember], rows: list[list[dict[str, Any]]], data: Any
    ) -> list[float] | None:
        """Every member's :meth:`train_step` as one computation (see :mod:`.together`)."""
        if not together.can_stack(members):
            return None
        return together.dpo_step(members, rows, data)  # type: ignore[arg-type]

    def train_step(self, rows: list[dict[str, Any]], data: Any) -> float:
        batch = self._pairs(rows, data)
        model = self.model().train()
        loss = 0.0
        for _ in range(self.spec.update_epochs):
            loss = 0.0
            for part in self.micro_batches(len(rows)):
                result = self._preference(model, batch, part, len(rows))
                scaled = _scaled(result.loss, part, len(rows))
                scaled.backward()
                loss += float(scaled.detach())
            self.step()
        return loss

    def score(self, rows: list[dict[str, Any]], data: Any) -> Scores:
        model = self.model().eval()
        results = []
        with torch.no_grad():
            for chunk in _chunks(rows, self.spec.batch_size):
                result = self._preference(model, self._pairs(chunk, data), slice(0, len(chunk)),
                                          len(chunk))  # fmt: skip
                results.append((result, len(chunk)))
        return self._preference_scores(results, self._greedy(rows[:SAMPLES], data), rows, data)

    @classmethod
    def score_together(
        cls, members: list[LLMMember], rows: list[dict[str, Any]], data: Any
    ) -> list[Scores] | None:
        """Every member's :meth:`score` as one computation (see :mod:`.together`)."""
        if not together.can_stack(members):
            return None
        results = together.dpo_results(members, rows, data)  # type: ignore[arg-type]
        outputs = together.greedy(members, rows[:SAMPLES], data)
        return [m._preference_scores(r, out, rows, data)  # type: ignore[attr-defined]
                for m, r, out in zip(members, results, outputs, strict=True)]  # fmt: skip

    def _preference_scores(
        self, results: list[tuple[Any, int]], outputs: list[str], rows: list[dict[str, Any]],
        data: Any,
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

    def policy_loss(self, current: torch.Tensor, old: torch.Tensor, reference: torch.Tensor,
                    advantage: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """The loss of ``[N, T]`` log-probabilities now, at sampling and under the reference,
        per-token advantages and the counted tokens: PPO's clip per token, or per completion
        with ``importance_sampling_level: sequence``."""
        level = getattr(self.spec, "importance_sampling_level", None)
        loss = objectives.gspo_loss if level in SEQUENCE_LEVELS else objectives.clipped_token_loss
        if level in SEQUENCE_LEVELS:
            advantage = advantage[:, 0]
        return loss(current, old, reference, advantage, counted, **self._bounds())

    def _bounds(self) -> dict[str, float]:
        low, high = self.clip_range()
        return {"clip_low": low, "clip_high": high, "beta": float(getattr(self.spec, "beta", 0.0))}

    def clip_range(self) -> tuple[float, float]:
        """The importance ratio's bounds: ``1 -/+ clip_coef``, or ``clip_coef`` as
        ``[low, high]``."""
        clip = self.spec.clip_coef
        if isinstance(clip, list | tuple):
            return float(clip[0]), float(clip[1])
        return 1.0 - float(clip), 1.0 + float(clip)

    def group(self) -> int:
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

    def train_step(self, rows: list[dict[str, Any]], data: Any) -> float:
        rollout = self._rollout(rows, data)
        if rollout is None:
            return 0.0
        model = self.model().train()
        loss = 0.0
        for _ in range(self.spec.update_epochs):
            loss = 0.0
            for part in self.micro_batches(rollout["ids"].shape[0]):
                piece = _scaled(self._loss(model, rollout, part), part, rollout["ids"].shape[0])
                piece.backward()
                loss += float(piece.detach())
            self.step()
        return loss

    @classmethod
    def train_together(
        cls, members: list[LLMMember], rows: list[list[dict[str, Any]]], data: Any
    ) -> list[float] | None:
        """Every member's :meth:`train_step` as one computation (see :mod:`.together`), for
        the algorithms that sample, score and learn as GRPO does (not LLMPPO's critic)."""
        own_rollout = cls._rollout is not GRPO._rollout or cls._loss is not GRPO._loss
        if own_rollout or not together.can_sample_together(members):
            return None
        return together.grpo_step(members, rows, data)  # type: ignore[arg-type]

    def _rollout(self, rows: list[dict[str, Any]], data: Any) -> dict[str, Any] | None:
        """Sample, score and log-prob ``group_size`` completions of every prompt (episodes
        of every seed, for a multi-turn environment)."""
        if data.env_type == "multiturn":
            rollout = self.episodes_rollout(self.play(rows, data, explore=True))
        else:
            rendered = self.render_prompts(rows, data)
            prompts = self.prompt_ids(rendered)
            self.model().eval()
            group = self.group()
            done = self.complete([p for p in prompts for _ in range(group)], explore=True)
            rollout = self._rollout_of(done, rows, rendered, data)
        if rollout is None:
            return None
        model = self.model()
        ids, mask, labels = rollout["ids"], rollout["mask"], rollout["labels"]
        with torch.no_grad():
            rollout["old"] = rollout["reference"] = log_probs(model, ids, mask, labels)[0]
            if float(getattr(self.spec, "beta", 0.0)) > 0:
                with self.shared.reference():
                    rollout["reference"] = log_probs(model, ids, mask, labels)[0]
        return rollout

    def _rollout_of(
        self, done: text.Completions, rows: list[dict[str, Any]], rendered: list[str], data: Any
    ) -> dict[str, Any] | None:
        """The sampled completions of ``rows`` (``group_size`` each, in order) scored, with
        their advantages: a rollout without its log-probabilities yet; None when every
        advantage is zero and ``filter_zero_adv`` drops them all."""
        group = self.group()
        repeated = [r for r in rows for _ in range(group)]
        prompt_texts = [p for p in rendered for _ in range(group)]
        rewards = torch.as_tensor(data.reward(done.texts, repeated, prompt_texts),
                                  dtype=torch.float32, device=self.device)  # fmt: skip
        self.last_rewards = rewards
        labels = done.ids.masked_fill(~done.completion, IGNORE)
        rollout = {"ids": done.ids, "mask": done.mask, "labels": labels,
                   "advantage": self.advantages(rewards)}  # fmt: skip
        return self._kept(rollout)

    def _kept(self, rollout: dict[str, Any]) -> dict[str, Any] | None:
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

    # -- multi-turn environments -----------------------------------------------------------

    def play(
        self, rows: list[dict[str, Any]], data: Any, *, explore: bool
    ) -> list[multiturn.Episode]:
        """Episodes of a multi-turn environment, one per row's seed (``group_size`` each when
        exploring), sampled at the member's temperature or greedy."""
        group = self.group() if explore else 1
        seeds = [(int(row["seed"]), 0) for row in rows for _ in range(group)]

        def generate(prompts: list[list[int]], owners: list[int]) -> text.Completions:
            self.model().eval()
            return self.complete(prompts, explore=explore)

        return multiturn.play(data, seeds, self.conversation(data), generate,
                              context=self.shared.context_length,
                              reply_room=self.output_tokens())  # fmt: skip

    def conversation(self, data: Any) -> multiturn.Conversation:
        """How this member's episodes are written as tokens."""
        return multiturn.Conversation(self.tokenizer, data.chat_prompts, data.strict_boundary,
                                      lambda prompt: self.prompt_ids([prompt])[0])  # fmt: skip

    def episodes_rollout(self, episodes: list[multiturn.Episode]) -> dict[str, Any] | None:
        """Played episodes (``group_size`` consecutive ones per seed) as a rollout: each
        transcript's generated tokens trained with its return's group-relative advantage, or,
        with ``advantage_granularity: turn``, with each turn's return-to-go's."""
        pad = int(self.tokenizer.pad_token_id)
        batch = multiturn.transcripts(episodes, pad, self.device)
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
        return self._kept(rollout)

    def _episode_scores(self, episodes: list[multiturn.Episode], data: Any) -> Scores:
        metrics = multiturn.summary(episodes, data)
        shown = [multiturn.shown(e) for e in episodes[:SAMPLES]]
        return Scores(metrics["mean return"], metrics, shown)

    def _loss(self, model: Any, rollout: dict[str, Any], part: slice) -> torch.Tensor:
        current, _ = log_probs(model, rollout["ids"][part], rollout["mask"][part],
                               rollout["labels"][part])  # fmt: skip
        return self._policy_loss(rollout, current, part)

    def _policy_loss(
        self, rollout: dict[str, Any], current: torch.Tensor, part: slice = slice(None)
    ) -> torch.Tensor:
        """The loss of the rollout's rows ``part``, given their log-probabilities now."""
        counted = rollout["counted"][part]
        if "token_advantage" in rollout:  # each turn's own, in a multi-turn episode
            advantage = rollout["token_advantage"][part]
        else:
            advantage = self.token_advantages(rollout["advantage"][part], counted)
        return self.policy_loss(current, rollout["old"][part], rollout["reference"][part],
                                advantage, counted)  # fmt: skip

    def score(self, rows: list[dict[str, Any]], data: Any) -> Scores:
        if data.env_type == "multiturn":
            episodes: list[multiturn.Episode] = []
            for part in _chunks(rows, self.spec.batch_size):
                episodes += self.play(part, data, explore=False)
            return self._episode_scores(episodes, data)
        self.model().eval()
        outputs: list[str] = []
        rendered = self.render_prompts(rows, data)
        for chunk in _chunks(rendered, self.spec.batch_size):
            outputs += self.complete(self.prompt_ids(chunk), explore=False).texts
        return self._scores(outputs, rows, rendered, data)

    @classmethod
    def score_together(
        cls, members: list[LLMMember], rows: list[dict[str, Any]], data: Any
    ) -> list[Scores] | None:
        """Every member's :meth:`score` as one computation (see :mod:`.together`)."""
        if not together.can_sample_together(members):
            return None
        if data.env_type == "multiturn":
            played: list[list[multiturn.Episode]] = [[] for _ in members]
            for chunk in _chunks(rows, members[0].spec.batch_size):
                new = together.play(members, [chunk] * len(members), data, explore=False)
                for own, episodes in zip(played, new, strict=True):
                    own += episodes
            return [m._episode_scores(e, data)  # type: ignore[attr-defined]
                    for m, e in zip(members, played, strict=True)]  # fmt: skip
        rendered = members[0].render_prompts(rows, data)
        outputs = together.greedy(members, rows, data, rendered)
        return [m._scores(out, rows, rendered, data)  # type: ignore[attr-defined]
                for m, out in zip(members, outputs, strict=True)]  # fmt: skip

    def _scores(
        self, outputs: list[str], rows: list[dict[str, Any]], rendered: list[str], data: Any
    ) -> Scores:
        """The held-out scores of the greedy ``outputs`` of ``rows`` (prompts ``rendered``)."""
        rewards = [float(r) for r in data.reward(outputs, rows, rendered)]
        metrics = {"mean reward": float(np.mean(rewards))}
        accuracy = data.accuracy(np.asarray(rewards))
        if accuracy is not None:
            metrics["accuracy"] = float(accuracy)
        targets = [str(data.answer(r)) for r in rows]
        return Scores(metrics["mean reward"], metrics, _samples(rows, data, outputs, targets))


class GSPO(GRPO):
    """GRPO with the importance ratio and its clip taken per completion (sequence level)."""

    def policy_loss(self, current: torch.Tensor, old: torch.Tensor, reference: torch.Tensor,
                    advantage: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:  # fmt: skip
        return objectives.gspo_loss(current, old, reference, advantage[:, 0], counted,
                                    **self._bounds())  # fmt: skip


class CISPO(GRPO):
    """GRPO's sampling and advantages with CISPO's clipped importance-sampling weights."""

    def policy_loss(self, current: torch.Tensor, old: torch.Tensor, reference: torch.Tensor,
                    advantage: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:  # fmt: skip
        return objectives.cispo_loss(current, old, reference, advantage[:, 0], counted,
                                     **self._bounds())  # fmt: skip


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


def _chunks(items: list[T], size: int) -> list[list[T]]:
    return [items[start : start + size] for start in range(0, len(items), max(1, size))]


def _samples(
    rows: list[dict[str, Any]], data: Any, outputs: list[str], targets: list[str]
) -> list[tuple[str, str, str]]:
    shown = []
    for row, output, target in list(zip(rows, outputs, targets, strict=False))[:SAMPLES]:
        prompt = " | ".join(turn["content"] for turn in data.messages(row))
        shown.append((prompt, output, target))
    return shown
