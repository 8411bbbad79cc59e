"""The objectives of LLM fine-tuning, as functions of tensors (no model, no tokenizer).

- SFT: next-token cross-entropy on the response only; the prompt and padding are masked.
- DPO (Rafailov et al., 2023, "Direct Preference Optimization", arXiv:2305.18290):
  ``-log sigmoid(beta * ((log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l))))``.
- GRPO (Shao et al., 2024, "DeepSeekMath", arXiv:2402.03300): each completion's advantage is
  its reward against its prompt's group; PPO's clipped surrogate per token (Schulman et al.,
  2017, arXiv:1707.06347), or GSPO's per sequence, or CISPO's clipped weights, plus ``beta``
  times the per-token KL estimate ``exp(ref - logp) - (ref - logp) - 1`` against the frozen
  reference (Schulman, 2020, "Approximating KL divergence"); tokens far off the sampling
  policy are masked, and the loss is averaged over the batch's tokens, a micro-batch's or
  each completion's (:func:`reduce_loss`).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

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
    logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log p, mask)``, both ``[B, T - 1]``: the log-probability the model gave each next
    token (``logits[:, t]`` predicts ``labels[:, t + 1]``) and which of them count, under
    the distribution sampled at ``temperature`` (the logits divided by it)."""
    targets = labels[:, 1:]
    mask = targets != IGNORE
    scaled = logits[:, :-1].float()
    scaled = scaled / temperature if temperature != 1.0 else scaled
    log_probs = torch.log_softmax(scaled, dim=-1)
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


def kl_penalty(log_probs: torch.Tensor, reference_log_probs: torch.Tensor) -> torch.Tensor:
    """The per-token estimate ``exp(ref - logp) - (ref - logp) - 1`` of KL(policy || ref),
    non-negative and unbiased (Schulman, 2020, "Approximating KL divergence")."""
    log_ratio = reference_log_probs - log_probs
    return torch.exp(log_ratio) - log_ratio - 1


class Penalty(NamedTuple):
    """The KL penalty towards the reference: its weight ``beta``, each token's estimate clamped
    to ``clamp`` (None: not), and weighted by its importance ratio to the sampling policy
    (``ratio_weighted``, DeepSeek-V3.2's bias correction off-policy)."""

    beta: float
    clamp: float | None = None
    ratio_weighted: bool = False


class OffPolicyMasks(NamedTuple):
    """Tokens kept out of the loss when the policy has moved from the one that sampled them:
    those whose ratio leaves ``token_bounds`` (IcePop), and every token of a completion of
    negative advantage whose mean ``log(sampling / current)`` exceeds ``sequence_threshold``
    (DeepSeek-V3.2's off-policy sequence masking). None: no such mask."""

    token_bounds: tuple[float, float] | None = None
    sequence_threshold: float | None = None


NO_MASKS = OffPolicyMasks()


def policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    reference_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    ratio: Literal["token", "sequence", "cispo"],
    clip_low: float,
    clip_high: float,
    penalty: Penalty,
    masks: OffPolicyMasks = NO_MASKS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, kept)``, both ``[N, T]``: each token's policy loss plus its KL penalty, and the
    tokens that count (``mask`` less the off-policy masks), for ``[N, T]`` log-probabilities
    now, at sampling and under the reference and ``[N, T]`` advantages.

    ``ratio`` is PPO's clipped surrogate per token (GRPO; Schulman et al., 2017), on each
    completion's length-normalised sequence ratio ``exp(mean_t(logp - old))`` with its first
    token's advantage (GSPO; Zheng et al., 2025, arXiv:2507.18071), or REINFORCE on every token
    weighted by its ratio clipped to ``[clip_low, clip_high]`` and detached (CISPO; MiniMax,
    2025, arXiv:2506.13585), which drops no token's gradient the way the clip does.
    """
    log_ratio = log_probs - old_log_probs
    token_ratio = torch.exp(log_ratio)
    if ratio == "cispo":
        weight = token_ratio.clamp(clip_low, clip_high).detach()
        policy = -weight * advantages * log_probs
    else:
        if ratio == "sequence":
            count = mask.sum(dim=1, keepdim=True).clamp(min=1)
            rate = torch.exp((log_ratio * mask).sum(dim=1, keepdim=True) / count)
            advantages = advantages[:, :1].expand_as(mask)
        else:
            rate = token_ratio
        policy = -torch.min(rate * advantages, rate.clamp(clip_low, clip_high) * advantages)
    kl = kl_penalty(log_probs, reference_log_probs)
    if penalty.clamp is not None:
        kl = kl.clamp(max=penalty.clamp)
    if penalty.ratio_weighted:
        kl = kl * token_ratio.detach()
    kept = mask * _on_policy(log_ratio.detach(), advantages, mask, masks)
    return policy + penalty.beta * kl, kept


def _on_policy(
    log_ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, masks: OffPolicyMasks
) -> torch.Tensor:
    """1 for the tokens the off-policy masks keep, 0 for the others (``[N, T]``)."""
    keep = torch.ones_like(mask)
    if masks.token_bounds is not None:
        low, high = masks.token_bounds
        ratio = torch.exp(log_ratio)
        keep = keep * ((ratio >= low) & (ratio <= high)).to(mask.dtype)
    if masks.sequence_threshold is not None:
        count = mask.sum(dim=1).clamp(min=1)
        gap = (-log_ratio * mask).sum(dim=1) / count  # mean log(sampling / current)
        negative = (advantages * mask).sum(dim=1) < 0
        dropped = negative & (gap > masks.sequence_threshold)
        keep = keep * (~dropped).unsqueeze(1).to(mask.dtype)
    return keep


#: What a loss averages over: ``accumulation_window``, every counted token of the member's
#: batch; ``micro_batch``, each micro-batch's tokens; ``episode``, each completion's tokens,
#: then completions, so that long completions weigh no more than short ones.
LossNorm = Literal["accumulation_window", "micro_batch", "episode"]


def reduce_loss(
    loss: torch.Tensor, kept: torch.Tensor, counted: torch.Tensor, norm: LossNorm,
    window_tokens: float, share: float,
) -> torch.Tensor:  # fmt: skip
    """``[N, T]`` per-token ``loss`` over the ``kept`` tokens of a part of a batch, averaged as
    ``norm`` says: by the part's ``counted`` tokens (micro_batch), its completions' (episode),
    or the ``window_tokens`` counted in the member's whole batch (accumulation_window).
    ``share`` is the part's share of the batch's rows: a part's loss is weighed by it when the
    parts' gradients are added, so the window's mean is returned as the part's share of it."""
    total = (loss * kept).sum()
    if norm == "micro_batch":
        return total / counted.sum().clamp(min=1)
    if norm == "episode":
        per_row = (loss * kept).sum(dim=1) / counted.sum(dim=1).clamp(min=1)
        return per_row.mean()
    return total / max(window_tokens, 1.0) / share


def generalised_advantages(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE (Schulman et al., 2016, arXiv:1506.02438) over ``[N, T]`` per-token rewards and
    value estimates of generated tokens (``mask``); returns ``(advantages, returns)``. The
    tokens of a row that ``mask`` leaves out (an episode's environment turns between the
    model's) are skipped: the recursion goes from each counted token to the next counted one.
    The episode ends after each row's last counted token."""
    advantages = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], device=rewards.device)
    next_value = torch.zeros_like(running)
    for t in reversed(range(rewards.shape[1])):
        live = mask[:, t].bool()
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        here = delta + gamma * lam * running
        running = torch.where(live, here, running)
        advantages[:, t] = torch.where(live, here, torch.zeros_like(here))
        next_value = torch.where(live, values[:, t], next_value)
    return advantages, (advantages + values) * mask
