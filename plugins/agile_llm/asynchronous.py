"""Asynchronous rollouts (``training.rollout_mode: async``): while the population learns from
one iteration's completions, a copy of its model samples the next iteration's in a thread.

The copy (:class:`Generator`) holds the base model and every member's adapter a second time;
its adapters are synchronised from the training ones every ``weight_sync_interval`` updates,
so the completions a member learns from were sampled by its adapter as it was at most that many
updates before (never more than ``replay_buffer.max_rollout_version_lag``: a smaller lag
synchronises more often, and a lag of 0 samples after each update, without overlap). The copy
also gives the completions' log-probabilities at sampling, so the importance ratio and the
off-policy masks compare the learning adapter with the one that sampled (2.58's
``old_logprobs_source: rollout``). The user's rubric runs in the training thread, as it does in
colocated training; only the model's own computation runs in the other.

What it costs: a second copy of the base model's weights, and runs that are not repeatable
draw for draw (the two threads share torch's random generator). What it gains where
generation and learning each leave cores idle: ``benchmarks/llm_async.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from agile_llm import text


class Generator:
    """A copy of a population's adapters over a copy of its base model, that samples.

    :param adapters: the training :class:`~agile_llm.adapters.AdapterPopulation`, copied.
    """

    def __init__(self, adapters: Any) -> None:
        self.adapters = copy.deepcopy(adapters)
        self.version = -1  # the training update its adapters were synchronised at

    def sync(self, members: Sequence[Any], version: int) -> None:
        """Make the copy's adapters the members' as they are now (adapters that came or went
        with selection come and go here too)."""
        names = {member.adapter for member in members}
        for name in [n for n in self.adapters.names if n not in names]:
            self.adapters.remove(name)
        for member in members:
            if member.adapter not in self.adapters.names:
                self.adapters.add(member.adapter)
            weights = member.shared.adapters.weights(member.adapter)
            self.adapters.load_weights(member.adapter, weights)
        self.version = version

    def generate(
        self, tokenizer: Any, prompts: list[list[int]], owners: list[Any], *, device: Any,
        max_new_tokens: int, min_new_tokens: int | None, sampling: text.Sampling | None,
        seed: int | None, constraint: Any = None,
    ) -> text.Completions:  # fmt: skip
        """Continue every prompt, row ``i`` through member ``owners[i]``'s adapter (as the
        vLLM engine's ``generate`` does), held to ``constraint``."""
        batch = text.prompt_batch(tokenizer, prompts, device)
        with self.adapters.routed([owner.adapter for owner in owners]), torch.no_grad():
            return text.generate(self.adapters.model.eval(), tokenizer, batch,
                                 max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                                 sampling=sampling, seed=seed, constraint=constraint)  # fmt: skip

    def sampling_log_probs(
        self, members: Sequence[Any], done: Sequence[text.Completions]
    ) -> list[torch.Tensor]:
        """Each member's completions' log-probabilities under the adapter that sampled them,
        ``[N, T - 1]`` as the training pass gives them."""
        batches = [text.Sequences(d.ids, d.mask, d.ids.masked_fill(~d.completion, -100))
                   for d in done]  # fmt: skip
        return self.log_probs(members, batches)

    def log_probs(
        self, members: Sequence[Any], batches: Sequence[text.Sequences]
    ) -> list[torch.Tensor]:
        """Each member's labelled tokens' log-probabilities in its ``batches`` (completions,
        or episodes' transcripts) under the copy of its adapter, as the training pass gives
        them."""
        found = []
        with torch.no_grad():
            for member, batch in zip(members, batches, strict=True):
                with self.adapters.routed([member.adapter] * int(batch.ids.shape[0])):
                    model = self.adapters.model.eval()
                    found.append(text.labelled_log_probs(model, batch, member.sampled_at()))
        return found


class Pipeline:
    """Iterations whose sampling runs one ahead of learning, in a thread.

    :param generator: the copy that samples.
    :param interval: updates between synchronisations of the copy's adapters.
    :param overlap: sample ahead (False: sample each iteration after the update before it,
        with the adapters synchronised: a lag of 0).
    """

    def __init__(self, generator: Generator, interval: int, overlap: bool) -> None:
        self.generator, self.interval, self.overlap = generator, max(interval, 1), overlap
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agile-rollouts")
        self.lags: list[int] = []

    def run(
        self, members: Sequence[Any], plans: list[Any], sample: Callable[[Any], Any],
        learn: Callable[[Any, Any], None],
    ) -> None:  # fmt: skip
        """For each of ``plans`` (an iteration's members and rows), ``sample(plan)`` by the
        copy, then ``learn(plan, sampled)``; the next plan is sampled while one learns."""
        self.generator.sync(members, 0)
        pending: Future[Any] | None = None
        for update, plan in enumerate(plans):
            if pending is None:
                self._synced(members, update, force=not self.overlap)
                pending = self._pool.submit(sample, plan)
            sampled = pending.result()
            self.lags.append(update - self.generator.version)
            pending = None
            if self.overlap and update + 1 < len(plans):
                self._synced(members, update, force=False)
                pending = self._pool.submit(sample, plans[update + 1])
            learn(plan, sampled)

    def _synced(self, members: Sequence[Any], update: int, *, force: bool) -> None:
        if force or update - self.generator.version >= self.interval:
            self.generator.sync(members, update)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
