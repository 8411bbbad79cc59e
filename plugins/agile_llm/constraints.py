"""What a turn may generate: ``thinking_token_budget``, ``constrain_answer_pattern`` and
``answer_continuation`` (agilerl 2.58's fields, which it applies through vLLM), applied to
transformers' generation as a logits processor.

- ``thinking_token_budget: N``: a completion may spend N tokens before it closes its reasoning
  with ``</think>``; at N without it, the turn ends there (its end token is forced), or, with
  ``answer_continuation``, ``</think>`` is forced and the answer follows.
- ``constrain_answer_pattern``: a regular expression the turn's text must match whole (with a
  reasoning budget and ``answer_continuation``, the text after ``</think>``): each step only
  tokens that keep a partial match are allowed, and the end token only once the text matches.

The pattern is held to partial matches by the ``regex`` package (Python's ``re`` has none).
Each step checks every token of a vocabulary of up to :data:`FULL_SCAN` tokens; a larger one's
:data:`SHORTLIST` likeliest tokens first, then the rest only where none of those fits (vLLM
compiles the grammar instead).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch

THINK_END = "</think>"
FULL_SCAN = 4096
SHORTLIST = 512


@dataclass(frozen=True)
class Constraint:
    """A turn's limits: the reasoning budget (None: none), the answer's pattern (None: none),
    and whether the answer follows a spent budget."""

    budget: int | None = None
    pattern: str | None = None
    continuation: bool = False

    @classmethod
    def of(cls, spec: Any) -> Constraint | None:
        """The algorithm section's, or None where it sets none."""
        budget = getattr(spec, "thinking_token_budget", None)
        pattern = getattr(spec, "constrain_answer_pattern", None)
        if budget is None and pattern is None:
            return None
        return cls(budget, pattern, bool(getattr(spec, "answer_continuation", False)))

    def processor(self, tokenizer: Any, prompt_width: int) -> Any:
        """A transformers ``LogitsProcessor`` that holds a batch's completions (after column
        ``prompt_width``) to this constraint."""
        from transformers import LogitsProcessor

        constraint = self
        vocabulary = _token_texts(tokenizer)
        close = list(tokenizer(THINK_END, add_special_tokens=False).input_ids)

        class Constrained(LogitsProcessor):
            def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
                for row in range(input_ids.shape[0]):
                    made = input_ids[row, prompt_width:].tolist()
                    allowed = constraint.allowed(tokenizer, vocabulary, close, made, scores[row])
                    if allowed is not None:
                        kept = torch.full_like(scores[row], float("-inf"))
                        kept[allowed] = scores[row, allowed]
                        if not bool(torch.isfinite(kept).any()):  # another processor ruled
                            kept[allowed] = 0.0  # them all out (a minimum length): ours win
                        scores[row] = kept
                return scores

        return Constrained()

    def allowed(
        self, tokenizer: Any, vocabulary: list[str], close: list[int], made: list[int],
        scores: torch.Tensor,
    ) -> list[int] | None:  # fmt: skip
        """The tokens that may come next after ``made`` (None: any)."""
        end = int(tokenizer.eos_token_id)
        if end in made:  # finished: what follows is padding
            return None
        said = tokenizer.decode(made, skip_special_tokens=False)
        _thinking, closed, answer = said.partition(THINK_END)
        if self.budget is not None and not closed:
            if len(made) >= self.budget:
                if not self.continuation:
                    return [end]
                return [close[_forced(made, close)]]
            return None
        if self.pattern is None:
            return None
        text = answer if (self.budget is not None and closed) else said
        return _fitting(self.pattern, text, vocabulary, end, scores)


def _forced(made: list[int], close: list[int]) -> int:
    """How many of ``close``'s tokens already end ``made`` (its next one is forced)."""
    for length in range(min(len(close) - 1, len(made)), 0, -1):
        if made[-length:] == close[:length]:
            return length
    return 0


def _token_texts(tokenizer: Any) -> list[str]:
    """Each token's text as a continuation (special tokens: none, so they never fit), worked
    out once per tokenizer."""
    known = _TEXTS.get(tokenizer)
    if known is None:
        special = set(getattr(tokenizer, "all_special_ids", None) or [])
        known = ["" if i in special else tokenizer.decode([i]) for i in range(len(tokenizer))]
        _TEXTS[tokenizer] = known
    return known


_TEXTS: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()


def _fitting(
    pattern: str, text: str, vocabulary: list[str], end: int, scores: torch.Tensor
) -> list[int]:
    """The tokens that keep ``text`` a partial match of ``pattern`` (the end token where it
    matches whole); the end token alone where nothing fits."""
    import regex

    compiled = regex.compile(pattern)
    fits = [end] if compiled.fullmatch(text) is not None else []

    def scan(tokens: list[int]) -> list[int]:
        return [t for t in tokens if t < len(vocabulary) and vocabulary[t]
                and compiled.fullmatch(text + vocabulary[t], partial=True) is not None]  # fmt: skip

    size = int(scores.shape[-1])
    if size <= FULL_SCAN:
        fits += scan(list(range(size)))
    else:
        likely = torch.topk(scores, SHORTLIST).indices.tolist()
        found = scan(likely)
        fits += found or scan([t for t in range(size) if t not in set(likely)])
    return fits or [end]
