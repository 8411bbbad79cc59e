"""Prompts and completions as token tensors: rendering chat turns, padding, generating.

Prompts are padded on the left (so that generation continues every row at the same position)
and sequences for a loss are ``prompt + response`` padded on the right. Every function takes
the tokenizer explicitly; none holds state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from agile_llm.objectives import IGNORE


def render(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """Chat turns as the prompt text the model continues.

    With a chat template, the template renders them (continuing a final assistant turn, else
    opening the assistant's); without one, the turns' texts are joined by newlines.
    """
    if getattr(tokenizer, "chat_template", None):
        prefilled = bool(messages) and messages[-1]["role"] == "assistant"
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=not prefilled,
            continue_final_message=prefilled,
        )  # fmt: skip
        return str(text)
    return "\n".join(message["content"] for message in messages)


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text``, without special tokens added (a template writes its own)."""
    return list(tokenizer(text, add_special_tokens=False).input_ids)


@dataclass
class Prompts:
    """A left-padded batch of prompts: ``ids`` and ``mask`` are ``[B, P]``."""

    ids: torch.Tensor
    mask: torch.Tensor


def prompt_batch(tokenizer: Any, prompts: list[list[int]], device: Any) -> Prompts:
    """Left-pad token id lists into one batch."""
    width = max(len(ids) for ids in prompts)
    pad = int(tokenizer.pad_token_id)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, tokens in enumerate(prompts):
        if tokens:
            ids[row, width - len(tokens) :] = torch.tensor(tokens)
            mask[row, width - len(tokens) :] = 1
    return Prompts(ids.to(device), mask.to(device))


@dataclass
class Sequences:
    """Right-padded ``prompt + response`` rows: ``ids``, ``mask`` and ``labels`` (the response
    tokens; prompt and padding are :data:`~agile_llm.objectives.IGNORE`), all ``[B, T]``."""

    ids: torch.Tensor
    mask: torch.Tensor
    labels: torch.Tensor


def sequence_batch(
    tokenizer: Any, pairs: list[tuple[list[int], list[int]]], limit: int, device: Any
) -> Sequences:
    """``(prompt, response)`` id lists as training rows of at most ``limit`` tokens (the
    response's end is cut to leave one prompt token, then the prompt's start)."""
    rows = []
    for prompt, response in pairs:
        response = response[: max(limit - 1, 1)]
        prompt = prompt[-max(limit - len(response), 1) :]
        rows.append((prompt + response, len(prompt)))
    width = max(len(tokens) for tokens, _ in rows)
    pad = int(tokenizer.pad_token_id)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    for row, (tokens, prompt_length) in enumerate(rows):
        ids[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = 1
        labels[row, prompt_length : len(tokens)] = torch.tensor(tokens[prompt_length:])
    return Sequences(ids.to(device), mask.to(device), labels.to(device))


@dataclass
class Completions:
    """Generated continuations of a prompt batch.

    :param ids: ``[N, P + L]`` prompt then completion (padding after the end token).
    :param mask: ``[N, P + L]`` attention mask of ``ids``.
    :param completion: ``[N, P + L]`` True at completion tokens (up to and including the end
        token), the positions a policy-gradient loss counts.
    :param texts: each completion decoded, without special tokens.
    """

    ids: torch.Tensor
    mask: torch.Tensor
    completion: torch.Tensor
    texts: list[str]


def generate(
    model: Any,
    tokenizer: Any,
    prompts: Prompts,
    *,
    max_new_tokens: int,
    min_new_tokens: int | None = None,
    temperature: float | None = None,
    seed: int | None = None,
) -> Completions:
    """Continue every prompt: sampled at ``temperature`` (seeded by ``seed``), or greedily
    when ``temperature`` is None or 0."""
    sample = bool(temperature)
    options: dict[str, Any] = {"do_sample": sample, "max_new_tokens": max(1, max_new_tokens)}
    if sample:
        options.update(temperature=float(temperature or 1.0), top_k=0, top_p=1.0)
        if seed is not None:
            torch.manual_seed(seed)  # transformers samples from torch's global generator
    if min_new_tokens:
        options["min_new_tokens"] = min(min_new_tokens, options["max_new_tokens"])
    with torch.no_grad():
        ids = model.generate(
            input_ids=prompts.ids, attention_mask=prompts.mask,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **options,
        )  # fmt: skip
    return _completions(tokenizer, prompts, ids)


def _completions(tokenizer: Any, prompts: Prompts, ids: torch.Tensor) -> Completions:
    width = prompts.ids.shape[1]
    generated = ids[:, width:]
    ended = generated == tokenizer.eos_token_id
    # A token counts until (and including) the first end token.
    before_end = (ended.long().cumsum(dim=1) - ended.long()) == 0
    completion = torch.zeros_like(ids, dtype=torch.bool)
    completion[:, width:] = before_end
    mask = torch.cat([prompts.mask, before_end.long()], dim=1)
    texts = [
        tokenizer.decode(row[keep], skip_special_tokens=True)
        for row, keep in zip(generated, before_end, strict=True)
    ]
    return Completions(ids, mask, completion, texts)
