"""The LLM stack's foundations: a tiny local model made offline, and LoRA adapters that share
one frozen base."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agile_llm.adapters import AdapterPopulation
from agile_llm.tiny import character_tokenizer, make_tiny_model

LORA = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.0}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny")
    report = make_tiny_model(path, steps=60, seed=0)
    assert report.copy_loss < report.first_loss  # pretraining learned something
    return path


def test_the_character_tokenizer_round_trips_text() -> None:
    tokenizer = character_tokenizer()
    ids = tokenizer("12+3=15", add_special_tokens=False).input_ids
    assert len(ids) == 7 and tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids) == "12+3=15"


def test_the_tiny_tokenizer_keeps_spaces_and_reads_a_newline_as_one() -> None:
    tokenizer = character_tokenizer()
    ids = tokenizer("a b\nc", add_special_tokens=False).input_ids
    assert tokenizer.decode(ids) == "a b c" and tokenizer.unk_token_id not in ids


def test_agile_reads_the_tiny_tokenizer_as_its_folder_writes_it(tiny: Path) -> None:
    """transformers 5 builds a Qwen2 folder's tokenizer with Qwen2's byte-level pipeline,
    which drops the character vocabulary's spaces; agile reads the folder's own."""
    from agile_llm.model import load_tokenizer

    tokenizer = load_tokenizer(str(tiny))
    text = "above 2: (x) 'y'"
    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert len(ids) == len(text) and tokenizer.decode(ids) == text
    assert ids == character_tokenizer()(text, add_special_tokens=False).input_ids


def test_the_tiny_model_loads_with_transformers_from_its_folder(tiny: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny)
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    assert 50_000 < sum(p.numel() for p in model.parameters()) < 150_000
    batch = tokenizer(["ab"], return_tensors="pt")
    assert model(**batch).logits.shape == (1, 2, len(tokenizer))


def test_the_tiny_model_command_makes_the_folder(run, tmp_path: Path) -> None:
    out = tmp_path / "model"
    result = run("llm", "tiny-model", str(out), "--steps", "5")
    assert result.exit_code == 0, result.output
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    again = run("llm", "tiny-model", str(out), "--steps", "5")
    assert again.exit_code == 2 and "is not empty" in again.output


def _population(tiny: Path, names: list[str]) -> AdapterPopulation:
    torch.manual_seed(0)
    return AdapterPopulation(AutoModelForCausalLM.from_pretrained(tiny), LORA, names)


def test_adapters_share_one_frozen_base(tiny: Path) -> None:
    population = _population(tiny, ["m0", "m1", "m2"])
    base = population.base_parameters()
    assert base and not any(p.requires_grad for p in base)
    shared = {p.data_ptr() for p in base}
    population.activate("m2")
    assert {p.data_ptr() for p in population.base_parameters()} == shared  # one copy only
    adapters = [population.adapter_parameters(name) for name in population.names]
    pointers = [{p.data_ptr() for p in adapter.values()} for adapter in adapters]
    assert all(pointers) and not (pointers[0] & pointers[1]) and not (pointers[1] & pointers[2])
    # Memory: the base once plus N small adapters, not N models.
    base_size = sum(p.numel() for p in base)
    adapter_size = sum(p.numel() for p in adapters[0].values())
    total = sum(p.numel() for p in population.model.parameters())
    assert total == base_size + 3 * adapter_size and adapter_size < base_size / 10


def test_only_the_active_adapter_learns(tiny: Path) -> None:
    population = _population(tiny, ["m0", "m1"])
    population.activate("m1")
    assert all(p.requires_grad for p in population.adapter_parameters("m1").values())
    assert not any(p.requires_grad for p in population.adapter_parameters("m0").values())


def _logits(population: AdapterPopulation, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return population.model(input_ids=ids).logits


def test_reference_is_the_base_and_copy_makes_twins(tiny: Path) -> None:
    population = _population(tiny, ["m0", "m1"])
    ids = torch.tensor([[10, 11, 12, 13]])
    with population.reference():
        base = _logits(population, ids)
    with torch.no_grad():  # move m1 away from the base (LoRA's B starts at zero)
        for key, parameter in population.adapter_parameters("m1").items():
            if "lora_B" in key:
                parameter.normal_(0.0, 0.5)
    population.activate("m1")
    moved = _logits(population, ids)
    assert not torch.allclose(moved, base)
    with population.reference():
        assert torch.allclose(_logits(population, ids), base)
    population.copy("m1", "m0")
    population.activate("m0")
    assert torch.allclose(_logits(population, ids), moved)
    with torch.no_grad():  # the copy is independent of its source
        next(iter(population.adapter_parameters("m1").values())).add_(1.0)
    assert torch.allclose(_logits(population, ids), moved)
    assert not math.isnan(float(moved.sum()))


def test_sft_steps_on_one_adapter_learn_and_leave_the_rest_alone(tiny: Path) -> None:
    from agile_llm.objectives import response_labels, sft_loss

    population = _population(tiny, ["m0", "m1"])
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    pairs = [("3+4=", "7"), ("1+1=", "2"), ("5+2=", "7"), ("2+6=", "8")]
    batch = tokenizer([p + r for p, r in pairs], return_tensors="pt", padding=True)
    prompts = torch.tensor(
        [len(tokenizer(p, add_special_tokens=False).input_ids) for p, _ in pairs]
    )
    labels = response_labels(batch.input_ids, prompts, batch.attention_mask)
    base_before = [p.detach().clone() for p in population.base_parameters()]
    m0_before = {k: p.detach().clone() for k, p in population.adapter_parameters("m0").items()}
    population.activate("m1")
    trained = list(population.adapter_parameters("m1").values())
    optimizer = torch.optim.AdamW(trained, lr=1e-2)

    def loss() -> torch.Tensor:
        logits = population.model(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask
        ).logits
        return sft_loss(logits, labels)

    first = float(loss())
    for _ in range(30):
        optimizer.zero_grad(set_to_none=True)
        step = loss()
        step.backward()
        optimizer.step()
    assert float(loss()) < 0.5 * first  # the adapter memorises the four answers
    base_after = population.base_parameters()
    assert all(torch.equal(a, b) for a, b in zip(base_before, base_after, strict=True))
    after = population.adapter_parameters("m0")
    assert all(torch.equal(m0_before[k], after[k]) for k in m0_before)
