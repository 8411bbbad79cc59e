"""A multi-turn game for the tiny model: guess a hidden digit, told "higher" or "lower".

agile plays it through ``environment.entrypoint: configs/training/llm/guess_env.py:GuessDigit``
(with ``environment.env_config`` as keyword arguments), using the same text protocol as
AgileRL's multi-turn environments and GEM's games: ``reset(seed)`` returns the opening message
and an info dict, ``step(reply)`` returns the next message, the turn's reward, whether the
episode ended (terminated, truncated) and an info dict.

The opening says which side of the middle digit the hidden one is (``above 2:``, ``below 2:``
or ``at 2:``). Only the first character of a reply counts. A right guess ends the episode with
reward 1; a wrong one is answered ``higher:`` or ``lower:`` until the turns run out. With five
digits and two turns, a player who reads the messages always wins (at: 2; above: 3, then 4;
below: 1, then 0); one who ignores them wins at most two times in five.
"""

from __future__ import annotations

import random
from typing import Any


class GuessDigit:
    """Guess a digit from 0 to ``size - 1`` in ``max_turns`` tries."""

    def __init__(self, size: int = 5, max_turns: int = 2) -> None:
        self.size = size
        self.max_turns = max_turns
        self.target = 0
        self.turn = 0

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.target = random.Random(seed).randrange(self.size)
        self.turn = 0
        middle = self.size // 2
        side = "above" if self.target > middle else "below" if self.target < middle else "at"
        return f"{side} {middle}:", {}

    def step(self, reply: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turn += 1
        guess = reply.strip()[:1]
        if guess == str(self.target):
            return "yes", 1.0, True, False, {}
        out_of_turns = self.turn >= self.max_turns
        if not guess.isdigit():
            return "a digit:", 0.0, False, out_of_turns, {}
        hint = "higher:" if self.target > int(guess) else "lower:"
        return hint, 0.0, False, out_of_turns, {}
