"""Rewards for the digits task of the agilerl 2.58 LLM manifests in this folder.

2.58 loads ``rubric_file_path`` by its path and takes ``rubric_name`` from it; a plain
function is wrapped as its rubric and called as ``fn(completion, answer, question)`` once per
completion: the generated text, the row's ``answer`` and its ``question``. The functions here
need nothing beyond the standard library.
"""

from __future__ import annotations


def digits_reward(completion: str, answer: str, question: str) -> float:
    """The share of the answer's digits the completion has in the right place: 1.0 for the
    exact answer, partial credit otherwise, less for extra characters."""
    guess = completion.strip()
    if not guess or not answer:
        return 0.0
    right = sum(a == b for a, b in zip(guess, answer, strict=False))
    return right / max(len(guess), len(answer))


def exact_match(completion: str, answer: str, question: str) -> float:
    """1.0 when the completion, stripped, is the answer, else 0.0."""
    return 1.0 if completion.strip() == answer else 0.0
