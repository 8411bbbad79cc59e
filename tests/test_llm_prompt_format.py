"""How SFT, DPO and reasoning prompts become tokens, with a tokenizer that has a chat template
and adds its own beginning-of-text token: sft and preference rows of a plain prompt column are
read as written (AgileRL's semantics), reasoning prompts and ``apply_chat_template: true``
go through the template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch

from agile_cli import TrainingManifest
from agile_cli.helpers import installed_registry
from agile_llm.tiny import make_tiny_model

TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)
ROWS = [
    {"prompt": f"{a}{b}=", "answer": f"{b}{a}", "chosen": f"{b}{a}", "rejected": f"{a}{b}"}
    for a, b in (("1", "2"), ("3", "4"), ("5", "6"), ("7", "8"), ("9", "0"), ("2", "5"))
]
LORA = {"lora_r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.0}


@pytest.fixture(scope="module")
def chatty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model, its tokenizer given a chat template and a leading ``<s>``."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    path = tmp_path_factory.mktemp("chatty")
    make_tiny_model(path, steps=150, seed=0)
    tokenizer = AutoTokenizer.from_pretrained(path)
    bos = tokenizer.convert_tokens_to_ids("<s>")
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", bos)]
    )
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(path)
    return path


def _member(chatty: Path, tmp_path: Path, algorithm: str, **environment: Any) -> tuple[Any, Any]:
    from agile_cli.training import setup
    from agile_rl.runtime.agent import AgentContext

    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    (tmp_path / "reward.py").write_text("def exact(c, a, q):\n    return float(c == a)\n")
    env: dict[str, Any] = {"dataset": str(data), "train_test_split": 0.5, **environment}
    if algorithm == "SFT":
        env["response_column"] = "answer"
    if algorithm == "GRPO":
        env.update(prompt_template={"user_0": "{prompt}"}, reward_fn_name="exact",
                   reward_file_path=str(tmp_path / "reward.py"))  # fmt: skip
    spec: dict[str, Any] = {"name": algorithm, "batch_size": 2, "gradient_checkpointing": False}
    if algorithm == "GRPO":
        spec.update(group_size=2, max_output_tokens=2)
    content = {
        "algorithm": spec,
        "environment": env,
        "training": {"max_steps": 4, "evo_steps": 1, "pop_size": 1},
        "network": {
            "pretrained_model_name_or_path": str(chatty),
            "max_context_length": 64,
            "lora_config": LORA,
        },
    }
    registry = installed_registry()
    manifest = TrainingManifest.get_validated(content, registry=registry)
    built = setup.build_environment(manifest, registry, seed=0)
    context = AgentContext(torch.device("cpu"), 1, manifest.training)
    cls = setup.algorithm_class(manifest, registry)
    return setup.build_population(manifest, cls, built, context, size=1)[0], built


def _chars(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def _rows(batch: Any) -> list[tuple[list[int], list[int]]]:
    """Each row's tokens and its trained-on (labelled) tokens."""
    out = []
    for ids, mask, labels in zip(batch.ids, batch.mask, batch.labels, strict=True):
        tokens = ids[mask.bool()].tolist()
        out.append((tokens, [t for t in labels.tolist() if t >= 0]))
    return out


def test_sft_reads_the_prompt_column_as_written_then_the_response(chatty, tmp_path) -> None:
    member, data = _member(chatty, tmp_path, "SFT")
    tok, row = member.tokenizer, data.train[0]
    bos, eos = tok.convert_tokens_to_ids("<s>"), tok.eos_token_id
    prompt, answer = _chars(tok, row["prompt"]), _chars(tok, row["answer"])
    tokens, trained = _rows(member.sequences([row], data))[0]
    assert tokens == [bos, *prompt, *answer, eos]  # no chat template text around the prompt
    assert trained == [*answer, eos]
    # Scoring and generation give the model the same prompt it trained on.
    assert member.prompt_ids(member.render_prompts([row], data)) == [[bos, *prompt]]


def test_dpo_pairs_share_the_prompt_as_written(chatty, tmp_path) -> None:
    member, data = _member(chatty, tmp_path, "DPO")
    tok, row = member.tokenizer, data.train[0]
    bos, eos = tok.convert_tokens_to_ids("<s>"), tok.eos_token_id
    prompt = _chars(tok, row["prompt"])
    (chosen, _), (rejected, _) = _rows(member.pairs([row], data))
    assert chosen == [bos, *prompt, *_chars(tok, row["chosen"]), eos]
    assert rejected == [bos, *prompt, *_chars(tok, row["rejected"]), eos]


def test_apply_chat_template_renders_the_prompt_as_a_user_turn(chatty, tmp_path) -> None:
    member, data = _member(chatty, tmp_path, "SFT", apply_chat_template=True)
    tok, row = member.tokenizer, data.train[0]
    rendered = f"[user]{row['prompt']}\n[assistant]"
    tokens, trained = _rows(member.sequences([row], data))[0]
    assert tokens == [*_chars(tok, rendered), *_chars(tok, row["answer"]), tok.eos_token_id]
    assert trained == [*_chars(tok, row["answer"]), tok.eos_token_id]


def test_reasoning_prompts_go_through_the_chat_template(chatty, tmp_path) -> None:
    member, data = _member(chatty, tmp_path, "GRPO")
    row = data.train[0]
    rendered = f"[user]{row['prompt']}\n[assistant]"
    assert member.render_prompts([row], data) == [rendered]
    assert member.prompt_ids([rendered]) == [_chars(member.tokenizer, rendered)]


@pytest.mark.parametrize("chat", [False, True])
def test_sft_learns_to_answer_the_prompts_it_will_be_given(chatty, tmp_path, chat) -> None:
    """Read as written, the adapter answers prompts as written, as AgileRL's users give them;
    with apply_chat_template it answers template-rendered prompts, and not the raw ones (what
    agile did to every sft manifest before: a stray token, then the answer)."""
    member, data = _member(chatty, tmp_path, "SFT", apply_chat_template=chat)
    member.set_hyperparameter("lr", 0.02)
    rows = data.train + data.test
    for step in range(120):
        member.train_step([rows[(2 * step + k) % len(rows)] for k in range(2)], data)
    tok, answers = member.tokenizer, [row["answer"] for row in rows]

    def answered(prompts: list[list[int]]) -> list[str]:
        return [t.strip() for t in member.complete(prompts, explore=False).texts]

    as_written = answered([tok(row["prompt"]).input_ids for row in rows])  # with its <s>
    assert answered(member.prompt_ids(member.render_prompts(rows, data))) == answers
    assert (as_written == answers) != chat
