"""A population's steps and scores as one computation.

One by one, each member's step is its own forward and backward pass of the shared base model,
and its own generation call. Together, the members' batches go side by side through one pass,
each row through its own member's adapter (:meth:`~agile_llm.adapters.AdapterPopulation.mixed`:
a LoRA layer computes each member's run of rows with that member's weights). The loss is the
sum of the members' own losses, so each adapter's gradient comes from its own loss only, and
each member then clips and steps its own optimizer: the updates are those each member would
make alone, up to the order of floating-point sums (tests hold them to it). Sampling draws
from one seed for the whole call, not one per member. Members are typed loosely: the
algorithms (:mod:`.algorithms`) call this module, never the other way round.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from agile_llm import multiturn, objectives, text
from agile_llm.objectives import IGNORE

Row = dict[str, Any]


def can_stack(members: list[Any]) -> bool:
    """Whether ``members`` can take one step together: two or more, of one class, over one
    base whose LoRA layers can mix adapters in a batch, each taking its whole batch at once
    (no micro-batches)."""
    if len(members) < 2 or len({type(m) for m in members}) != 1:
        return False
    if len({id(m.shared) for m in members}) != 1:
        return False
    adapters = members[0].shared.adapters
    if adapters is None or not adapters.mixable:
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


def _epochs(
    members: list[Any], spans: list[slice]
) -> Iterator[tuple[list[int], torch.Tensor, list[str]]]:
    """For each epoch of the longest ``update_epochs``: the members taking it, their rows of
    the joined batch (``spans[i]`` member ``i``'s) and each row's adapter."""
    epochs = [int(m.spec.update_epochs) for m in members]
    for epoch in range(max(epochs)):
        taking = [i for i, count in enumerate(epochs) if count > epoch]
        index = torch.cat([torch.arange(spans[i].start, spans[i].stop) for i in taking])
        names = [members[i].adapter for i in taking for _ in range(spans[i].stop - spans[i].start)]
        yield taking, index, names


def sft_step(members: list[Any], rows: list[list[Row]], data: Any) -> list[float]:
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
    for taking, index, names in _epochs(members, spans):
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


def dpo_step(members: list[Any], rows: list[list[Row]], data: Any) -> list[float]:
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
    for taking, index, names in _epochs(members, spans):
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


#: Settings every member of a GRPO-family population must share to sample together.
_SAMPLING = ("temperature", "max_output_tokens", "min_output_tokens")


def compatible(members: list[Any]) -> list[list[int]]:
    """``members``' positions grouped by what a step together needs them to share (class,
    micro-batch size, sampling settings), in order of first appearance: a population whose
    evolution gave members different temperatures still stacks in groups."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, member in enumerate(members):
        names = ("micro_batch_size_per_gpu", *_SAMPLING)
        key = (type(member), *(repr(getattr(member.spec, name, None)) for name in names))
        groups.setdefault(key, []).append(index)
    return list(groups.values())


def can_sample_together(members: list[Any]) -> bool:
    """Whether ``members`` can also generate in one call: :func:`can_stack`, and the same
    sampling settings."""
    return can_stack(members) and all(
        len({getattr(m.spec, name, None) for m in members}) == 1 for name in _SAMPLING
    )


def grpo_step(members: list[Any], rows: list[list[Row]], data: Any) -> list[float]:
    """One :meth:`~agile_llm.algorithms.GRPO.train_step` of every member, together: one
    generation call samples every member's groups (each row through its own adapter), then
    one pass for the log-probabilities at sampling, one under the reference, and one policy
    pass per epoch. Each member's generator is drawn from as alone; the call samples with the
    first member's draw, so completions are those of another seed, not of each member's own.

    :returns: each member's loss, as its own step returns it.
    """
    shared = members[0].shared
    assert shared.adapters is not None
    sample = _sample_episodes if data.env_type == "multiturn" else _sample
    sampled = sample(members, rows, data)
    rollouts = {i: rollout for i, rollout in enumerate(sampled) if rollout is not None}

    def loss(member: Any, rollout: dict[str, Any], passed: Any, rows: slice, width: int) -> Any:
        return member._policy_loss(rollout, passed[rows, : width - 1])

    return _policy_epochs(members, rollouts, _log_probs, loss)


def ppo_step(members: list[Any], rows: list[list[Row]], data: Any) -> list[float]:
    """One :meth:`~agile_llm.ppo.LLMPPO.train_step` of every member, together: one generation
    call, one pass for the log-probabilities and hidden states at sampling (each member's
    rows valued by its own head), one under the reference, and one policy and value pass per
    epoch; each member steps its adapter and its head. Sampling as in :func:`grpo_step`.

    :returns: each member's loss, as its own step returns it.
    """
    shared = members[0].shared
    assert shared.adapters is not None
    rendered = [m.render_prompts(r, data) for m, r in zip(members, rows, strict=True)]
    prompts, owners = _prompt_rows(members, rendered, copies=[1] * len(members))
    done = generate(members, prompts, owners, explore=True, seed=_draw(members))
    labels = done.ids.masked_fill(~done.completion, IGNORE)
    with torch.no_grad():
        with shared.adapters.mixed([members[o].adapter for o in owners]):
            old, counted, hidden = text.log_probs_and_states(shared.model.eval(), done.ids,
                                                        done.mask, labels)  # fmt: skip
        reference = old
        if any(float(m.spec.beta) > 0 for m in members):
            with shared.reference():
                reference = _log_probs(shared.model, done.ids, done.mask, labels)
    rollouts, at = [], 0
    for i, member in enumerate(members):
        own = slice(at, at + len(rows[i]))
        at = own.stop
        penalised = float(member.spec.beta) > 0
        with torch.no_grad():
            values = member.values(hidden[own], counted[own])
        passes = {"old": old[own], "counted": counted[own], "values": values,
                  "reference": (reference if penalised else old)[own]}  # fmt: skip
        part = text.Completions(done.ids[own], done.mask[own], done.completion[own],
                                done.texts[own])  # fmt: skip
        rollouts.append(member.scored(part, labels[own], rows[i], rendered[i], data, passes))

    def loss(member: Any, rollout: dict[str, Any], passed: Any, rows: slice, width: int) -> Any:
        current, _, hidden = passed
        return member.ppo_loss(rollout, current[rows, : width - 1], hidden[rows, : width - 1])

    return _policy_epochs(members, dict(enumerate(rollouts)), text.log_probs_and_states, loss)


def _policy_epochs(
    members: list[Any], rollouts: dict[int, dict[str, Any]], forward: Callable[..., Any],
    loss: Callable[[Any, dict[str, Any], Any, slice, int], torch.Tensor],
) -> list[float]:  # fmt: skip
    """Each member's ``update_epochs`` passes over its rollout (``rollouts``: by member
    position), one training pass of the base per epoch for every member that takes it:
    ``forward(model, ids, mask, labels)`` makes the pass, ``loss(member, rollout, passed,
    rows, width)`` a member's loss from its ``rows`` of what the pass gave; each member's
    optimizers step after each epoch. Returns each member's last loss (0 for none)."""
    shared = members[0].shared
    assert shared.adapters is not None
    losses = [0.0] * len(members)
    epochs = {i: int(members[i].spec.update_epochs) for i in rollouts}
    for epoch in range(max(epochs.values(), default=0)):
        taking = [i for i in rollouts if epochs[i] > epoch]
        ids, mask, labels, names = _joined([rollouts[i] for i in taking],
                                           [members[i].adapter for i in taking])  # fmt: skip
        with shared.adapters.mixed(names):
            passed = forward(shared.model.train(), ids, mask, labels)
            total, at = torch.zeros((), device=ids.device), 0
            for i in taking:
                size, width = rollouts[i]["ids"].shape
                own = loss(members[i], rollouts[i], passed, slice(at, at + size), width)
                losses[i] = float(own.detach())
                total, at = total + own, at + size
            total.backward()
        for i in taking:
            members[i].step()
    return losses


def _sample(members: list[Any], rows: list[list[Row]], data: Any) -> list[dict[str, Any] | None]:
    """Every member's rollout (as :meth:`GRPO._rollout` makes it), sampled in one call."""
    shared = members[0].shared
    assert shared.adapters is not None
    rendered = [m.render_prompts(r, data) for m, r in zip(members, rows, strict=True)]
    prompts, owners = _prompt_rows(members, rendered, copies=[m.group() for m in members])
    done = generate(members, prompts, owners, explore=True, seed=_draw(members))
    rollouts, at = [], 0
    for member, batch_rows, texts in zip(members, rows, rendered, strict=True):
        size = len(batch_rows) * member.group()
        part = slice(at, at + size)
        completions = text.Completions(done.ids[part], done.mask[part], done.completion[part],
                                       done.texts[part])  # fmt: skip
        rollouts.append(member._rollout_of(completions, batch_rows, texts, data))
        at += size
    _old_and_reference(members, rollouts)
    return rollouts


def _prompt_rows(
    members: list[Any], rendered: list[list[str]], copies: list[int]
) -> tuple[list[list[int]], list[int]]:
    """Every member's prompts (texts ``rendered[i]``) as token ids, each ``copies[i]`` times
    in a row, and each row's member position."""
    prompts, owners = [], []
    for i, (member, texts) in enumerate(zip(members, rendered, strict=True)):
        for ids in member.prompt_ids(texts):
            prompts += [ids] * copies[i]
            owners += [i] * copies[i]
    return prompts, owners


def _draw(members: list[Any]) -> int:
    """A sampling seed drawn from each member's generator, as each draws when alone (so that
    its stream stays where it would be); the call samples with the first member's."""
    seeds = [int(torch.randint(0, 2**31 - 1, (1,), generator=m.generator)) for m in members]
    return seeds[0]


def generate(
    members: list[Any], prompts: list[list[int]], owners: list[int], *, explore: bool,
    seed: int | None = None,
) -> text.Completions:  # fmt: skip
    """One generation call for every row of ``prompts``, row ``i`` continued through member
    ``members[owners[i]]``'s adapter: by the shared vLLM engine (``use_vllm``), else by the
    training model with the adapters mixed by row. Sampled with the first member's settings
    and ``seed`` when exploring, else greedy."""
    shared, first = members[0].shared, members[0]
    room = min(first.output_tokens(), shared.context_length - max(map(len, prompts)))
    least = getattr(first.spec, "min_output_tokens", None)
    temperature = getattr(first.spec, "temperature", 1.0) if explore else None
    engine = shared.engine()
    if engine is not None:
        return engine.generate(shared.tokenizer, prompts, [members[o] for o in owners],  # type: ignore[no-any-return]
                               device=first.device, max_new_tokens=room, min_new_tokens=least,
                               temperature=temperature, seed=seed)  # fmt: skip
    batch = text.prompt_batch(shared.tokenizer, prompts, first.device)
    with shared.adapters.mixed([members[o].adapter for o in owners]):
        return text.generate(shared.model.eval(), shared.tokenizer, batch, max_new_tokens=room,
                             min_new_tokens=least, temperature=temperature, seed=seed)  # fmt: skip


def _sample_episodes(
    members: list[Any], rows: list[list[Row]], data: Any
) -> list[dict[str, Any] | None]:
    """Every member's rollout of a multi-turn environment, each turn of every member's
    episodes generated in one call (see :func:`play`)."""
    episodes = play(members, rows, data, explore=True)
    rollouts = [m.episodes_rollout(own) for m, own in zip(members, episodes, strict=True)]
    _old_and_reference(members, rollouts)
    return rollouts


def play(members: list[Any], rows: list[list[Row]], data: Any, *, explore: bool) -> list[list[Any]]:
    """Each member's episodes of a multi-turn environment (one per seed of its ``rows``,
    ``group_size`` each when exploring), played in step: each turn is one generation call for
    every member's running episodes, each row through its member's adapter. As in
    :func:`grpo_step`, each member's generator is drawn from as alone and the call samples
    with the first member's draw."""
    shared = members[0].shared
    assert shared.adapters is not None
    first = members[0]
    seeds = [
        (int(row["seed"]), i)
        for i, (member, own) in enumerate(zip(members, rows, strict=True))
        for row in own
        for _ in range(member.group() if explore else 1)
    ]
    room = first.output_tokens()

    def turn(prompts: list[list[int]], owners: list[int]) -> text.Completions:
        seed = _draw(members) if explore else None
        return generate(members, prompts, owners, explore=explore, seed=seed)

    conversation = first.conversation(data)
    context = shared.context_length
    played = multiturn.play(data, seeds, conversation, turn, context=context, reply_room=room)
    return [[e for e in played if e.owner == i] for i in range(len(members))]


def _joined(
    rollouts: list[dict[str, Any]], adapters: list[str]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[str]]:
    """The rollouts' ids, masks and labels in one right-padded batch, and each row's adapter."""
    batches = [text.Sequences(r["ids"], r["mask"], r["labels"]) for r in rollouts]
    joined, _ = side_by_side(batches, pad=0)  # padding is masked and ignored
    names = [name for r, name in zip(rollouts, adapters, strict=True)
             for _ in range(r["ids"].shape[0])]  # fmt: skip
    return joined.ids, joined.mask, joined.labels, names


def _log_probs(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> Any:
    return text.log_probs(model, ids, mask, labels)[0]


def _old_and_reference(members: list[Any], rollouts: list[dict[str, Any] | None]) -> None:
    """Fill each rollout's log-probabilities at sampling (its adapter) and under the reference
    (adapters off, for members with a KL penalty), each in one pass for every member."""
    shared = members[0].shared
    assert shared.adapters is not None
    live = [i for i, rollout in enumerate(rollouts) if rollout is not None]
    if not live:
        return
    ids, mask, labels, names = _joined([rollouts[i] for i in live],  # type: ignore[misc]
                                       [members[i].adapter for i in live])  # fmt: skip
    with torch.no_grad():
        with shared.adapters.mixed(names):
            old = _log_probs(shared.model.eval(), ids, mask, labels)
        penalised = any(float(getattr(members[i].spec, "beta", 0.0)) > 0 for i in live)
        reference = old
        if penalised:
            with shared.reference():
                reference = _log_probs(shared.model, ids, mask, labels)
    at = 0
    for i in live:
        rollout = rollouts[i]
        assert rollout is not None
        size, width = rollout["ids"].shape
        rollout["old"] = old[at : at + size, : width - 1]
        own = float(getattr(members[i].spec, "beta", 0.0)) > 0
        rollout["reference"] = (reference if own else old)[at : at + size, : width - 1]
        at += size


def _chunked(members: list[Any], rows: list[Row]) -> Iterator[tuple[list[int], list[slice]]]:
    """For each chunk position: the members that have one (each cuts ``rows`` by its own
    ``batch_size``, as it scores alone) and their chunks, as slices of ``rows``."""
    size = len(rows)
    chunks = [
        [slice(start, min(start + max(1, int(m.spec.batch_size)), size))
         for start in range(0, size, max(1, int(m.spec.batch_size)))]
        for m in members
    ]  # fmt: skip
    for position in range(max(len(own) for own in chunks)):
        taking = [i for i, own in enumerate(chunks) if position < len(own)]
        yield taking, [chunks[i][position] for i in taking]


def sft_losses(members: list[Any], rows: list[Row], data: Any) -> list[list[float]]:
    """Each member's held-out loss of each of its chunks of ``rows``, one pass per chunk
    position for every member."""
    shared = members[0].shared
    assert shared.adapters is not None
    losses: list[list[float]] = [[] for _ in members]
    with torch.no_grad():
        for taking, chunks in _chunked(members, rows):
            batch, spans = side_by_side(
                [members[i]._sequences(rows[c], data) for i, c in zip(taking, chunks, strict=True)],
                int(shared.tokenizer.pad_token_id),
            )
            names = [members[i].adapter for i, span in zip(taking, spans, strict=True)
                     for _ in range(span.stop - span.start)]  # fmt: skip
            positions = (batch.mask.cumsum(dim=-1) - 1).clamp(min=0)
            with shared.adapters.mixed(names):
                logits = shared.model.eval()(input_ids=batch.ids, attention_mask=batch.mask,
                                             position_ids=positions).logits  # fmt: skip
            for i, span in zip(taking, spans, strict=True):
                loss = objectives.sft_loss(logits[span], batch.labels[span])
                losses[i].append(float(loss))
    return losses


def dpo_results(members: list[Any], rows: list[Row], data: Any) -> list[list[tuple[Any, int]]]:
    """Each member's preference result on each of its chunks of ``rows``, with the chunk's
    size: per chunk position one reference pass and one policy pass for every member."""
    shared = members[0].shared
    assert shared.adapters is not None
    results: list[list[tuple[Any, int]]] = [[] for _ in members]
    with torch.no_grad():
        for taking, chunks in _chunked(members, rows):
            batch, spans = side_by_side(
                [members[i]._pairs(rows[c], data) for i, c in zip(taking, chunks, strict=True)],
                int(shared.tokenizer.pad_token_id),
            )
            every = torch.arange(batch.ids.shape[0])
            with shared.reference():
                reference = members[0]._summed(shared.model.eval(), batch, every)
            names = [members[i].adapter for i, span in zip(taking, spans, strict=True)
                     for _ in range(span.stop - span.start)]  # fmt: skip
            with shared.adapters.mixed(names):
                policy = members[0]._summed(shared.model.eval(), batch, every)
            for i, chunk, span in zip(taking, chunks, spans, strict=True):
                size = chunk.stop - chunk.start
                chosen = batch.labels[span.start : span.start + size]
                result = members[i].pair_loss(policy[span], reference[span], chosen)
                results[i].append((result, size))
    return results


def greedy(
    members: list[Any], rows: list[Row], data: Any, rendered: list[str] | None = None
) -> list[list[str]]:
    """Each member's greedy completion of each of ``rows`` (whose prompt texts are
    ``rendered``, when the caller has them): one generation call per chunk position for every
    member, each row continued through its member's adapter. The members share the tokenizer
    and the data, so the prompts are rendered and tokenised once."""
    shared = members[0].shared
    assert shared.adapters is not None
    first = members[0]
    texts = first.render_prompts(rows, data) if rendered is None else rendered
    prompts = first.prompt_ids(texts)
    outputs: list[list[str]] = [[] for _ in members]
    for taking, chunks in _chunked(members, rows):
        owners = [i for i, c in zip(taking, chunks, strict=True) for _ in range(c.stop - c.start)]
        done = generate(members, [p for c in chunks for p in prompts[c]], owners, explore=False)
        at = 0
        for i, chunk in zip(taking, chunks, strict=True):
            size = chunk.stop - chunk.start
            outputs[i] += done.texts[at : at + size]
            at += size
    return outputs
