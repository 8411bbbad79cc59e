"""A small multi-turn text game for the agilerl 2.58 LLM manifests in this folder: find a
hidden digit, told "higher" or "lower" after each wrong guess.

2.58 builds it from ``environment.entrypoint`` (``tests.reference_258.llm.guess_digit:
GuessDigit``, which it finds as this file relative to the working directory) with
``environment.env_config`` as keyword arguments, and drives it through the plain text
protocol: ``reset(seed)`` returns the opening message and an info dict; ``step(text)``
returns the next message, the turn's reward, whether the episode ended or ran out of turns,
and an info dict.
"""

from __future__ import annotations

import random
from typing import Any


class GuessDigit:
    """Guess a digit from ``low`` to ``high`` (inclusive) in at most ``max_turns`` replies.

    A right guess scores 1 and ends the episode; the info dict says how many turns are left.
    """

    def __init__(self, low: int = 0, high: int = 9, max_turns: int = 4) -> None:
        self.low = low
        self.high = high
        self.max_turns = max_turns
        self.hidden = low
        self.turns = 0

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.hidden = random.Random(seed).randint(self.low, self.high)
        self.turns = 0
        return f"Guess a digit from {self.low} to {self.high}.", self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turns += 1
        guess = next((char for char in action if char.isdigit()), None)
        if guess is not None and int(guess) == self.hidden:
            return "Correct.", 1.0, True, False, self._info()
        out_of_turns = self.turns >= self.max_turns
        if guess is None:
            return "Reply with one digit.", 0.0, False, out_of_turns, self._info()
        hint = "Higher." if self.hidden > int(guess) else "Lower."
        return hint, 0.0, False, out_of_turns, self._info()

    def _info(self) -> dict[str, Any]:
        return {"turns_left": self.max_turns - self.turns}
