"""A population's training step as one computation.

One by one, each member's step is its own forward and backward pass of the shared base model.
Together, the members' batches go side by side through one forward pass, each row through its
own member's adapter (PEFT's mixed-adapter batches, which it offers for inference, used here
for training: the LoRA path is differentiable), and one backward pass of the sum of the
members' losses, whose gradient reaches each adapter from its own loss only. Each member then
clips and steps its own optimizer. The updates are the ones each member would make alone, up
to the order of floating-point sums.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from agile_llm import objectives, text
from agile_llm.objectives import IGNORE

if TYPE_CHECKING:
    from agile_llm.algorithms import DPO, SFT

Row = dict[str, Any]


def can_stack(members: list[Any]) -> bool:
    """Whether ``members`` can take one step together: two or more, of one class, over one
    base, each taking its whole batch at once (no micro-batches)."""
    if len(members) < 2 or len({type(m) for m in members}) != 1:
        return False
    if len({id(m.shared) for m in members}) != 1:
        return False
    return all(getattr(m.spec, "micro_batch_size_per_gpu", None) is None for m in members)


def side_by_side(batches: list[text.Sequences], pad: int) -> tuple[text.Sequences, list[slice]]:
    """The batches' rows in one right-padded batch, and each batch's rows in it."""
    width = max(batch.ids.shape[1] for batch in batches)
    spans, start = [], 0
    for batch in batches:
        spans.append(slice(start, start + batch.ids.shape[0]))
        start += batch.ids.shape[0]

    def widened(tensor: torch.Tensor, fill: int) -> torch.Tensor:
        extra = width - tensor.shape[1]
        return torch.nn.functional.pad(tensor, (0, extra), value=fill) if extra else tensor

    joined = text.Sequences(
        torch.cat([widened(b.ids, pad) for b in batches]),
        torch.cat([widened(b.mask, 0) for b in batches]),
        torch.cat([widened(b.labels, IGNORE) for b in batches]),
    )
    return joined, spans


def sft_step(members: list[SFT], rows: list[list[Row]], data: Any) -> list[float]:
    """One :meth:`~agile_llm.algorithms.SFT.train_step` of every member, together.

    :param rows: each member's batch of rows.
    :returns: each member's loss, as its own step returns it.
    """
    shared = members[0].shared
    batch, spans = side_by_side(
        [m._sequences(r, data) for m, r in zip(members, rows, strict=True)],
        int(shared.tokenizer.pad_token_id),
    )
    losses = [0.0] * len(members)
    epochs = [int(m.spec.update_epochs) for m in members]
    for epoch in range(max(epochs)):
        taking = [i for i, count in enumerate(epochs) if count > epoch]
        index = torch.cat([torch.arange(spans[i].start, spans[i].stop) for i in taking])
        names = [members[i].adapter for i in taking for _ in range(spans[i].stop - spans[i].start)]
        ids, mask, labels = batch.ids[index], batch.mask[index], batch.labels[index]
        positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)
        assert shared.adapters is not None
        with shared.adapters.mixed(names):
            model = shared.model.train()
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
            total = logits.new_zeros(())
            at = 0
            for i in taking:
                size = spans[i].stop - spans[i].start
                loss = objectives.sft_loss(logits[at : at + size], labels[at : at + size])
                losses[i] = float(loss.detach())
                total = total + loss
                at += size
            total.backward()
        for i in taking:
            members[i].step()
    return losses


def dpo_step(members: list[DPO], rows: list[list[Row]], data: Any) -> list[float]:
    """One :meth:`~agile_llm.algorithms.DPO.train_step` of every member, together: one
    reference pass (adapters off) for every member's pairs, then per epoch one policy pass.

    :returns: each member's loss, as its own step returns it.
    """
    shared = members[0].shared
    assert shared.adapters is not None
    batch, spans = side_by_side(
        [m._pairs(r, data) for m, r in zip(members, rows, strict=True)],
        int(shared.tokenizer.pad_token_id),
    )
    with torch.no_grad(), shared.reference():
        reference = members[0]._summed(shared.model, batch, torch.arange(batch.ids.shape[0]))
    losses = [0.0] * len(members)
    epochs = [int(m.spec.update_epochs) for m in members]
    for epoch in range(max(epochs)):
        taking = [i for i, count in enumerate(epochs) if count > epoch]
        index = torch.cat([torch.arange(spans[i].start, spans[i].stop) for i in taking])
        names = [members[i].adapter for i in taking for _ in range(spans[i].stop - spans[i].start)]
        with shared.adapters.mixed(names):
            policy = members[0]._summed(shared.model.train(), batch, index)
            total = policy.new_zeros(())
            at = 0
            for i in taking:
                size, span = spans[i].stop - spans[i].start, spans[i]
                chosen = batch.labels[span.start : span.start + size // 2]
                result = members[i].pair_loss(policy[at : at + size], reference[span], chosen)
                losses[i] = float(result.loss.detach())
                total = total + result.loss
                at += size
            total.backward()
        for i in taking:
            members[i].step()
    return losses
