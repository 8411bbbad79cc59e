"""A calculator the tiny model learns to use: two-digit sums it cannot do itself.

agile plays it through ``environment.entrypoint:
configs/training/llm/calculator_env.py:Calculator`` with ``answer_tool: answer``. The opening
is a sum such as ``47+85``. The environment offers one tool, ``add(a, b)``; the model calls it
in its family's format (the tiny model is a Qwen2, so ``<tool_call>{"name": "add", "arguments":
{"a": 47, "b": 85}}</tool_call>``), reads the result agile sends back as a tool message (the
sum right-aligned in eight characters: the tiny model was pretrained to copy strings of
eight), and answers in prose, which goes to the ``answer`` tool. A right answer ends the
episode with reward 1; anything else scores 0. A model that copies the operands into the call
and the result into its answer always wins; one that skips the tool has about one chance in
110 of guessing.

Run as a script, it writes the demonstrations the SFT stage learns the format from
(``configs/training/llm/calculator_sft.jsonl``): both turns of an episode as prompt and
response, tokenised as agile writes a transcript for a model without a chat template (a reply,
its end token, a new line and the tool's result). Run it from the repository's root.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "The sum of two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


class Calculator:
    """Sums of two numbers from ``low`` to ``high``, with an ``add`` tool."""

    tools = [ADD]

    def __init__(self, low: int = 10, high: int = 99, max_turns: int = 2) -> None:
        self.low, self.high, self.max_turns = low, high, max_turns
        self.a = self.b = 0

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        draw = random.Random(seed)
        self.a, self.b = draw.randint(self.low, self.high), draw.randint(self.low, self.high)
        return f"{self.a}+{self.b}", {}

    def call_tool(
        self, name: str, arguments: dict[str, Any]
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if name == "answer":
            said = str(arguments.get("message", "")).strip()
            return "done", float(said == str(self.a + self.b)), True, False, {}
        if name != "add":
            return f"no tool {name!r}", 0.0, False, False, {}
        a, b = arguments.get("a"), arguments.get("b")
        if not (isinstance(a, int) and isinstance(b, int)):
            return "add takes two integers", 0.0, False, False, {}
        return result_text(a + b), 0.0, False, False, {}


def result_text(total: int) -> str:
    """What ``add`` answers: the sum, right-aligned in eight characters (the tiny model was
    pretrained to copy strings of eight)."""
    return f"{total:>8}"


def call_text(a: int, b: int) -> str:
    """The tool call a Qwen-family model writes for ``add(a, b)``."""
    return f'<tool_call>{{"name":"add","arguments":{{"a":{a},"b":{b}}}}}</tool_call>'


def demonstrations(count: int, seed: int) -> list[dict[str, str]]:
    """``count`` episodes played right, each as its two turns (prompt and response)."""
    env, draw, rows = Calculator(), random.Random(seed), []
    for _ in range(count):
        opening, _ = env.reset(draw.randrange(1 << 31))
        call, total = call_text(env.a, env.b), result_text(env.a + env.b)
        rows.append({"prompt": opening, "response": call})
        rows.append({"prompt": f"{opening}{call}</s>\n{total}", "response": total})
    return rows


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "configs/training/llm/calculator_sft.jsonl")
    with target.open("w", encoding="utf-8") as out:
        for row in demonstrations(400, seed=7):
            out.write(json.dumps(row) + "\n")
