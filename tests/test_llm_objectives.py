"""The LLM objectives against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from agile_llm.objectives import (
    IGNORE,
    dpo_loss,
    group_advantages,
    grpo_loss,
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


def test_grpo_clips_the_ratio_and_adds_the_kl_penalty() -> None:
    old = torch.zeros(2, 2)
    new = torch.tensor([[math.log(1.5), 0.0], [math.log(0.5), 0.0]])
    reference = torch.zeros(2, 2)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])  # the second completion has one token
    advantages = torch.tensor([1.0, -1.0])
    loss = grpo_loss(new, old, reference, advantages, mask, clip_coef=0.2, beta=0.1)
    # completion 1: token 1 ratio 1.5 clipped to 1.2 (A > 0): surrogate 1.2; KL at log-ratio
    # -log 1.5: 1/1.5 + log 1.5 - 1. Token 2: ratio 1, surrogate 1, KL 0.
    kl_1 = 1 / 1.5 + math.log(1.5) - 1
    first = (-(1.2 - 0.1 * kl_1) - 1.0) / 2
    # completion 2: ratio 0.5 (A < 0): min(-0.5, -0.8) = -0.8; KL at log 2: 2 - log 2 - 1.
    kl_2 = 2 - math.log(2) - 1
    second = -(-0.8 - 0.1 * kl_2)
    assert float(loss) == pytest.approx((first + second) / 2, rel=1e-6)
