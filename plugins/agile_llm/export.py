"""The elite merged into its base model, as a Hugging Face model folder.

``training.checkpoint_export: {format: merged}`` writes ``merged/`` beside a run's ``elite/``
(at the run's end, or after every save of the elite with ``trigger: every``); ``agile llm
merge RUN`` writes it whenever asked (``trigger: on_demand``). The folder loads with
``AutoModelForCausalLM.from_pretrained`` (or vLLM) without PEFT: each LoRA layer's
``W + scale * B @ A`` is written as its weight, in safetensors, with the run's tokenizer.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

MERGED = "merged"


def write_merged(base: str, adapter: Path, target: Path, tokenizer: Any = None) -> Path:
    """Write the base model at ``base`` with the PEFT adapter folder ``adapter`` merged in to
    ``target`` (its tokenizer beside it: ``tokenizer``, else the base's). The folder is
    written under another name and renamed into place, so that ``target`` is never half
    written. The base loads on the CPU in its own precision, unquantised.

    :raises TrainingError: the adapter does not fit the base model, or cannot be read.
    """
    import torch

    from agile_llm.model import load_model, load_tokenizer, require_stack

    require_stack()  # offline before peft and transformers read their settings
    from peft import get_peft_model

    from agile_llm.adapters import read_adapter

    start = read_adapter(adapter, what=f"the adapter {adapter}")
    assert start is not None
    model = load_model(base, device=torch.device("cpu"))
    peft_model = get_peft_model(model, start.config, adapter_name="default")
    start.load_into(peft_model, "default")
    merged = peft_model.merge_and_unload()
    partial = target.with_name(f".{target.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    merged.save_pretrained(str(partial), safe_serialization=True)
    (tokenizer if tokenizer is not None else load_tokenizer(base)).save_pretrained(str(partial))
    _replace(partial, target)
    return target


def _replace(new: Path, target: Path) -> None:
    """Put the folder ``new`` where ``target`` is, the old one removed only once the new one
    stands in its place."""
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)
