"""The reward of the digits task: the share of digits in the right place.

agile calls ``digits_reward(completion, answer, question)`` once per completion, as the
AgileRL's reasoning environment does: the generated text, the row's ``answer`` and its
``question``. Partial credit gives GRPO a signal before a completion is wholly right.
"""


def digits_reward(completion: str, answer: str, question: str) -> float:
    """1.0 for the exact answer; otherwise the share of positions that match, less for
    extra characters."""
    guess = completion.strip()
    if guess == answer:
        return 1.0
    hits = sum(a == b for a, b in zip(guess, answer, strict=False))
    return hits / max(len(answer), len(guess))
