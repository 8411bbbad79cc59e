"""The Ray actor that trains one slot of the population (a plain class: the backend wraps it
with ``ray.remote``, so this module never imports Ray)."""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from agile_cli import Member, MembersLost, TrainingError
from agile_cli.helpers import MemberTrainer, on_cpu
from agile_ray.resident import Instruction, Trained, payload_bytes, replay, summarise


@dataclass(frozen=True)
class Experience:
    """The rows a worker's replay buffer stored in one call (a buffer's ``rows_since``), for
    the other workers' buffers."""

    rows: dict[str, Any]


class MemberWorker:
    """Holds a :class:`~agile_cli.helpers.MemberTrainer` (its environment and replay buffer) in a
    Ray worker process, and the members it trained last, which stay here between generations
    (see :mod:`agile_ray.resident`).

    Ray restarts the process when it dies; the trainer is then built afresh (an empty buffer,
    no members held), and the driver sends what its members start from again."""

    def __init__(self, manifest: dict[str, Any], options: dict[str, Any]) -> None:
        self.steps = 0
        self.trainer = MemberTrainer(manifest, **options)
        self.held: dict[int, Member] = {}
        self.slowdown = _slowdown(int(options.get("slot", 0)))

    def pid(self) -> int:
        """This worker's process id (e.g. to find it on its node)."""
        return os.getpid()

    def progress(self) -> int:
        """Env steps trained in the current call so far (read while :meth:`train` runs)."""
        return self.steps

    def export(self, indices: list[int]) -> dict[int, dict[str, Any]]:
        """The states of held members ``indices``, for another worker that copies them."""
        if lost := [index for index in indices if index not in self.held]:
            raise MembersLost(f"member {lost[0]} is no longer in its Ray worker (it restarted)")
        return {index: on_cpu(self.held[index].state_dict()) for index in indices}

    def export_each(self, indices: list[int]) -> Any:
        """:meth:`export` as one object per member (called with ``num_returns=len(indices)``:
        a single one for a single member), for the asynchronous runner to publish."""
        batches = [self.export([index]) for index in indices]
        return batches[0] if len(batches) == 1 else tuple(batches)

    def train_sharing(
        self,
        instructions: list[Instruction],
        steps: int,
        rounds: int,
        eval_steps: int | None,
        *received: dict[int, dict[str, Any]] | Experience,
    ) -> tuple[tuple[list[Trained], float, int, int], Experience]:
        """:meth:`train`, with experience shared between workers (``--share-experience``):
        first the rows the other workers' buffers stored in their last call (``received``'s
        :class:`Experience` items) go into this worker's buffer, then the members train; the
        rows they stored are returned apart (called with ``num_returns=2``, they stay in the
        object store for the other workers' next calls), with the bytes of rows taken."""
        buffer = self._buffer()
        shared = [item for item in received if isinstance(item, Experience)]
        for experience in shared:
            buffer.add_rows(experience.rows)
        mark = buffer.added
        states = [item for item in received if not isinstance(item, Experience)]
        trained, seconds, got = self.train(instructions, steps, rounds, eval_steps, *states)
        taken = sum(payload_bytes(experience.rows["columns"]) for experience in shared)
        return (trained, seconds, got, taken), Experience(buffer.rows_since(mark))

    def _buffer(self) -> Any:
        buffer = self.trainer.buffer
        if not all(hasattr(buffer, name) for name in ("added", "rows_since", "add_rows")):
            raise TrainingError(
                f"--share-experience: this algorithm's buffer ({type(buffer).__name__}) cannot "
                "share its rows (it needs added, rows_since and add_rows)",
                "drop --share-experience",
            )
        return buffer

    def train(
        self,
        instructions: list[Instruction],
        steps: int,
        rounds: int,
        eval_steps: int | None,
        *exported: dict[int, dict[str, Any]],
    ) -> tuple[list[Trained], float, int]:
        """Make the slot's members as ``instructions`` say, from the members held here, the
        states other workers ``exported`` and whole states; train and score them, and hold
        them instead of the last ones. Returns each one's account, the seconds that took here,
        and the bytes of member state that came from elsewhere."""
        self.steps = 0
        started = time.perf_counter()
        states = {index: state for batch in exported for index, state in batch.items()}
        members, labels = self._make(instructions, states)
        scored = self.trainer.train_members(members, steps, rounds, eval_steps, self._advance)
        self.held = {member.index: member for member in members}
        if self.slowdown > 1:  # a slow node, simulated (benchmarks/ray_backend.py slow)
            time.sleep((time.perf_counter() - started) * (self.slowdown - 1))
        received = payload_bytes([i.state for i in instructions]) + payload_bytes(exported)
        trained = [
            Trained(member.index, member.record.steps, summarise(member), label, stats, fitness)
            for member, label, (stats, fitness) in zip(members, labels, scored, strict=True)
        ]
        return trained, time.perf_counter() - started, received

    def _make(
        self, instructions: list[Instruction], states: dict[int, dict[str, Any]]
    ) -> tuple[list[Member], list[str | None]]:
        uses = Counter(i.held for i in instructions if i.held is not None)
        spec = self.trainer.manifest.mutation
        members, labels = [], []
        for instruction in instructions:
            source = instruction.held
            if source is not None and source in self.held:
                member = self.held[source]
                if uses[source] > 1:  # others start from it too: this one takes a copy
                    member = member.clone(member.index)
                uses[source] -= 1
            else:
                state = states.get(source) if source is not None else instruction.state
                if state is None:
                    raise MembersLost(f"member {source} is no longer in its Ray worker")
                member = self.trainer.member(state)
            member, label = replay(member, instruction.ops, spec)
            members.append(member)
            labels.append(label)
        return members, labels

    def _advance(self, steps: int) -> None:
        self.steps += steps


#: For benchmarks: ``"SLOT:FACTOR"`` makes that slot's worker take FACTOR times as long (it
#: sleeps after each call's work), as a worker on a slower node would.
SLOW_SLOT = "AGILE_RAY_SLOW_SLOT"


def _slowdown(slot: int) -> float:
    """How many times slower this slot's worker is made to run (1: as fast as it can)."""
    said, _, factor = os.environ.get(SLOW_SLOT, "").partition(":")
    return float(factor) if said.strip() == str(slot) and factor else 1.0
