"""A group of LLM members stepped and scored as one computation; a member alone is a group of one.

Each algorithm writes its step and its scoring once, over a group
(:meth:`~agile_llm.population.LLMMember.train_group`,
:meth:`~agile_llm.population.LLMMember.score_group`), from the passes this module makes. A pass
puts the members' rows side by side through the shared base, each row through its own member's
adapter (:meth:`~agile_llm.adapters.AdapterPopulation.routed`; a member alone just makes its
adapter the active one). A training pass's loss is the sum of the members' own, so each
adapter's gradient comes from its own loss only, and each member then clips and steps its own
optimizer: a member's update in a group is the one it makes alone, up to the order of
floating-point sums (tests hold them to it). A member's batch is cut into its micro-batches
(``micro_batch_size_per_gpu``) by the same loop: one pass per micro-batch position. A sampled
generation call draws a seed from every member's generator, as each draws alone, and samples
with the first member's.

:func:`compatible` says which members of a population may share a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import torch

from agile_llm import text
from agile_llm.constraints import Constraint
from agile_llm.objectives import IGNORE

T = TypeVar("T")


class LLMMember(Protocol):
    """What this module reads of a member (an :class:`~agile_llm.population.LLMMember`):
    written here so that the members' module imports this one and never the other way."""

    spec: Any
    shared: Any
    adapter: str
    device: torch.device
    generator: torch.Generator

    def micro_batches(self, size: int) -> list[slice]: ...

    def mini_batches(self, size: int) -> list[slice]: ...

    def mini_batch_of(self, part: slice, size: int) -> slice: ...

    def step(self) -> None: ...

    def output_tokens(self) -> int: ...

    def row_tokens(self) -> int: ...

    def render_prompts(self, rows: list[Row], data: Any) -> list[str]: ...

    def prompt_ids(self, prompts: list[str], limit: int | None = None) -> list[list[int]]: ...


Row = dict[str, Any]
#: ``rows(i, part)``: member ``i``'s rows for its part ``part`` of a batch (its micro-batch).
Rows = Callable[[int, slice], text.Sequences]
#: ``forward(model, batch)``: a pass of the model over a batch, giving a tensor, or a tuple of
#: tensors, by row.
Forward = Callable[[Any, text.Sequences], Any]
#: ``take(i, batch, output, part)``: what member ``i`` makes of its rows ``batch`` of a pass and
#: the pass's ``output`` for them; ``part`` is the part of its batch they are.
Take = Callable[[int, text.Sequences, Any, slice], T]

#: Settings every member of a group must share to sample together.
_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "vllm_config",
             "max_output_tokens", "min_output_tokens")  # fmt: skip


def compatible(members: Sequence[LLMMember]) -> list[list[int]]:
    """``members``' positions in groups that share their passes, in order of first appearance:
    members of one class over one base, sampling alike (a population whose evolution gave
    members different temperatures steps in groups). A member is a group of one where its
    batch is cut into micro-batches (their point is a smaller pass), or where the base's LoRA
    layers cannot mix adapters in a batch (a quantised base, adapted raw parameters)."""
    found: dict[Hashable, list[int]] = {}
    for index, member in enumerate(members):
        key: Hashable = index
        if _mixes(member):
            spec = member.spec
            key = (type(member), id(member.shared),
                   *(repr(getattr(spec, name, None)) for name in _SAMPLING))  # fmt: skip
        found.setdefault(key, []).append(index)
    return list(found.values())


def _mixes(member: LLMMember) -> bool:
    adapters = member.shared.adapters
    micro = getattr(member.spec, "micro_batch_size_per_gpu", None)
    return adapters is not None and adapters.mixable and micro is None


def slices(size: int, step: int) -> list[slice]:
    """Consecutive slices of ``size`` rows, ``step`` at a time."""
    step = max(1, step)
    return [slice(start, min(start + step, size)) for start in range(0, size, step)]


def chunks(members: Sequence[LLMMember], size: int) -> list[list[slice]]:
    """Each member's chunks of ``size`` held-out rows, its ``batch_size`` at a time."""
    return [slices(size, int(member.spec.batch_size)) for member in members]


def positions(parts: list[list[slice]]) -> Iterator[list[tuple[int, slice]]]:
    """For each position in the members' lists of parts (``parts[i]`` member ``i``'s): the
    members that have a part there, each with that part."""
    for position in range(max(map(len, parts), default=0)):
        yield [(i, own[position]) for i, own in enumerate(parts) if position < len(own)]


def side_by_side(batches: list[text.Sequences], pad: int) -> tuple[text.Sequences, list[slice]]:
    """The batches' rows in one right-padded batch, and each batch's rows in it."""
    spans, start = [], 0
    for batch in batches:
        spans.append(slice(start, start + batch.ids.shape[0]))
        start += batch.ids.shape[0]
    if len(batches) == 1:
        return batches[0], spans
    width = max(batch.ids.shape[1] for batch in batches)

    def widened(tensor: torch.Tensor, fill: int) -> torch.Tensor:
        extra = width - tensor.shape[1]
        return torch.nn.functional.pad(tensor, (0, extra), value=fill) if extra else tensor

    joined = text.Sequences(
        torch.cat([widened(b.ids, pad) for b in batches]),
        torch.cat([widened(b.mask, 0) for b in batches]),
        torch.cat([widened(b.labels, IGNORE) for b in batches]),
    )
    return joined, spans


def learn(
    members: Sequence[LLMMember], sizes: list[int], rows: Rows, forward: Forward,
    loss: Take[torch.Tensor],
) -> list[float]:  # fmt: skip
    """``update_epochs`` epochs of each member over its batch of ``sizes[i]`` rows (none for
    0), each epoch cut into the member's micro-batches: one training pass of the base per
    micro-batch position for every member with a part there; a member clips and steps its
    optimizers at the end of each of its mini-batches (``mini_batch_size``; by default the
    batch). A member's loss of a part is scaled by the part's share of its mini-batch, so its
    micro-batches' gradients add up to the mini-batch's.

    :returns: each member's mean loss of its mini-batches in its last epoch (0 for none).
    """
    shared = members[0].shared
    assert shared.adapters is not None
    losses = [0.0] * len(members)
    epochs = [int(m.spec.update_epochs) if size else 0
              for m, size in zip(members, sizes, strict=True)]  # fmt: skip
    for epoch in range(max(epochs, default=0)):
        parts = [m.micro_batches(size) if count > epoch else []
                 for m, size, count in zip(members, sizes, epochs, strict=True)]  # fmt: skip
        totals = [0.0] * len(members)
        for position in positions(parts):
            batch, spans, names = _joined(members, position, rows)
            minis = [members[i].mini_batch_of(part, sizes[i]) for i, part in position]
            with shared.adapters.routed(names):
                output = forward(shared.model.train(), batch)
                total = torch.zeros((), device=batch.ids.device)
                for (i, part), span, mini in zip(position, spans, minis, strict=True):
                    own = loss(i, batch.take(span), _share(output, span), part)
                    own = own * ((part.stop - part.start) / (mini.stop - mini.start))
                    totals[i] += float(own.detach())
                    total = total + own
                total.backward()  # inside: a checkpointed pass recomputes with the same routing
            for (i, part), mini in zip(position, minis, strict=True):
                if part.stop == mini.stop:  # the end of its mini-batch: one optimiser step
                    members[i].step()
        for i, taken in enumerate(parts):
            if taken:
                losses[i] = totals[i] / len(members[i].mini_batches(sizes[i]))
    return losses


def measure(
    members: Sequence[LLMMember], parts: list[list[slice]], rows: Rows, forward: Forward,
    take: Take[Any] | None = None, *, adapters: bool = True,
) -> list[list[Any]]:  # fmt: skip
    """Each member's ``take`` of (by default, the output of) each of its ``parts``, without
    gradients: one evaluation pass per part position for every member with a part there,
    through the members' adapters, or with every adapter off (``adapters`` False: the
    reference)."""
    shared = members[0].shared
    assert shared.adapters is not None
    results: list[list[Any]] = [[] for _ in members]
    with torch.no_grad():
        for position in positions(parts):
            batch, spans, names = _joined(members, position, rows)
            with shared.adapters.routed(names) if adapters else shared.reference():
                output = forward(shared.model.eval(), batch)
            for (i, part), span in zip(position, spans, strict=True):
                own = _share(output, span)
                results[i].append(own if take is None else take(i, batch.take(span), own, part))
    return results


def _joined(
    members: Sequence[LLMMember], position: list[tuple[int, slice]], rows: Rows
) -> tuple[text.Sequences, list[slice], list[str]]:
    """A pass's batch (each member's rows of ``position``), each member's rows in it and each
    row's adapter."""
    pad = int(members[0].shared.tokenizer.pad_token_id)
    batch, spans = side_by_side([rows(i, part) for i, part in position], pad)
    names = [members[i].adapter for (i, _), span in zip(position, spans, strict=True)
             for _ in range(span.stop - span.start)]  # fmt: skip
    return batch, spans, names


def _share(output: Any, span: slice) -> Any:
    """A member's rows ``span`` of a pass's output (a tensor or a tuple of tensors by row)."""
    if isinstance(output, tuple):
        return tuple(part[span] for part in output)
    return output[span]


# -- generating --------------------------------------------------------------------------------


def draw(members: Sequence[LLMMember]) -> int:
    """A sampling seed drawn from each member's generator, as each draws alone (so that its
    stream stays where it would be); the call samples with the first member's."""
    seeds = [int(torch.randint(0, 2**31 - 1, (1,), generator=m.generator)) for m in members]
    return seeds[0]


def generate(
    members: Sequence[LLMMember], prompts: list[list[int]], owners: list[int], *,
    explore: bool, seed: int | None = None, engine: Any = None,
) -> text.Completions:  # fmt: skip
    """One generation call for every row of ``prompts``, row ``i`` continued through member
    ``members[owners[i]]``'s adapter: by ``engine`` when given (asynchronous rollouts' copy of
    the model), else the shared vLLM engine (``use_vllm``), else the training model. Sampled
    with the first member's settings and ``seed`` when exploring, else greedy."""
    shared, first = members[0].shared, members[0]
    assert shared.adapters is not None
    room = min(first.output_tokens(), first.row_tokens() - max(map(len, prompts)))
    least = getattr(first.spec, "min_output_tokens", None)
    sampling = text.Sampling.of(first.spec) if explore else None
    constraint = Constraint.of(first.spec)
    engine = engine or shared.engine()
    if engine is not None:
        return engine.generate(shared.tokenizer, prompts, [members[o] for o in owners],
                               device=first.device, max_new_tokens=room, min_new_tokens=least,
                               sampling=sampling, seed=seed, constraint=constraint)  # fmt: skip
    batch = text.prompt_batch(shared.tokenizer, prompts, first.device)
    with shared.adapters.routed([members[o].adapter for o in owners]):
        return text.generate(shared.model.eval(), shared.tokenizer, batch, max_new_tokens=room,
                             min_new_tokens=least, sampling=sampling, seed=seed,
                             constraint=constraint)  # fmt: skip


def sample(
    members: Sequence[LLMMember], prompts: list[list[list[int]]], copies: list[int],
    engine: Any = None,
) -> list[text.Completions]:  # fmt: skip
    """Each member's completions of its ``prompts[i]``, each prompt ``copies[i]`` times in a
    row, sampled in one generation call (by ``engine``, when given)."""
    rows, owners = [], []
    for i, (own, times) in enumerate(zip(prompts, copies, strict=True)):
        for ids in own:
            rows += [ids] * times
            owners += [i] * times
    done = generate(members, rows, owners, explore=True, seed=draw(members), engine=engine)
    spans, at = [], 0
    for own, times in zip(prompts, copies, strict=True):
        spans.append(slice(at, at + len(own) * times))
        at += len(own) * times
    return [done.take(span) for span in spans]


def held_out(
    members: Sequence[LLMMember], rows: list[Row], data: Any, rendered: list[str] | None = None,
    *, samples: int = 0,
) -> list[list[str]]:  # fmt: skip
    """Each member's greedy completion of each of ``rows`` (whose prompt texts are
    ``rendered``, when the caller has them), or ``samples`` sampled ones in a row, as it
    samples in training; ``batch_size`` rows at a time: one generation call per chunk
    position for every member. The members share the tokenizer and the data, so the prompts
    are rendered and tokenised once."""
    first = members[0]
    texts = first.render_prompts(rows, data) if rendered is None else rendered
    prompts = first.prompt_ids(texts)
    copies = max(samples, 1)
    outputs: list[list[str]] = [[] for _ in members]
    for position in positions(chunks(members, len(rows))):
        owners = [i for i, c in position for _ in range((c.stop - c.start) * copies)]
        asked = [p for _, c in position for p in prompts[c] for _ in range(copies)]
        seed = draw([members[i] for i, _ in position]) if samples else None
        done = generate(members, asked, owners, explore=bool(samples), seed=seed)
        at = 0
        for i, chunk in position:
            size = (chunk.stop - chunk.start) * copies
            outputs[i] += done.texts[at : at + size]
            at += size
    return outputs
