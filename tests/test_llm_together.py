"""A group of members' steps and scores as one computation: the same losses, adapter and value
head updates and scores as each member's alone, as a group of one (up to floating-point
order), members of different hyperparameters included; members that cannot share a pass, and
every member with --per-member, are groups of one."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch

from agile_cli import TrainingManifest
from agile_cli.helpers import installed_registry

from .test_llm_training import manifest


def _population(
    tiny: Path, data: Path, size: int, name: str = "SFT", **algorithm: Any
) -> tuple[list[Any], Any]:
    from agile_cli.training import setup
    from agile_rl.runtime.agent import AgentContext

    registry = installed_registry()
    content = manifest(name, tiny, data, **algorithm)
    parsed = TrainingManifest.get_validated(content, registry=registry)
    env = setup.build_environment(parsed, registry, seed=0)
    context = AgentContext(torch.device("cpu"), 1, parsed.training)
    cls = setup.algorithm_class(parsed, registry)
    members = setup.build_population(parsed, cls, env, context, size=size)
    noise = torch.Generator().manual_seed(7)
    for k, member in enumerate(members):  # members that differ, as training leaves them
        member.set_hyperparameter("lr", 0.01 * (k + 1))
        member.set_hyperparameter("update_epochs", 1 + k % 2)
        with torch.no_grad():
            for weight in member.trained_parameters():
                weight.add_(0.05 * torch.randn(weight.shape, generator=noise))
    return members, env


def _trained(member: Any) -> dict[str, torch.Tensor]:
    """What a step trains: the adapter's weights, and an LLMPPO member's value head."""
    state = member.state_dict()
    head = state["extra"].get("value_head", {})
    return {**state["adapter"], **{f"value_head.{k}": v for k, v in head.items()}}


def _same_updates(
    members: list[Any], rows: list[Any], env: Any, losses_rtol: float = 1e-5
) -> list[bool]:
    """Step the members as one group, then from the same start each as a group of one: the
    losses and what they trained must agree. Returns which members' weights moved."""
    start = [copy.deepcopy(member.state_dict()) for member in members]
    before = [_trained(member) for member in members]
    together = type(members[0]).train_group(members, rows, env)
    stacked = [_trained(member) for member in members]
    for member, state in zip(members, start, strict=True):
        member.load_state_dict(state)
    alone = [member.train_step(batch, env) for member, batch in zip(members, rows, strict=True)]
    assert together == pytest.approx(alone, rel=losses_rtol, abs=1e-7)
    learned = []
    for member, weights, first in zip(members, stacked, before, strict=True):
        own = _trained(member)
        assert own.keys() == weights.keys() == first.keys()
        for key in own:
            torch.testing.assert_close(weights[key], own[key], rtol=1e-4, atol=1e-6)
        learned.append(any(not torch.equal(own[k], first[k]) for k in own))
    return learned


@pytest.mark.parametrize(("name", "checkpointing"), [("SFT", False), ("DPO", False), ("SFT", True)])
def test_steps_together_equal_the_steps_one_by_one(
    tiny: Path, data: Path, name: str, checkpointing: bool
) -> None:
    """With gradient checkpointing too: its recomputed forward passes route rows the same."""
    members, env = _population(tiny, data, 3, name, gradient_checkpointing=checkpointing)
    rows = [env.rows_at(2 * k, 2 + k) for k in range(3)]  # batches of different sizes
    learned = _same_updates(members, rows, env)
    assert all(learned)


@pytest.mark.parametrize("name", ["DPO", "GRPO"])
def test_micro_batched_members_step_alone_with_the_whole_batch_gradient(
    tiny: Path, data: Path, name: str
) -> None:
    """Micro-batches are groups of one; their gradients add up to the whole batch's (these
    losses are means over rows, as the micro-batches are weighted)."""
    from agile_llm import groups

    steps = []
    for micro in (None, 1):
        members, env = _population(tiny, data, 2, name, micro_batch_size_per_gpu=micro)
        assert groups.compatible(members) == ([[0, 1]] if micro is None else [[0], [1]])
        member = members[1]
        member.set_hyperparameter("update_epochs", 1)
        seen: list[torch.Tensor] = []

        def gradient(member: Any = member, seen: list[torch.Tensor] = seen) -> None:
            seen.append(torch.cat([p.grad.flatten() for p in member.trained_parameters()]))

        member.step = gradient  # record the gradient instead of stepping
        steps.append((member.train_step(env.rows_at(0, 3), env), *seen))
    (whole, gradient_whole), (cut, gradient_cut) = steps
    assert cut == pytest.approx(whole, rel=1e-5) and gradient_whole.abs().sum() > 0
    torch.testing.assert_close(gradient_cut, gradient_whole, rtol=1e-4, atol=1e-6)


def test_per_member_and_together_train_the_same_run(run, tiny: Path, data: Path, tmp_path) -> None:
    import yaml

    from agile_cli.training import checkpoint

    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(manifest("SFT", tiny, data)), encoding="utf-8")
    finals = []
    for flags in ([], ["--per-member"]):
        folder = tmp_path / ("alone" if flags else "together")
        result = run("train", str(path), "--run-dir", str(folder), *flags)
        assert result.exit_code == 0, result.output
        state = checkpoint.load(folder / "checkpoints" / "latest.pt", kind=checkpoint.POPULATION)
        finals.append({m["index"]: m["adapter"] for m in state["members"]})
    together, alone = finals
    assert together.keys() == alone.keys()
    for index, weights in together.items():
        for key, value in weights.items():
            torch.testing.assert_close(value, alone[index][key], rtol=1e-3, atol=1e-5)


def _fake_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sampling that gives the k-th copy of a prompt (within its group of 2) the same
    completion however the prompts are batched: a stand-in for seeds, which cannot match
    between one call for all members and one call each."""
    from agile_llm import text

    def generate(model: Any, tokenizer: Any, prompts: Any, **options: Any) -> Any:
        seen: dict[tuple[int, ...], int] = {}
        rows = []
        for ids, mask in zip(prompts.ids, prompts.mask, strict=True):
            key = tuple(ids[mask.bool()].tolist())
            copy = seen[key] = seen.get(key, -1) + 1
            question = tokenizer.decode(list(key)).split("=")[0][-2:]  # the task's "12="
            right = "".join(str((int(c) + 1) % 10) for c in question)  # rewarded
            said = right if (copy + int(question[0])) % 2 == 0 else question
            digits = [tokenizer.convert_tokens_to_ids(c) for c in said]
            rows.append(torch.tensor([*digits, tokenizer.eos_token_id]))
        return text._completions(
            tokenizer, prompts, torch.cat([prompts.ids, torch.stack(rows)], dim=1)
        )

    monkeypatch.setattr(text, "generate", generate)


@pytest.mark.parametrize("name", ["GRPO", "LLMREINFORCE"])
def test_sampled_steps_together_equal_the_steps_one_by_one(
    tiny: Path, data: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    _fake_sampling(monkeypatch)
    extra = {"beta": 0.1} if name == "GRPO" else {}
    members, env = _population(tiny, data, 3, name, **extra)
    rows = [env.rows_at(2 * k, 2) for k in range(3)]  # no prompt twice: the stand-in counts
    learned = _same_updates(members, rows, env, losses_rtol=1e-4)
    assert any(learned)  # rewards that differ within a batch moved an adapter


def test_one_generation_call_continues_each_row_with_its_own_adapter(
    tiny: Path, data: Path
) -> None:
    from agile_llm import text

    members, env = _population(tiny, data, 3, "GRPO")
    rows = env.rows_at(0, 3)
    prompts = members[0].prompt_ids(members[0].render_prompts(rows, env))
    alone = [member.complete(prompts, explore=False).texts for member in members]
    assert len({tuple(texts) for texts in alone}) > 1  # the adapters answer differently
    shared = members[0].shared
    names = [member.adapter for member in members for _ in prompts]
    batch = text.prompt_batch(shared.tokenizer, [p for _ in members for p in prompts], "cpu")
    with shared.adapters.mixed(names):
        done = text.generate(shared.model.eval(), shared.tokenizer, batch,
                             max_new_tokens=members[0].output_tokens())  # fmt: skip
    assert [done.texts[k : k + len(prompts)] for k in range(0, len(done.texts), len(prompts))] == (
        alone
    )


def test_adapted_raw_parameters_cannot_mix_so_they_step_alone(tiny: Path) -> None:
    from transformers import AutoModelForCausalLM

    from agile_llm.adapters import AdapterPopulation

    lora = {"r": 2, "lora_alpha": 4, "lora_dropout": 0.0}
    plain = AdapterPopulation(AutoModelForCausalLM.from_pretrained(tiny),
                              {**lora, "target_modules": ["q_proj"]}, ["a", "b"])  # fmt: skip
    assert plain.mixable
    raw = {**lora, "target_modules": [], "target_parameters": ["mlp.gate_proj.weight"]}
    wrapped = AdapterPopulation(AutoModelForCausalLM.from_pretrained(tiny), raw, ["a", "b"])
    assert not wrapped.mixable  # PEFT refuses mixed batches there; groups.compatible asks this


def test_members_that_sample_differently_stack_in_groups(
    tiny: Path, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agile_llm import groups
    from agile_llm.runner import LLMRunner

    members, env = _population(tiny, data, 3, "GRPO", temperature=1.0)
    members[1].set_hyperparameter("temperature", 0.7)  # evolution mutated one
    assert groups.compatible(members) == [[0, 2], [1]]
    calls = []
    real = type(members[0]).train_group.__func__  # type: ignore[attr-defined]

    def spy(cls: Any, group: list[Any], rows: list[Any], data: Any) -> Any:
        calls.append([m.index for m in group])
        return real(cls, group, rows, data)

    monkeypatch.setattr(type(members[0]), "train_group", classmethod(spy))
    runner = LLMRunner(env, epochs=None, eval_rows=None)
    stats = runner.train_population(members, 4, lambda n: None)
    assert [s.steps for s in stats] == [4, 4, 4]
    together, alone = [members[0].index, members[2].index], [members[1].index]
    assert calls and all(call in (together, alone) for call in calls)
    assert calls.count(together) == calls.count(alone) == len(calls) // 2
    runner.stack = False  # --per-member: every member a group of one
    calls.clear()
    runner.train_population(members, 4, lambda n: None)
    assert sorted(calls) == [[m.index] for m in members]


@pytest.mark.parametrize("name", ["SFT", "DPO", "GRPO"])
def test_scores_together_equal_the_scores_one_by_one(tiny: Path, data: Path, name: str) -> None:
    members, env = _population(tiny, data, 3, name)
    members[2].set_hyperparameter("batch_size", 3)  # chunks its held-out rows its own way
    noise = torch.Generator().manual_seed(11)
    with torch.no_grad():  # adapters far enough apart to answer differently
        for k, member in enumerate(members):
            for weight in member.trained_parameters():
                weight.add_(0.5 * k * torch.randn(weight.shape, generator=noise))
    rows = env.test + env.train[:4]
    joint = type(members[0]).score_group(members, rows, env)
    for member, scores in zip(members, joint, strict=True):
        alone = member.score(rows, env)
        assert scores.metrics == pytest.approx(alone.metrics, rel=1e-5)
        assert scores.fitness == pytest.approx(alone.fitness, rel=1e-5)
        assert scores.samples == alone.samples
    assert len({tuple(s.samples) for s in joint}) > 1  # the members answer differently


def test_llmppo_steps_together_equal_the_steps_one_by_one_value_heads_included(
    tiny: Path, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each row valued by its own member's head; adapters and heads move as alone."""
    _fake_sampling(monkeypatch)
    members, env = _population(tiny, data, 3, "LLMPPO", beta=0.1)
    for k, member in enumerate(members):  # heads that differ, so a mixed-up row would show
        with torch.no_grad():
            member.value_head.weight.fill_(0.01 * (k + 1))
    rows = [env.rows_at(2 * k, 2) for k in range(3)]
    heads = [copy.deepcopy(m.value_head.state_dict()) for m in members]
    learned = _same_updates(members, rows, env, losses_rtol=1e-4)
    assert any(learned)
    for member, start in zip(members, heads, strict=True):
        assert all(not torch.equal(v, start[k]) for k, v in member.value_head.state_dict().items())
