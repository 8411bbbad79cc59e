"""The objectives of LLM fine-tuning, as functions of tensors (no model, no tokenizer).

- SFT: next-token cross-entropy on the response only; the prompt and padding are masked.
- DPO (Rafailov et al., 2023, "Direct Preference Optimization", arXiv:2305.18290):
  ``-log sigmoid(beta * ((log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l))))``.
- GRPO (Shao et al., 2024, "DeepSeekMath", arXiv:2402.03300): each completion's advantage is
  its reward standardised within its prompt's group; PPO's clipped surrogate per token
  (Schulman et al., 2017, arXiv:1707.06347), plus ``beta`` times the per-token KL estimate
  ``exp(ref - logp) - (ref - logp) - 1`` against the frozen reference (Schulman, 2020,
  "Approximating KL divergence"), averaged over each completion's tokens, then over
  completions.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

IGNORE = -100  # the label of a token no loss is computed on (the transformers convention)


def response_labels(
    input_ids: torch.Tensor, prompt_lengths: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """``input_ids`` as labels with the prompt tokens and the padding set to :data:`IGNORE`.

    :param input_ids: ``[B, T]`` prompt then response, right-padded.
    :param prompt_lengths: ``[B]`` tokens of each row's prompt.
    :param attention_mask: ``[B, T]`` 1 for real tokens, 0 for padding.
    """
    positions = torch.arange(input_ids.shape[1], device=input_ids.device)
    in_prompt = positions.unsqueeze(0) < prompt_lengths.unsqueeze(1)
    return input_ids.masked_fill(in_prompt | (attention_mask == 0), IGNORE)


def token_log_probs(
    logits: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log p, mask)``, both ``[B, T - 1]``: the log-probability the model gave each next
    token (``logits[:, t]`` predicts ``labels[:, t + 1]``) and which of them count."""
    targets = labels[:, 1:]
    mask = targets != IGNORE
    log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    picked = log_probs.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return picked * mask, mask


def sft_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the tokens whose label is not :data:`IGNORE`."""
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1),
        ignore_index=IGNORE,
    )  # fmt: skip


class PreferenceLoss(NamedTuple):
    """DPO's loss, with how often and by how much the policy prefers the chosen response."""

    loss: torch.Tensor
    accuracy: torch.Tensor
    margin: torch.Tensor


def dpo_loss(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    reference_chosen: torch.Tensor,
    reference_rejected: torch.Tensor,
    beta: float,
) -> PreferenceLoss:
    """DPO on ``[B]`` summed response log-probabilities under the policy and the reference.

    ``accuracy`` is the share of pairs whose implicit reward (``beta`` times the log-ratio to
    the reference) is higher for the chosen response; ``margin`` its mean difference.
    """
    chosen_reward = beta * (chosen - reference_chosen)
    rejected_reward = beta * (rejected - reference_rejected)
    difference = chosen_reward - rejected_reward
    return PreferenceLoss(
        loss=-F.logsigmoid(difference).mean(),
        accuracy=(difference > 0).float().mean(),
        margin=difference.mean(),
    )


def group_advantages(rewards: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """``[P, G]`` rewards of ``G`` completions for each of ``P`` prompts, standardised within
    each prompt's group (population standard deviation; a group of equal rewards gets 0)."""
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, unbiased=False, keepdim=True)
    return (rewards - mean) / (std + eps)


def grpo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    reference_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_coef: float,
    beta: float,
) -> torch.Tensor:
    """GRPO's loss for ``[N, T]`` per-token log-probabilities of ``N`` completions under the
    policy being updated, the policy that sampled them and the reference, their ``[N]``
    advantages and the ``[N, T]`` mask of completion tokens: :func:`clipped_token_loss` with
    each completion's advantage on every one of its tokens and the ratio clipped to
    ``1 -/+ clip_coef``."""
    return clipped_token_loss(
        log_probs, old_log_probs, reference_log_probs, advantages.unsqueeze(1).expand_as(mask),
        mask, clip_low=1 - clip_coef, clip_high=1 + clip_coef, beta=beta,
    )  # fmt: skip


def kl_penalty(log_probs: torch.Tensor, reference_log_probs: torch.Tensor) -> torch.Tensor:
    """The per-token estimate ``exp(ref - logp) - (ref - logp) - 1`` of KL(policy || ref),
    non-negative and unbiased (Schulman, 2020, "Approximating KL divergence")."""
    log_ratio = reference_log_probs - log_probs
    return torch.exp(log_ratio) - log_ratio - 1


def _token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over each row's counted tokens, then over rows."""
    return ((values * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)).mean()


def gspo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    reference_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    beta: float,
) -> torch.Tensor:
    """GSPO (Zheng et al., 2025, "Group Sequence Policy Optimization", arXiv:2507.18071): the
    clipped surrogate on each completion's length-normalised sequence ratio
    ``exp(mean_t(logp - old))`` instead of per-token ratios, plus the KL penalty."""
    tokens = mask.sum(dim=1).clamp(min=1)
    ratio = torch.exp(((log_probs - old_log_probs) * mask).sum(dim=1) / tokens)
    surrogate = torch.min(ratio * advantages, ratio.clamp(clip_low, clip_high) * advantages)
    kl = _token_mean(kl_penalty(log_probs, reference_log_probs), mask)
    return -surrogate.mean() + beta * kl


def cispo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    reference_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    beta: float,
) -> torch.Tensor:
    """CISPO (MiniMax, 2025, "MiniMax-M1", arXiv:2506.13585): REINFORCE on every token, each
    weighted by its importance ratio clipped to ``[clip_low, clip_high]`` and detached, so no
    token's gradient is dropped the way PPO's clip drops it; averaged over all the batch's
    tokens, plus the KL penalty."""
    weight = torch.exp(log_probs - old_log_probs).clamp(clip_low, clip_high).detach()
    objective = weight * advantages.unsqueeze(1) * log_probs
    kl = kl_penalty(log_probs, reference_log_probs)
    per_token = (-objective + beta * kl) * mask
    return per_token.sum() / mask.sum().clamp(min=1)


def clipped_token_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    reference_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    beta: float,
) -> torch.Tensor:
    """PPO's clipped surrogate on ``[N, T]`` per-token advantages (REINFORCE and PPO for
    language models), plus the KL penalty, averaged per completion then over completions."""
    ratio = torch.exp(log_probs - old_log_probs)
    surrogate = torch.min(ratio * advantages, ratio.clamp(clip_low, clip_high) * advantages)
    return _token_mean(-surrogate + beta * kl_penalty(log_probs, reference_log_probs), mask)


def generalised_advantages(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE (Schulman et al., 2016, arXiv:1506.02438) over ``[N, T]`` per-token rewards and
    value estimates of completion tokens (``mask``); returns ``(advantages, returns)``. The
    episode ends after each row's last counted token."""
    advantages = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], device=rewards.device)
    next_value = torch.zeros_like(running)
    for t in reversed(range(rewards.shape[1])):
        live = mask[:, t].float()
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = (delta + gamma * lam * running) * live
        advantages[:, t] = running
        next_value = values[:, t] * live
    return advantages, advantages + values
