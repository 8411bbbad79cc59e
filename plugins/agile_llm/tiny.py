"""A tiny causal language model and character tokenizer, made locally.

Nothing is downloaded: the tokenizer (every printable ASCII character is a token) is built with
the ``tokenizers`` library and the model is a two-layer Qwen2 initialised at random, then
trained in full for a few hundred steps to copy its input. That pretraining matters: LoRA
adapters over a purely random frozen base do not learn. Both are saved with
``save_pretrained``, so ``transformers`` (and agile's LLM manifests) load the folder like any
hub checkpoint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ("<pad>", "<unk>", "<s>", "</s>")
CHARACTERS = tuple(chr(code) for code in range(32, 127))


@dataclass(frozen=True)
class TinyModelReport:
    """What :func:`make_tiny_model` built and how its pretraining went."""

    path: Path
    parameters: int
    vocabulary: int
    first_loss: float
    copy_loss: float
    seconds: float


def character_tokenizer() -> Any:
    """A fast tokenizer with one token per printable ASCII character and the special tokens
    ``<pad>``, ``<unk>``, ``<s>`` and ``</s>``; a newline, tab or carriage return reads as a
    space."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    vocabulary = {token: index for index, token in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    # A BPE model without merges splits text into characters; Fuse joins them back unspaced.
    core = Tokenizer(models.BPE(vocab=vocabulary, merges=[], unk_token="<unk>"))
    core.normalizer = normalizers.Sequence(
        [normalizers.Replace(blank, " ") for blank in ("\n", "\t", "\r")]
    )
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
        eos_token="</s>",
    )  # fmt: skip


def tiny_config(vocabulary: int, *, hidden: int = 64, layers: int = 2, context: int = 256) -> Any:
    """A Qwen2 configuration of about 80k parameters for a character vocabulary. Its rotary
    positions have no weights: ``context`` bounds transcripts, not what the model holds."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=vocabulary, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=context, tie_word_embeddings=True,
        pad_token_id=0, bos_token_id=2, eos_token_id=3,
    )  # fmt: skip


def make_tiny_model(path: Path, *, steps: int = 300, seed: int = 0) -> TinyModelReport:
    """Build, pretrain (copying random strings of 8 characters) and save the tiny model and its
    tokenizer into ``path``."""
    import torch
    from transformers import Qwen2ForCausalLM

    from agile_llm.model import require_stack

    require_stack()  # offline, and without the libraries' progress bars
    start = time.perf_counter()
    tokenizer = character_tokenizer()
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(tiny_config(len(tokenizer)))
    threads = torch.get_num_threads()
    # One thread: the same weights whatever the machine's core count, and a model this small
    # gains ~10% from two quiet cores but trained 1.2-4x slower on two when the cores were shared.
    torch.set_num_threads(1)
    try:
        first, copy_loss = _pretrain_to_copy(model, len(tokenizer), steps, seed)
    finally:
        torch.set_num_threads(threads)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    parameters = sum(p.numel() for p in model.parameters())
    return TinyModelReport(path, parameters, len(tokenizer), first, copy_loss,
                           time.perf_counter() - start)  # fmt: skip


def _pretrain_to_copy(model: Any, vocabulary: int, steps: int, seed: int) -> tuple[float, float]:
    """Full training on ``x x`` sequences; returns the loss on the copied half, first and last."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = last = float("nan")
    for step in range(steps):
        half = torch.randint(len(SPECIAL_TOKENS), vocabulary, (32, 8), generator=generator)
        sequence = torch.cat([half, half], dim=1)
        labels = sequence.clone()
        labels[:, : half.shape[1]] = -100  # only the copy can be predicted
        loss = model(input_ids=sequence, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        last = float(loss.detach())
        first = last if step == 0 else first
    model.eval()
    return first, last
