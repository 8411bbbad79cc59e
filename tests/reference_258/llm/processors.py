"""The observation and action processors of ``grpo_guess_digit_processors.yaml`` (agilerl 2.58).

2.58 imports each from its ``module:fn`` entrypoint. The observation processor receives the
observation as a mapping of its fields (the env's text under ``prompt``, its info dict under
``metadata``) and returns the prompt text; the action processor receives the model's text
after any ``</think>`` and returns what the env is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def render_observation(payload: Mapping[str, Any]) -> str:
    """The env's message, followed by the turns left when the env reports them."""
    text = str(payload.get("prompt") or "")
    metadata = payload.get("metadata") or {}
    left = metadata.get("turns_left") if isinstance(metadata, Mapping) else None
    return text if left is None else f"{text} (turns left: {left})"


def first_digit(text: str) -> str:
    """The first digit of the reply, or the reply stripped when it has none."""
    return next((char for char in text if char.isdigit()), text.strip())
