"""LLMPPO: per-token rewards and GAE on hand-set numbers, one step on the tiny local model,
clones and checkpoints that carry the value head, and learning a trivial reward. No network."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch

from agile_cli import AgentContext
from agile_llm import objectives
from agile_llm.environment import PromptData
from agile_llm.population import SharedModel
from agile_llm.ppo import LLMPPO, whiten
from agile_llm.rewards import RewardFunction
from agile_llm.spec import LLMPPOSpec, LoraSpec
from agile_llm.tiny import make_tiny_model

PROMPTS = ["abc", "hello", "q1", "zz", "mn", "tuv", "k", "rs"]
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny")
    make_tiny_model(path, steps=60, seed=0)
    return path


def lowercase_share(completion: str, answer: Any, question: str) -> float:
    """The reward: the share of the completion's characters that are lowercase letters."""
    return sum(c.islower() for c in completion) / max(len(completion), 1)


def prompt_data(rows: int = 16) -> PromptData:
    spec = SimpleNamespace(
        name="prompts", regime="reasoning", prompt_template=None, response_column="response",
        max_reward=1.0, rubric_file_path=None, rubric_name=None, apply_chat_template=None,
        reward_timeout=30.0,
    )  # fmt: skip
    table = [{"prompt": PROMPTS[i % len(PROMPTS)], "answer": "-"} for i in range(rows)]
    data = PromptData(spec, table, table[:4], seed=0)  # type: ignore[arg-type]
    data.reward_function = RewardFunction(lowercase_share, "test:lowercase_share")
    data.env_type = "reasoning"
    return data


def make_member(tiny: Path, targets: list[str] | None = None, seed: int = 0,
                **fields: Any) -> LLMPPO:  # fmt: skip
    """An LLMPPO member over a fresh shared tiny model (r=4 LoRA, CPU)."""
    settings: dict[str, Any] = {
        "pretrained_model_name_or_path": str(tiny), "batch_size": 16, "max_output_tokens": 6,
        "gradient_checkpointing": False, "lr_actor": 1e-2, "lr_critic": 1e-2,
        "temperature": 1.0, "seed": seed, **fields,
    }  # fmt: skip
    spec = LLMPPOSpec(**settings)
    lora = LoraSpec(lora_r=4, lora_alpha=8, target_modules=targets or ["q_proj", "v_proj"],
                    lora_dropout=0.0)  # fmt: skip
    network = SimpleNamespace(
        pretrained_model_name_or_path=str(tiny), max_context_length=64, adapter_path=None,
        lora_config=lora, model_fields_set={"lora_config"},
    )  # fmt: skip
    torch.manual_seed(seed)
    shared = SharedModel(SimpleNamespace(algorithm=spec, network=network), torch.device("cpu"))  # type: ignore[arg-type]
    context = AgentContext(device=torch.device("cpu"), num_envs=1, training=None, seed=seed)  # type: ignore[arg-type]
    return LLMPPO(spec, shared=shared, context=context)


def head(member: LLMPPO) -> list[torch.Tensor]:
    return [p.detach().clone() for p in member.value_head.parameters()]


def adapter(member: LLMPPO) -> list[torch.Tensor]:
    return [p.detach().clone() for p in member.trained_parameters()]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def critic_state(member: LLMPPO) -> dict[str, torch.Tensor]:
    state = member.optimizers["critic"].state_dict()["state"]
    return {f"{i}.{k}": v.clone() for i, s in state.items() for k, v in s.items()
            if isinstance(v, torch.Tensor)}  # fmt: skip


# Rewards, GAE and whitening on hand-set numbers


def test_gae_on_one_row_of_three_tokens_by_hand() -> None:
    # A prompt position (not counted) then three completion tokens.
    rewards = torch.tensor([[0.0, 0.1, -0.2, 1.0]])
    values = torch.tensor([[0.0, 0.5, 0.4, 0.8]])
    counted = torch.tensor([[0.0, 1.0, 1.0, 1.0]])
    advantages, returns = objectives.generalised_advantages(rewards, values, counted, 0.9, 0.5)
    # delta_3 = 1.0 - 0.8 = 0.2;            A_3 = 0.2
    # delta_2 = -0.2 + 0.9*0.8 - 0.4 = 0.12; A_2 = 0.12 + 0.45*0.2 = 0.21
    # delta_1 = 0.1 + 0.9*0.4 - 0.5 = -0.04; A_1 = -0.04 + 0.45*0.21 = 0.0545
    expected = torch.tensor([[0.0, 0.0545, 0.21, 0.2]])
    assert torch.allclose(advantages, expected, atol=1e-6)
    assert torch.allclose(returns, expected + values, atol=1e-6)


def test_gae_goes_across_an_episodes_environment_turns_by_hand() -> None:
    """Turn one (two tokens), the environment's answer (not counted), turn two (one token,
    the reward): the recursion skips the answer, it does not end there."""
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[0.2, 0.3, 0.0, 0.0, 0.5]])
    counted = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0]])
    advantages, returns = objectives.generalised_advantages(rewards, values, counted, 0.9, 0.5)
    # A_4 = 1.0 - 0.5 = 0.5; delta_1 = 0.9*0.5 - 0.3 = 0.15, A_1 = 0.15 + 0.45*0.5 = 0.375
    # delta_0 = 0.9*0.3 - 0.2 = 0.07, A_0 = 0.07 + 0.45*0.375 = 0.23875
    expected = torch.tensor([[0.23875, 0.375, 0.0, 0.0, 0.5]])
    assert torch.allclose(advantages, expected, atol=1e-6)
    assert torch.allclose(returns, (expected + values) * counted, atol=1e-6)


def test_token_rewards_are_the_kl_penalty_plus_the_reward_on_the_last_token(tiny: Path) -> None:
    member = make_member(tiny, beta=0.5)
    counted = torch.tensor([[0.0, 1.0, 1.0, 1.0, 0.0]])
    old = torch.tensor([[0.0, -1.0, -2.0, -0.5, 0.0]])
    reference = torch.tensor([[0.0, -1.0, -1.0, -0.5, 0.0]])  # log-ratio 1 on token 2
    got = member.token_rewards(torch.tensor([2.0]), old, reference, counted)
    kl = math.e - 1.0 - 1.0  # exp(1) - 1 - 1
    assert torch.allclose(got, torch.tensor([[0.0, 0.0, -0.5 * kl, 2.0, 0.0]]), atol=1e-6)


def test_whitening_standardises_the_counted_tokens_only() -> None:
    values = torch.tensor([[9.0, 1.0, 2.0, 3.0], [9.0, 9.0, 5.0, 9.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
    out = whiten(values, mask)
    kept = out[mask.bool()]
    assert torch.allclose(kept.mean(), torch.tensor(0.0), atol=1e-6)
    assert torch.allclose(kept.std(), torch.tensor(1.0), atol=1e-4)
    assert torch.equal(out[~mask.bool()], torch.zeros(4))


# One member on the tiny model


def test_a_train_step_moves_the_adapter_and_the_value_head_not_the_base(tiny: Path) -> None:
    member = make_member(tiny)
    data = prompt_data()
    assert member.optimizers["adapter"].param_groups[0]["lr"] == 1e-2
    assert member.value_head.weight.dtype == torch.float32
    base = [p.detach().clone() for p in member.shared.adapters.base_parameters()]  # type: ignore[union-attr]
    adapter_before, head_before = adapter(member), head(member)
    loss = member.train_step(data.rows_at(0, 16), data)
    assert math.isfinite(loss) and member.last_rewards.shape == (16,)
    assert not same(adapter_before, adapter(member))
    assert not same(head_before, head(member))
    after = member.shared.adapters.base_parameters()  # type: ignore[union-attr]
    assert all(torch.equal(a, b) for a, b in zip(base, after, strict=True))
    assert critic_state(member)  # the critic's AdamW has taken a step


def test_the_rollout_gives_advantages_and_returns_on_completion_tokens_only(tiny: Path) -> None:
    member = make_member(tiny)
    data = prompt_data()
    [rollout] = LLMPPO.rollouts([member], [data.rows_at(0, 16)], data)
    assert rollout is not None
    counted = rollout["counted"].bool()
    for name in ("advantage", "returns", "values"):
        assert torch.equal(rollout[name][~counted], torch.zeros(int((~counted).sum())))
    assert torch.allclose(rollout["advantage"][counted].mean(), torch.tensor(0.0), atol=1e-5)
    # Value head at zero: each return is the discounted reward (the KL is 0 before a step).
    last = rollout["returns"][torch.arange(16), counted.float().cumsum(1).argmax(1)]
    assert torch.allclose(last, member.last_rewards, atol=1e-6)


def step_gradient(member: LLMPPO, rows: list[dict[str, Any]], data: PromptData) -> torch.Tensor:
    """The gradient of one step of ``member`` (recorded instead of stepping), its advantages
    moved away from a zero policy gradient."""
    scored, grads = member.scored, []

    def shifted(*args: Any) -> Any:
        rollout = scored(*args)
        rollout["advantage"] = rollout["advantage"] + 0.3
        return rollout

    def gradient() -> None:
        trained = [*member.trained_parameters(), *member.value_head.parameters()]
        grads.append(torch.cat([p.grad.flatten() for p in trained if p.grad is not None]))

    member.scored = shifted  # type: ignore[method-assign]  # this member's stand-ins
    member.step = gradient  # type: ignore[method-assign]
    member.train_step(rows, data)
    (recorded,) = grads
    return recorded


def test_micro_batches_give_the_whole_batch_gradient(tiny: Path) -> None:
    grads = []
    for size in (None, 3):  # the same seed: the same completions
        data = prompt_data()
        member = make_member(tiny, micro_batch_size_per_gpu=size)
        grads.append(step_gradient(member, data.rows_at(0, 16), data))
    assert grads[0].abs().sum() > 0 and torch.allclose(grads[0], grads[1], atol=1e-6)


def test_learning_rates_follow_their_hyperparameters(tiny: Path) -> None:
    member = make_member(tiny)
    member.set_hyperparameter("lr_critic", 3e-3)
    member.set_hyperparameter("lr_actor", 2e-4)
    assert member.optimizers["critic"].param_groups[0]["lr"] == 3e-3
    assert member.optimizers["adapter"].param_groups[0]["lr"] == 2e-4
    assert member.spec.lr_critic == 3e-3 and member.hyperparameters()["lr_critic"] == 3e-3


def test_a_clone_has_its_own_value_head_and_critic_state(tiny: Path) -> None:
    parent = make_member(tiny)
    data = prompt_data()
    parent.train_step(data.rows_at(0, 16), data)
    twin = parent.clone(1)
    assert isinstance(twin, LLMPPO)
    assert same(head(parent), head(twin)) and twin.index == 1
    pointers = {p.data_ptr() for p in parent.value_head.parameters()}
    assert not pointers & {p.data_ptr() for p in twin.value_head.parameters()}
    parent_state, twin_state = critic_state(parent), critic_state(twin)
    assert parent_state.keys() == twin_state.keys() and parent_state
    assert all(torch.equal(parent_state[k], twin_state[k]) for k in parent_state)
    # The twin's optimizer trains the twin's head, not the parent's.
    trained = {p.data_ptr() for g in twin.optimizers["critic"].param_groups for p in g["params"]}
    assert trained == {p.data_ptr() for p in twin.value_head.parameters()}
    head_before, adapter_before = head(parent), adapter(parent)
    twin.train_step(data.rows_at(16, 16), data)
    assert same(head_before, head(parent)) and same(adapter_before, adapter(parent))
    assert all(torch.equal(parent_state[k], v) for k, v in critic_state(parent).items())
    assert not same(head(parent), head(twin))


def test_state_dict_round_trips_the_value_head(tiny: Path, tmp_path: Path) -> None:
    member = make_member(tiny)
    data = prompt_data()
    member.train_step(data.rows_at(0, 16), data)
    state = member.state_dict()
    saved = state["extra"]["value_head"]
    assert all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in saved.values())
    torch.save(state["extra"], tmp_path / "extra.pt")  # plain tensors: a weights-only load reads it
    extra = torch.load(tmp_path / "extra.pt", weights_only=True)
    expected = head(member)
    with torch.no_grad():  # the saved state is a copy
        member.value_head.weight.add_(1.0)
    other = LLMPPO(member.spec, shared=member.shared, context=member.context, index=3)
    assert not same(head(other), expected)
    other.load_state_dict({**state, "extra": extra})
    assert same(head(other), expected) and other.index == 0
    assert all(torch.equal(v, critic_state(member)[k]) for k, v in critic_state(other).items())


def test_score_is_the_mean_reward_of_greedy_completions(tiny: Path) -> None:
    member = make_member(tiny)
    data = prompt_data()
    scores = member.score(data.test, data)
    assert 0.0 <= scores.fitness <= 1.0
    assert scores.metrics["mean reward"] == scores.fitness and len(scores.samples) == 3
    assert member.score(data.test, data).fitness == scores.fitness  # greedy: deterministic


def test_a_few_iterations_raise_the_mean_sampled_reward(tiny: Path) -> None:
    member = make_member(tiny, targets=ALL_LINEAR, lr_actor=3e-2, update_epochs=2,
                         batch_size=32, max_output_tokens=8)  # fmt: skip
    data = prompt_data(32)
    means = []
    for iteration in range(40):
        member.train_step(data.rows_at(32 * iteration, 32), data)
        means.append(float(member.last_rewards.mean()))
    first, last = sum(means[:8]) / 8, sum(means[-8:]) / 8
    assert last > first + 0.05, (first, last)


def test_critic_warmup_trains_the_value_head_alone_then_the_policy(tiny: Path) -> None:
    member, data = make_member(tiny, critic_warmup_steps=1), prompt_data()
    adapter_before, head_before = adapter(member), head(member)
    member.train_step(data.rows_at(0, 16), data)
    assert same(adapter(member), adapter_before) and not same(head(member), head_before)
    member.train_step(data.rows_at(16, 16), data)  # the warm-up is over
    assert not same(adapter(member), adapter_before)
    assert member.updates == 2


def test_a_shared_clip_bounds_the_joint_gradient_norm(tiny: Path) -> None:
    member, data = make_member(tiny, share_grad_clip=True, max_grad_norm=1e-3), prompt_data()
    norms: list[float] = []
    original = torch.nn.utils.clip_grad_norm_

    def watched(parameters: Any, max_norm: float) -> torch.Tensor:
        listed = list(parameters)
        norms.append(len(listed))
        return original(listed, max_norm)

    torch.nn.utils.clip_grad_norm_ = watched  # type: ignore[assignment]
    try:
        member.train_step(data.rows_at(0, 16), data)
    finally:
        torch.nn.utils.clip_grad_norm_ = original
    joint = len(member.trained_parameters()) + len(list(member.value_head.parameters()))
    assert norms[0] == joint  # adapter and head clipped as one vector first
