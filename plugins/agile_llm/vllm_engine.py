"""Generation through vLLM (``algorithm.use_vllm: true``): one engine over the base model serves
every member's adapter as a LoRA adapter, so one ``generate`` call samples the whole
population's completions, each row through its own member's adapter; nothing is merged and the
base is held once by the engine (and once by the training model).

Before each call the adapters the call uses are written in PEFT's folder format (what vLLM
loads a LoRA adapter from), each under a fresh LoRA id, since vLLM keeps an adapter it has
loaded by its id and the members' weights change every step. The completions come back as
token ids and are assembled as :func:`agile_llm.text.generate`'s are (left-padded prompt, then
the completion up to and including its end token), so everything after sampling (rewards,
log-probabilities under the training model, losses) is the same with or without vLLM.

``vllm_config`` passes ``tensor_parallel_size``, ``gpu_memory_utilization`` (0.3 unless given:
the training model shares the GPU), ``max_num_seqs`` and ``enforce_eager`` to the engine;
``sleep_mode`` is accepted and not used.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from agile_cli import TrainingError
from agile_llm import text
from agile_llm.messages import error_detail
from agile_llm.options import VLLM_ENGINE_OPTIONS, VLLMConfigSpec

#: The ``max_lora_rank`` values vLLM's LoRA configuration accepts; the adapters' rank is
#: rounded up to one of them (a bound, not the rank served).
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


class VLLMGenerator:
    """One vLLM engine serving a population's adapters.

    :param path: the base model's folder (or cached hub id), as the training model loads it.
    :param rank: the adapters' LoRA rank.
    :param adapters: how many adapters one call may use (the population's size).
    :param context: tokens a prompt and its completion may hold together.
    :param config: the manifest's ``vllm_config``.
    :param seed: seeds the engine.
    """

    def __init__(
        self, path: str, *, rank: int, adapters: int, context: int, config: VLLMConfigSpec | None,
        seed: int,
    ) -> None:  # fmt: skip
        try:
            from vllm import LLM
        except ImportError:
            raise TrainingError(
                "algorithm.use_vllm: the vllm package is not installed",
                "pip install vllm, or train with --set algorithm.use_vllm=false (transformers "
                "generates)",
            ) from None
        written = config.model_dump(exclude_unset=True) if config is not None else {}
        settings = {**VLLM_ENGINE_OPTIONS, **written}
        options = {key: settings[key] for key in VLLM_ENGINE_OPTIONS if settings[key] is not None}
        try:
            self.engine = LLM(
                model=path, enable_lora=True, max_loras=max(adapters, 1),
                max_lora_rank=next((r for r in VLLM_LORA_RANKS if r >= rank), rank),
                max_model_len=context, seed=seed, **options,
            )  # fmt: skip
        except Exception as error:  # vLLM's own, from CUDA to a model it cannot serve
            raise TrainingError(
                f"algorithm.use_vllm: vLLM could not start on {path}: {type(error).__name__}: "
                f"{error_detail(error)}",
                "check vllm_config (gpu_memory_utilization: the training model shares the GPU), "
                "or train with --set algorithm.use_vllm=false",
            ) from None
        self.folder = Path(tempfile.mkdtemp(prefix="agile-vllm-"))
        self._next_id = 1

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def generate(
        self, tokenizer: Any, prompts: list[list[int]], owners: list[Any], *, device: Any,
        max_new_tokens: int, min_new_tokens: int | None, sampling: text.Sampling | None,
        seed: int | None, constraint: Any = None,
    ) -> text.Completions:  # fmt: skip
        """Continue every prompt, row ``i`` through member ``owners[i]``'s adapter: sampled as
        ``sampling`` says (row ``i`` seeded ``seed + i``) or greedy when it is None; the
        completions on ``device``. A ``constraint`` (reasoning budget, answer pattern) is
        refused before training where vLLM generates (``agile_llm.checks``)."""
        assert constraint is None, "refused by agile_llm.checks where vLLM generates"
        from vllm import SamplingParams

        requests = self._requests(owners)
        most = max(1, max_new_tokens)
        options: dict[str, Any] = {"temperature": 0.0}
        if sampling is not None:
            options = {"temperature": sampling.temperature, "top_p": sampling.top_p,
                       "top_k": sampling.top_k or -1, "min_p": sampling.min_p,
                       "repetition_penalty": sampling.repetition_penalty,
                       "stop": list(sampling.stop) or None,
                       "include_stop_str_in_output": True}  # fmt: skip
        params = [
            SamplingParams(
                max_tokens=most,
                min_tokens=min(min_new_tokens or 0, most),
                seed=(seed + row) if sampling is not None and seed is not None else None,
                stop_token_ids=[int(tokenizer.eos_token_id)],
                **options,
            )
            for row in range(len(prompts))
        ]
        outputs = self.engine.generate(
            [{"prompt_token_ids": list(ids)} for ids in prompts], params,
            lora_request=[requests[id(owner)] for owner in owners], use_tqdm=False,
        )  # fmt: skip
        generated = [list(output.outputs[0].token_ids)[:most] for output in outputs]
        return _assembled(tokenizer, prompts, generated, device)

    def _requests(self, owners: list[Any]) -> dict[int, Any]:
        """A LoRA request for each member in ``owners``: its adapter as it is now, saved under
        a new id (the folders of earlier calls, which vLLM has read, are removed)."""
        from vllm.lora.request import LoRARequest

        for stale in self.folder.iterdir():
            shutil.rmtree(stale, ignore_errors=True)
        requests = {}
        for member in {id(m): m for m in owners}.values():
            lora_id = self._next_id
            self._next_id += 1
            folder = self.folder / f"{lora_id}"
            member.save_portable(folder)
            requests[id(member)] = LoRARequest(f"{member.adapter}-{lora_id}", lora_id, str(folder))
        return requests


def _assembled(
    tokenizer: Any, prompts: list[list[int]], outputs: list[list[int]], device: Any
) -> text.Completions:
    """vLLM's completions as :func:`agile_llm.text.generate` returns them."""
    batch = text.prompt_batch(tokenizer, prompts, device)
    width = max(1, *(len(ids) for ids in outputs))
    generated = torch.full((len(outputs), width), int(tokenizer.pad_token_id), dtype=torch.long)
    for row, ids in enumerate(outputs):
        generated[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    joined = torch.cat([batch.ids, generated.to(batch.ids.device)], dim=1)
    return text._completions(tokenizer, batch, joined)
