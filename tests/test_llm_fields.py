"""agilerl 2.58's sampling, loss, schedule, scoring and environment fields each change what
they should, on the tiny model (their arithmetic by hand is in test_llm_objectives.py)."""

from __future__ import annotations

import copy
import itertools
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from agile_cli import TrainingManifest
from agile_cli.helpers import installed_registry
from agile_llm.population import schedule_factor
from agile_llm.spec import CosineScheduleSpec

from .llm_rows import LORA


def _manifest(tiny: Path, data: Path, algorithm: dict[str, Any], **environment: Any) -> Any:
    spec = {"name": "GRPO", "batch_size": 2, "group_size": 2, "lr": 0.01, "temperature": 1.0,
            "max_output_tokens": 3, "gradient_checkpointing": False, **algorithm}  # fmt: skip
    return {
        "algorithm": spec,
        "environment": {
            "dataset": str(data),
            "train_test_split": 0.6,
            "prompt_template": {"user_0": "{question}="},
            "max_reward": 1.0,
            "rubric_file_path": str(data.parent / "reward.py"),
            "rubric_name": "exact",
            **environment,
        },
        "training": {"max_steps": 8, "evo_steps": 2, "pop_size": 1, "eval_rows": 3},
        "network": {
            "pretrained_model_name_or_path": str(tiny),
            "max_context_length": 16,
            "lora_config": LORA,
        },
    }


def _member(tiny: Path, data: Path, algorithm: dict[str, Any] | None = None,
            **environment: Any) -> tuple[Any, Any]:  # fmt: skip
    from agile_cli.training import setup
    from agile_llm.environment import prepare
    from agile_rl.runtime.agent import AgentContext

    registry = installed_registry()
    content = _manifest(tiny, data, algorithm or {}, **environment)
    parsed = TrainingManifest.get_validated(content, registry=registry)
    env = prepare(setup.build_environment(parsed, registry, seed=0), parsed)
    context = AgentContext(torch.device("cpu"), 1, parsed.training)
    cls = setup.algorithm_class(parsed, registry)
    (member,) = setup.build_population(parsed, cls, env, context, size=1)
    return member, env


# -- sampling ------------------------------------------------------------------------------------


def test_the_sampling_fields_reach_generation(
    tiny: Path, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = {"top_p": 0.8, "top_k": 7, "min_p": 0.05, "repetition_penalty": 1.3}
    member, env = _member(tiny, data, {**fields, "vllm_config": {"stop_sequences": ["9"]}})
    seen: list[dict[str, Any]] = []
    original = member.shared.model.generate

    def spy(**options: Any) -> Any:
        seen.append(options)
        return original(**options)

    monkeypatch.setattr(member.shared.model, "generate", spy)
    member.train_step(env.rows_at(0, 2), env)
    sampled = seen[0]
    assert {key: sampled[key] for key in fields} == fields
    assert sampled["do_sample"] is True and sampled["stop_strings"] == ["9"]
    member.score(env.test, env)
    assert seen[-1]["do_sample"] is False and "top_k" not in seen[-1]  # scoring is greedy


def test_a_stop_string_ends_the_completion_after_it(tiny: Path, data: Path) -> None:
    member, env = _member(tiny, data, {"max_output_tokens": 8, "temperature": 1.5})
    prompts = member.prompt_ids(member.render_prompts(env.train[:4] * 4, env))
    free = member.complete(prompts, explore=True).texts
    stop = next(char for completion in free for char in completion if char.strip())
    stopped = member.spec.model_copy(update={"vllm_config": {"stop_sequences": [stop]}})
    member.spec = type(member.spec).model_validate(stopped.model_dump())
    texts = member.complete(prompts, explore=True).texts
    assert all(stop not in t or t.endswith(stop) for t in texts)  # nothing after the stop


# -- the loss ------------------------------------------------------------------------------------


#: A rubric whose rewards differ between completions (by their characters), so that a
#: group's advantages are not all zero.
VARIED = (
    "def exact(completion, answer, question):\n    return float(sum(map(ord, completion)) % 7)\n"
)


def test_kl_advantage_shaping_moves_the_kl_from_the_loss_into_the_advantage(
    tiny: Path, data: Path
) -> None:
    (data.parent / "reward.py").write_text(VARIED)
    losses, weights = [], []
    for shaped in (False, True):
        torch.manual_seed(0)
        member, env = _member(tiny, data, {"beta": 0.5, "use_kl_advantage_shaping": shaped})
        member.set_hyperparameter("lr", 0.5)  # move far from the reference in one step
        member.train_step(env.rows_at(0, 2), env)
        losses.append(member.train_step(env.rows_at(2, 2), env))
        weights.append(torch.cat([p.detach().flatten() for p in member.trained_parameters()]))
    # On the sampling policy, -A + beta KL is the same number either way; its gradient is not
    # (the shaped KL is a constant of the advantage, the penalty's is differentiated).
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)
    assert not torch.allclose(weights[0], weights[1])


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.5])
def test_log_probabilities_are_those_of_the_distribution_sampled(
    temperature: float, tiny: Path, data: Path
) -> None:
    """As 2.58 scores its samples: the logits divided by the sampling temperature, at
    sampling, under the reference and as the policy learns."""
    member, env = _member(tiny, data, {"temperature": temperature, "beta": 0.1})
    (rollout,) = type(member).rollouts([member], [env.rows_at(0, 2)], env)
    assert rollout is not None
    ids, mask, labels = rollout["ids"], rollout["mask"], rollout["labels"]
    positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)
    model = member.shared.model
    with torch.no_grad(), member.shared.adapters.routed([member.adapter] * len(ids)):
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    with torch.no_grad(), model.disable_adapter():
        base = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    counted = rollout["counted"].bool()
    for found, raw in ((rollout["old"], logits), (rollout["reference"], base)):
        by_hand = torch.log_softmax(raw[:, :-1].float() / temperature, dim=-1)
        by_hand = by_hand.gather(-1, labels[:, 1:].clamp(min=0).unsqueeze(-1)).squeeze(-1)
        torch.testing.assert_close(found[counted], by_hand[counted], rtol=1e-4, atol=1e-5)
    forward = type(member).training_pass(model, _sequences(rollout), member.sampled_at())
    torch.testing.assert_close(forward[counted], rollout["old"][counted], rtol=1e-4, atol=1e-5)


def _sequences(rollout: Any) -> Any:
    from agile_llm.text import Sequences

    return Sequences(rollout["ids"], rollout["mask"], rollout["labels"])


@pytest.mark.parametrize("norm", ["accumulation_window", "micro_batch", "episode"])
def test_the_loss_is_averaged_as_loss_norm_says(
    tiny: Path, data: Path, norm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agile_llm import objectives

    member, env = _member(tiny, data, {"loss_norm": norm, "micro_batch_size_per_gpu": 2})
    used: list[str] = []
    reduce = objectives.reduce_loss

    def spy(*args: Any) -> torch.Tensor:
        used.append(args[3])
        return reduce(*args)

    monkeypatch.setattr(objectives, "reduce_loss", spy)
    member.train_step(env.rows_at(0, 2), env)
    assert used and set(used) == {norm}


# -- the schedule --------------------------------------------------------------------------------


def test_the_cosine_schedule_warms_up_decays_and_holds_its_floor() -> None:
    schedule = CosineScheduleSpec(num_steps=10, warmup_proportion=0.2, min_lr_ratio=0.1)
    factors = [schedule_factor(schedule, update) for update in range(12)]
    assert factors[:2] == [0.5, 1.0]  # two warm-up updates
    assert factors[2] == pytest.approx(1.0) and factors[10] == factors[11] == 0.1
    assert all(a >= b for a, b in itertools.pairwise(factors[2:]))
    middle = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 4 / 8))
    assert factors[6] == pytest.approx(middle)
    assert schedule_factor(None, 5) == 1.0


def test_the_schedule_sets_the_rate_of_each_update(tiny: Path, data: Path) -> None:
    schedule = {"num_steps": 4, "warmup_proportion": 0.5, "min_lr_ratio": 0.25}
    member, env = _member(tiny, data, {"cosine_lr_schedule_config": schedule})
    rates = []
    for position in range(0, 10, 2):
        member.train_step(env.rows_at(position, 2), env)
        rates.append(member.optimizers["adapter"].param_groups[0]["lr"])
    halfway = 0.25 + 0.75 * 0.5 * (1 + math.cos(math.pi / 2))  # update 3 of 4, warm-up 2
    assert rates == pytest.approx([0.005, 0.01, 0.01, 0.01 * halfway, 0.0025])
    again = copy.deepcopy(member.state_dict())["updates"]
    assert again == 5  # a resumed member goes on where the schedule is


# -- scoring -------------------------------------------------------------------------------------


def test_evo_epochs_makes_a_generation_of_passes_over_the_training_rows(
    run: Any, tiny: Path, data: Path, tmp_path: Path
) -> None:
    import json

    import yaml

    _, env = _member(tiny, data)
    rows = len(env.train)
    content = _manifest(tiny, data, {})
    content["training"] = {"max_steps": 10 * rows, "num_epochs": 3, "evo_epochs": 1,
                           "pop_size": 2, "eval_rows": 2}  # fmt: skip
    content["mutation"] = {"rand_seed": 1, "probabilities": {"no_mut": 1.0}}
    content["selection_strategy"] = {"tournament_size": 2, "elitism": True}
    path = tmp_path / "epochs.yaml"
    path.write_text(yaml.safe_dump(content))
    checked = run("validate", str(path))
    assert "evolves every 1 pass over the training split" in checked.output
    result = run("train", str(path), "--quiet", "--run-dir", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line)["steps_per_member"] for line in lines]
    assert steps == [rows, 2 * rows, 3 * rows]  # three epochs, one a generation, then done


def test_sampled_scoring_reports_the_greedy_scores_beside(tiny: Path, data: Path) -> None:
    member, env = _member(tiny, data)
    greedy = member.score(env.test, env)
    assert set(greedy.metrics) == {"mean reward", "accuracy"}
    env.eval_samples, env.eval_greedy = 3, True
    both = member.score(env.test, env)
    assert both.metrics["greedy mean reward"] == greedy.metrics["mean reward"]
    assert both.fitness == both.metrics["mean reward"]
    env.eval_greedy = False
    assert "greedy mean reward" not in member.score(env.test, env).metrics


# -- the environment -----------------------------------------------------------------------------


def test_a_chat_template_file_and_its_variables_render_prompts(
    tiny: Path, data: Path, tmp_path: Path
) -> None:
    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}<{{ tone }}>{{ m['content'] }}{% endfor %}")
    member, env = _member(tiny, data, chat_template_path=str(template),
                          chat_template_kwargs={"tone": "calm"})  # fmt: skip
    (rendered,) = member.render_prompts(env.train[:1], env)
    assert rendered == f"<calm>{env.train[0]['question']}="


def test_max_row_tokens_bounds_a_prompt_and_its_completion(tiny: Path, data: Path) -> None:
    member, env = _member(tiny, data, {"max_output_tokens": 8, "max_row_tokens": 10})
    prompts = member.prompt_ids(member.render_prompts(env.train[:2], env))
    done = member.complete(prompts, explore=True)
    assert max(int(row.sum()) for row in done.mask) <= 10


def test_mini_batches_take_an_optimiser_step_each(tiny: Path, data: Path) -> None:
    """Two prompts of two completions are four rows: mini-batches of two take two steps,
    micro-batches of one inside them accumulate."""
    (data.parent / "reward.py").write_text(VARIED)
    whole, env = _member(tiny, data)
    whole.train_step(env.rows_at(0, 2), env)
    assert whole.updates == 1
    split, env = _member(tiny, data, {"mini_batch_size": 2, "micro_batch_size_per_gpu": 1})
    assert split.micro_batches(4) == [slice(0, 1), slice(1, 2), slice(2, 3), slice(3, 4)]
    assert split.mini_batch_of(slice(3, 4), 4) == slice(2, 4)
    split.train_step(env.rows_at(0, 2), env)
    assert split.updates == 2


def _adapted(member: Any) -> list[str]:
    from peft import get_peft_model_state_dict

    weights = get_peft_model_state_dict(member.shared.model, adapter_name=member.adapter)
    return sorted(weights)


def test_lora_target_scope_adapts_only_the_modules_under_it(tiny: Path, data: Path) -> None:
    everywhere, _ = _member(tiny, data)
    scoped, _ = _member(tiny, data, {"lora_target_scope": "layers.1"})
    assert any("layers.0." in key for key in _adapted(everywhere))
    keys = _adapted(scoped)
    assert keys and all("layers.1." in key for key in keys)
    # the same layers as everywhere, under the scope
    assert keys == [key for key in _adapted(everywhere) if "layers.1." in key]


def test_a_scope_that_holds_none_of_the_layers_says_what_the_model_has(
    tiny: Path, data: Path
) -> None:
    from agile_cli import UsageError

    with pytest.raises(UsageError) as raised:
        _member(tiny, data, {"lora_target_scope": "vision_tower"})
    message = str(raised.value)
    assert "algorithm.lora_target_scope: 'vision_tower' holds none of the layers" in message
    assert "model.layers.0.self_attn" in raised.value.hint


def test_a_scope_over_all_linear_layers_leaves_the_output_head_out(tiny: Path) -> None:
    import re

    from transformers import AutoModelForCausalLM

    from agile_llm.population import scoped_targets

    base = AutoModelForCausalLM.from_pretrained(str(tiny))
    pattern = scoped_targets(base, {"target_modules": "all-linear"}, "layers.1")
    matched = [key for key, module in base.named_modules()
               if isinstance(module, torch.nn.Linear) and re.fullmatch(pattern, key)]  # fmt: skip
    assert {"model.layers.1.mlp.down_proj", "model.layers.1.self_attn.q_proj"} <= set(matched)
    assert all(key.startswith("model.layers.1.") for key in matched)
    assert scoped_targets(base, {"target_modules": r".*q_proj"}, "layers.1") == r".*q_proj"


def _completions(member: Any, env: Any, explore: bool) -> list[str]:
    rows = env.rows_at(0, 2)
    prompts = member.prompt_ids(member.render_prompts(rows, env))
    return list(member.complete(prompts * 4, explore=explore).texts)


@pytest.mark.parametrize("explore", [True, False], ids=["sampled", "greedy"])
def test_an_answer_pattern_holds_every_completion(tiny: Path, data: Path, explore: bool) -> None:
    import re

    member, env = _member(tiny, data, {"constrain_answer_pattern": "[0-9]{3}x?",
                                       "max_output_tokens": 8})  # fmt: skip
    texts = _completions(member, env, explore)
    assert all(re.fullmatch("[0-9]{3}x?", said) for said in texts), texts
    free, _ = _member(tiny, data, {"max_output_tokens": 8})
    assert not all(re.fullmatch("[0-9]{3}x?", said) for said in _completions(free, env, explore))


def test_a_thinking_budget_ends_a_turn_that_does_not_close_its_reasoning(
    tiny: Path, data: Path
) -> None:
    member, env = _member(tiny, data, {"thinking_token_budget": 3, "max_output_tokens": 8})
    rows = env.rows_at(0, 2)
    prompts = member.prompt_ids(member.render_prompts(rows, env))
    done = member.complete(prompts * 4, explore=True)
    lengths = done.completion.sum(dim=1).tolist()
    assert max(lengths) <= 4  # three tokens of reasoning, then the end token forced
    assert all(not said.count("</think>") for said in done.texts)


def test_answer_continuation_closes_the_reasoning_then_answers_to_the_pattern(
    tiny: Path, data: Path
) -> None:
    import re

    spec = {"thinking_token_budget": 3, "constrain_answer_pattern": "[0-9]{2}",
            "answer_continuation": True, "max_output_tokens": 16}  # fmt: skip
    member, env = _member(tiny, data, spec)
    for said in _completions(member, env, explore=True):
        thought, closed, answer = said.partition("</think>")
        assert closed and len(thought) == 3 and re.fullmatch("[0-9]{2}", answer), said


def test_a_spent_budget_ends_the_turn_even_below_the_minimum_length(tiny: Path, data: Path) -> None:
    """min_output_tokens bars the end token; a spent reasoning budget forces it: the budget
    wins rather than leaving nothing to sample."""
    member, env = _member(tiny, data, {"thinking_token_budget": 2, "max_output_tokens": 8,
                                       "min_output_tokens": 5})  # fmt: skip
    rows = env.rows_at(0, 2)
    prompts = member.prompt_ids(member.render_prompts(rows, env))
    done = member.complete(prompts * 2, explore=True)
    assert max(done.completion.sum(dim=1).tolist()) <= 3
