"""The LLM objectives against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from agile_llm.objectives import (
    IGNORE,
    OffPolicyMasks,
    Penalty,
    dpo_loss,
    group_advantages,
    policy_loss,
    reduce_loss,
    response_labels,
    sft_loss,
    token_log_probs,
)


def test_response_labels_mask_the_prompt_and_the_padding() -> None:
    ids = torch.tensor([[5, 6, 7, 8, 0], [5, 6, 7, 8, 9]])
    attention = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    labels = response_labels(ids, torch.tensor([2, 3]), attention)
    assert labels.tolist() == [[IGNORE, IGNORE, 7, 8, IGNORE], [IGNORE, IGNORE, IGNORE, 8, 9]]


def test_sft_loss_counts_only_response_tokens() -> None:
    vocabulary = 4
    logits = torch.zeros(1, 3, vocabulary)
    logits[0, 1, 2] = 2.0  # position 1 favours token 2
    logits[0, 0, :] = torch.tensor([0.0, 0.0, 0.0, 50.0])  # a bad prediction, but of a prompt token
    labels = torch.tensor([[1, IGNORE, 2]])  # only position 2 (predicted by 1) counts
    expected = -math.log(math.exp(2) / (math.exp(2) + 3))
    assert float(sft_loss(logits, labels)) == pytest.approx(expected, rel=1e-5)


def test_token_log_probs_pick_the_next_token_and_mask_the_rest() -> None:
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.2, 0.7], [1 / 3] * 3]]))
    labels = torch.tensor([[IGNORE, 1, 2]])
    picked, mask = token_log_probs(logits, labels)
    assert mask.tolist() == [[True, True]]
    assert picked[0].tolist() == pytest.approx([math.log(0.25), math.log(0.7)], rel=1e-5)


def test_dpo_loss_by_hand() -> None:
    chosen, rejected = torch.tensor([-4.0, -6.0]), torch.tensor([-5.0, -5.0])
    ref_chosen, ref_rejected = torch.tensor([-4.5, -5.0]), torch.tensor([-5.0, -5.5])
    result = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=0.5)
    # pair 1: 0.5 * ((-4 + 4.5) - (-5 + 5)) = 0.25; pair 2: 0.5 * ((-6 + 5) - (-5 + 5.5)) = -0.75
    expected = -(math.log(1 / (1 + math.exp(-0.25))) + math.log(1 / (1 + math.exp(0.75)))) / 2
    assert float(result.loss) == pytest.approx(expected, rel=1e-6)
    assert float(result.accuracy) == 0.5
    assert float(result.margin) == pytest.approx(-0.25)


def test_group_advantages_standardise_within_each_prompt() -> None:
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]])
    advantages = group_advantages(rewards, eps=0.0 + 1e-8)
    assert advantages[0].tolist() == pytest.approx([1.0, -1.0, -1.0, 1.0], rel=1e-6)
    assert advantages[1].tolist() == [0.0, 0.0, 0.0, 0.0]  # nothing to learn from a tie


def _grpo(new, old, reference, advantages, mask, **settings):  # type: ignore[no-untyped-def]
    """Per-token GRPO terms with the clip of 0.2 and a KL weight of 0.1, masks off."""
    options = {"ratio": "token", "clip_low": 0.8, "clip_high": 1.2, "penalty": Penalty(0.1)}
    return policy_loss(new, old, reference, advantages, mask, **{**options, **settings})


def test_grpo_clips_the_ratio_and_adds_the_kl_penalty() -> None:
    old = torch.zeros(2, 2)
    new = torch.tensor([[math.log(1.5), 0.0], [math.log(0.5), 0.0]])
    reference = torch.zeros(2, 2)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])  # the second completion has one token
    advantages = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    loss, kept = _grpo(new, old, reference, advantages, mask)
    assert kept.tolist() == mask.tolist()
    # completion 1: token 1 ratio 1.5 clipped to 1.2 (A > 0): surrogate 1.2; KL at log-ratio
    # -log 1.5: 1/1.5 + log 1.5 - 1. Token 2: ratio 1, surrogate 1, KL 0.
    kl_1 = 1 / 1.5 + math.log(1.5) - 1
    token_1, token_2 = -(1.2 - 0.1 * kl_1), -1.0
    # completion 2: ratio 0.5 (A < 0): min(-0.5, -0.8) = -0.8; KL at log 2: 2 - log 2 - 1.
    kl_2 = 2 - math.log(2) - 1
    token_3 = -(-0.8 - 0.1 * kl_2)
    episode = reduce_loss(loss, kept, mask, "episode", 3.0, 1.0)
    assert float(episode) == pytest.approx(((token_1 + token_2) / 2 + token_3) / 2, rel=1e-6)
    window = reduce_loss(loss, kept, mask, "accumulation_window", 3.0, 1.0)
    assert float(window) == pytest.approx((token_1 + token_2 + token_3) / 3, rel=1e-6)
    micro = reduce_loss(loss, kept, mask, "micro_batch", 3.0, 1.0)
    assert float(micro) == pytest.approx(float(window), rel=1e-6)  # one micro-batch: the window


def test_the_window_mean_is_the_same_whatever_the_micro_batches() -> None:
    generator = torch.Generator().manual_seed(0)
    loss = torch.rand(4, 3, generator=generator)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    whole = reduce_loss(loss, mask, mask, "accumulation_window", 7.0, 1.0)
    # groups.learn weighs each part by its share of the rows: the parts add up to the window
    parts = [reduce_loss(loss[rows], mask[rows], mask[rows], "accumulation_window", 7.0, 0.5) * 0.5
             for rows in (slice(0, 2), slice(2, 4))]  # fmt: skip
    assert float(sum(parts)) == pytest.approx(float(whole), rel=1e-6)
    per_part = [reduce_loss(loss[rows], mask[rows], mask[rows], "micro_batch", 7.0, 0.5) * 0.5
                for rows in (slice(0, 2), slice(2, 4))]  # fmt: skip
    assert float(sum(per_part)) != pytest.approx(float(whole), rel=1e-3)  # tokens 4 and 3


def test_tokens_far_off_the_sampling_policy_are_masked() -> None:
    old = torch.zeros(1, 3)
    new = torch.log(torch.tensor([[0.4, 1.0, 6.0]]))  # ratios 0.4, 1 and 6 to the sampler
    mask = torch.ones(1, 3)
    masks = OffPolicyMasks(token_bounds=(0.5, 5.0))
    _, kept = _grpo(new, old, old, torch.ones(1, 3), mask, masks=masks)
    assert kept.tolist() == [[0.0, 1.0, 0.0]]


def test_a_drifted_completion_of_negative_advantage_is_masked_whole() -> None:
    old = torch.zeros(2, 2)
    new = torch.full((2, 2), -0.1)  # mean log(sampling / current) = 0.1 on both rows
    advantages = torch.tensor([[-1.0, -1.0], [1.0, 1.0]])
    masks = OffPolicyMasks(sequence_threshold=0.03)
    _, kept = _grpo(new, old, old, advantages, torch.ones(2, 2), masks=masks)
    assert kept.tolist() == [[0.0, 0.0], [1.0, 1.0]]  # only the negative one is dropped
    loose = OffPolicyMasks(sequence_threshold=0.2)
    _, kept = _grpo(new, old, old, advantages, torch.ones(2, 2), masks=loose)
    assert kept.tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_the_kl_estimate_is_clamped_and_weighted_by_the_ratio() -> None:
    new = torch.tensor([[0.0, math.log(2.0)]])
    old = torch.zeros(1, 2)
    reference = torch.tensor([[-20.0, 0.0]])  # a huge KL on token 1
    zero = torch.zeros(1, 2)  # no advantage: the loss is the penalty alone
    loss, _ = _grpo(new, old, reference, zero, torch.ones(1, 2), penalty=Penalty(1.0, clamp=10.0))
    assert float(loss[0, 0]) == pytest.approx(10.0)
    kl = 0.5 + math.log(2.0) - 1  # exp(-log 2) + log 2 - 1
    weighted = Penalty(1.0, ratio_weighted=True)
    loss, _ = _grpo(new, old, reference, zero, torch.ones(1, 2), penalty=weighted)
    assert float(loss[0, 1]) == pytest.approx(2.0 * kl, rel=1e-6)


def test_gspo_takes_one_ratio_per_completion_and_cispo_detaches_its_weight() -> None:
    old = torch.zeros(1, 2)
    new = torch.tensor([[math.log(1.1), math.log(1.3)]], requires_grad=True)
    advantages = torch.ones(1, 2)
    loss, _ = _grpo(new, old, old, advantages, torch.ones(1, 2), ratio="sequence",
                    penalty=Penalty(0.0), clip_high=2.0)  # fmt: skip
    sequence = math.exp((math.log(1.1) + math.log(1.3)) / 2)
    assert loss.detach().tolist()[0] == pytest.approx([-sequence, -sequence], rel=1e-6)
    loss, _ = _grpo(new, old, old, advantages, torch.ones(1, 2), ratio="cispo",
                    penalty=Penalty(0.0))  # fmt: skip
    loss.sum().backward()
    assert new.grad is not None  # REINFORCE through log p, the weight clipped to 1.2
    assert new.grad.tolist()[0] == pytest.approx([-1.1, -1.2], rel=1e-6)
