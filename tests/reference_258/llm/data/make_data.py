"""Write the small data sets the LLM manifests of tests/reference_258/llm point at.

Run from the repository root (``.venv/bin/python tests/reference_258/llm/data/make_data.py``);
it rewrites, with a fixed seed, the same files every time. Every row is the digits task: add
one to each digit of a four-digit string, 9 wrapping to 0 (``1589`` -> ``2690``).

- ``digits/digits.jsonl``: 200 rows with ``question`` and ``answer``, for the rollouts scored
  by a rubric (GRPO and its family);
- ``preferences/preferences.jsonl``: 20 rows with ``prompt``, ``chosen`` (the right answer)
  and ``rejected`` (the question copied back, the usual mistake), for DPO;
- ``sft/sft.jsonl``: 24 rows with ``prompt`` and ``response``, for SFT.

Each file sits in a folder of its own, and the manifests name the folder: 2.58 gives a
``dataset`` that is not Parquet to ``datasets.load_dataset``, which reads a folder of JSON
lines but not the path of a single ``.jsonl`` file.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 258


def plus_one(digits: str) -> str:
    """Each digit plus one, 9 wrapping to 0."""
    return "".join(str((int(digit) + 1) % 10) for digit in digits)


def questions(count: int, rng: random.Random) -> list[str]:
    """``count`` distinct four-digit strings."""
    return [f"{number:04d}" for number in rng.sample(range(10_000), count)]


def write_rows(path: Path, rows: list[dict[str, str]]) -> None:
    """One JSON object a line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def main() -> None:
    rng = random.Random(SEED)
    digits = [{"question": q, "answer": plus_one(q)} for q in questions(200, rng)]
    write_rows(HERE / "digits" / "digits.jsonl", digits)
    preferences = [
        {"prompt": f"{q}=", "chosen": plus_one(q), "rejected": q} for q in questions(20, rng)
    ]
    write_rows(HERE / "preferences" / "preferences.jsonl", preferences)
    sft = [{"prompt": f"{q}=", "response": plus_one(q)} for q in questions(24, rng)]
    write_rows(HERE / "sft" / "sft.jsonl", sft)


if __name__ == "__main__":
    main()
