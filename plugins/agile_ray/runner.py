"""The driver's side: a runner that trains each slot of the population in a Ray worker, where
its members stay between generations, and survives workers that die."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from agile_cli import (
    AgileError,
    GenerationStats,
    Member,
    MembersLost,
    Progress,
    Runner,
    TrainingError,
    TrainingManifest,
)
from agile_cli.helpers import on_cpu
from agile_ray.cluster import Plan
from agile_ray.resident import (
    Holder,
    Instruction,
    Standin,
    Trained,
    payload_bytes,
    standin_of,
)
from agile_ray.worker import SLOW_SLOT, MemberWorker

#: Seconds between looks at the workers' progress.
POLL_SECONDS = 0.5

#: Times one slot's worker may die within one generation before the run gives up.
MAX_DEATHS = 5

#: Seconds before calling a worker again that Ray is restarting.
RETRY_SECONDS = 1.0

Note = Callable[[str], None]


class RayRunner(Runner[Member], Holder):
    """Trains and scores the members in Ray workers, one per slot of :class:`Plan`, where they
    stay between generations (:mod:`agile_ray.resident`); the loop keeps selection, mutation
    and checkpoints on the driver, with stand-ins for the members.

    Per generation, only what a worker does not hold reaches it: a copy of a member another
    worker holds (from that worker, through Ray's object store), or a whole state (the first
    generation, after a resume). A worker that dies (or whose node does) is restarted by Ray;
    its members train the generation again from the states the last checkpoint made of them,
    or where it has none (``--checkpoint-every`` above 1), the run goes back to that
    checkpoint (:class:`~agile_cli.MembersLost`)."""

    def __init__(
        self,
        ray: Any,
        manifest: TrainingManifest,
        seed: int,
        plan: Plan,
        worker_options: dict[str, Any],
        *,
        note: Note,
        timeout: float,
        checkpoint_every: int = 1,
        member_timeout: float | None = None,
        share_experience: bool = False,
    ) -> None:
        super().__init__(env=None)
        self.ray = ray
        self.plan = plan
        self.note = note
        self.timeout = timeout
        self.training = manifest.training
        self.mutation = manifest.mutation
        self.checkpoint_every = checkpoint_every
        self.member_timeout = member_timeout
        self.share_experience = share_experience
        #: With ``share_experience``: per slot, the rows its buffer stored in the last
        #: generation (a Ray object each), for the other slots' buffers.
        self.experience: dict[int, Any] = {}
        remote = ray.remote(MemberWorker).options(
            num_cpus=plan.cpus,
            num_gpus=plan.gpus,
            max_restarts=-1,
            max_task_retries=0,
            max_concurrency=2,  # progress() answers while train() runs
            **_slowed(),
        )
        data = manifest.to_dict()
        self.workers = [
            remote.remote(
                data,
                {**worker_options, "slot": slot, "seed": seed, "members": size,
                 "threads": plan.threads},
            )
            for slot, size in enumerate(plan.sizes)
        ]  # fmt: skip
        self.where: dict[int, int] = {}  # member index -> the slot whose worker holds it
        self.template: Member | None = None
        self.fetched = 0  # bytes of member state fetched by the driver since the last metrics
        self.fetched_states: dict[int, dict[str, Any]] = {}  # since the last generation
        self.closed = False
        self.fitnesses: list[float] = []
        self.metrics: dict[str, Any] = {}

    def train_population(
        self, members: list[Member], steps: int, progress: Progress
    ) -> list[GenerationStats]:
        """Every slot's members made, trained and scored in its worker, at once; ``members``'
        items become stand-ins for the members the workers now hold."""
        started = time.perf_counter()
        self.fetched_states = {}
        if self.template is None:
            self.template = members[0].clone(members[0].index)
        instructions = [self._instruction(member) for member in members]
        positions = place(instructions, self.where, self.plan.sizes)
        slots = [[instructions[i] for i in chunk] for chunk in positions]
        exports = self._exports(slots)
        generation = _Generation(self, slots, [[members[i] for i in chunk] for chunk in positions],
                                 exports, steps, progress)  # fmt: skip
        results = generation.run()
        self.experience = dict(generation.experience)
        self.where, by_position = {}, {}
        for slot, (chunk, trained) in enumerate(zip(positions, results, strict=True)):
            for position, account in zip(chunk, trained, strict=True):
                members[position] = standin_of(account, members[position].record, self)
                self.where[account.index] = slot
                by_position[position] = account
        flat = [by_position[position] for position in range(len(members))]
        self.fitnesses = [account.fitness for account in flat]
        wall = time.perf_counter() - started
        sent = payload_bytes([instruction.state for instruction in instructions])
        self.metrics = {
            "workers": len(self.workers),
            "wall_seconds": round(wall, 3),
            "worker_seconds": round(max(generation.seconds), 3),
            "overhead_seconds": round(wall - max(generation.seconds), 3),
            "bytes_sent": sent,
            "bytes_copied": sum(generation.received) - sent,
            "bytes_fetched": self.fetched,
            "worker_deaths": sum(generation.deaths),
        }
        if self.share_experience:
            self.metrics["bytes_experience"] = sum(generation.experience_bytes)
        self.fetched = 0
        return [account.stats for account in flat]

    def _instruction(self, member: Member) -> Instruction:
        if not isinstance(member, Standin):  # a whole member: the first generation, a resume
            return Instruction(member.index, state=on_cpu(member.state_dict()))
        if member.held is not None and member.held not in self.where:
            raise MembersLost(f"member {member.held}, which member {member.index} copies, is lost")
        return member.instruction()

    def _exports(self, slots: list[list[Instruction]]) -> list[list[Any]]:
        """Per slot, the refs of the states it copies from other workers, once every one of
        those is made (before any worker trains, and so changes, its members)."""
        wanted: dict[tuple[int, int], set[int]] = {}
        for slot, instructions in enumerate(slots):
            for instruction in instructions:
                source = instruction.held
                if source is not None and self.where[source] != slot:
                    wanted.setdefault((self.where[source], slot), set()).add(source)
        refs = {
            pair: self.workers[pair[0]].export.remote(sorted(indices))
            for pair, indices in wanted.items()
        }
        if refs:
            self.ray.wait(list(refs.values()), num_returns=len(refs), fetch_local=False)
        return [[ref for (_, to), ref in refs.items() if to == slot] for slot in range(len(slots))]

    def fetch(self, index: int, steps: int) -> dict[str, Any]:
        """The state of member ``index`` from the worker holding it (for the elite, scoring
        again; checkpoints gather theirs first, :meth:`state_dicts`); between synchronous
        generations a worker holds each member as its last ``steps`` left it."""
        if index not in self.fetched_states:
            self._gather({index})
        return self.fetched_states[index]

    def state_dicts(self, members: list[Member]) -> list[dict[str, Any]]:
        """The members' states for a checkpoint, their sources fetched with one call per
        worker."""
        sources = {
            member.held
            for member in members
            if isinstance(member, Standin) and member.made is None and member.held is not None
        }
        if wanted := sources - self.fetched_states.keys():
            self._gather(wanted)
        return [member.state_dict() for member in members]

    def _gather(self, indices: set[int]) -> None:
        """Fetch the states of held members ``indices`` into :attr:`fetched_states` (until the
        next generation trains), with one call per worker holding some."""
        from ray.exceptions import RayError

        if self.closed:
            raise TrainingError(
                "this member stayed in a Ray worker of a run that has ended",
                "load it from the run folder (elite.pt, checkpoints/latest.pt)",
            )
        if lost := sorted(indices - self.where.keys()):
            raise MembersLost(f"member {lost[0]} is not held by any worker")
        wanted: dict[int, list[int]] = {}
        for index in sorted(indices):
            wanted.setdefault(self.where[index], []).append(index)
        refs = [self.workers[slot].export.remote(held) for slot, held in sorted(wanted.items())]
        try:
            batches = self.ray.get(refs)
        except RayError as exc:
            raise MembersLost(f"a worker holding members died ({_death(exc)})") from None
        for batch in batches:
            self.fetched_states.update(batch)
            self.fetched += payload_bytes(batch)

    def checkpoint_due(self, generation: int) -> bool:
        """Every ``--checkpoint-every`` generations: a checkpoint fetches every member's state."""
        return generation % self.checkpoint_every == 0

    def generation_metrics(self) -> dict[str, Any]:
        """``ray``: the last generation's workers, its wall time on the driver, the slowest
        worker's own time, the difference (what Ray and moving states cost), the bytes of
        member state sent by the driver, copied between workers and fetched by the driver
        (checkpoints, the elite), and how many workers died."""
        return {"ray": self.metrics}

    def evaluate_population(
        self, members: list[Member], rounds: int, max_steps: int | None
    ) -> list[float]:
        """The fitnesses the workers measured right after training (same rounds and steps)."""
        return list(self.fitnesses)

    def close(self) -> None:
        self.closed = True
        for worker in self.workers:
            self.ray.kill(worker, no_restart=True)


def place(
    instructions: list[Instruction], where: dict[int, int], sizes: list[int]
) -> list[list[int]]:
    """The positions each slot trains (``sizes[k]`` of them for slot ``k``): a member that
    continues stays where it is held, then copies go where their source is held while there
    is room, then the rest fill the slots in order; so that as few states as can be cross
    between workers."""
    room = list(sizes)
    slot_of: list[int | None] = [None] * len(instructions)
    continuing = [i for i, x in enumerate(instructions) if x.held == x.index]
    copies = [i for i, x in enumerate(instructions) if x.held is not None and x.held != x.index]
    for i in continuing + copies:
        held = instructions[i].held
        home = None if held is None else where.get(held)
        if home is not None and room[home] > 0:
            slot_of[i], room[home] = home, room[home] - 1
    # the rest side by side by source: copies of one member share its networks' shapes, and
    # a slot trains members of one shape as one batched group
    unplaced = [i for i, slot in enumerate(slot_of) if slot is None]
    rest = sorted(unplaced, key=lambda i: (instructions[i].held is None, instructions[i].held, i))
    free = (slot for slot, size in enumerate(room) for _ in range(size))
    for i in rest:
        slot_of[i] = next(free)
    return [[i for i, slot in enumerate(slot_of) if slot == k] for k in range(len(sizes))]


class _Generation:
    """One generation's calls to the workers: waits for them, shows their progress, and makes
    a dead worker's call again."""

    def __init__(
        self,
        runner: RayRunner,
        slots: list[list[Instruction]],
        members: list[list[Member]],
        exports: list[list[Any]],
        steps: int,
        progress: Progress,
    ) -> None:
        self.runner, self.slots, self.steps, self.progress = runner, slots, steps, progress
        self.members, self.exports = members, exports
        self.ray = runner.ray
        self.deaths = [0] * len(slots)
        self.seen = [0] * len(slots)  # steps shown, per slot
        self.last = [0] * len(slots)  # steps the worker said last
        self.moved = [time.monotonic()] * len(slots)
        self.warned: set[int] = set()
        self.seconds = [0.0] * len(slots)  # each worker's own time on its call
        self.received = [0] * len(slots)  # bytes of member state each worker received
        self.restarting = [False] * len(slots)  # died, and not yet trained since
        self.retries: dict[int, float] = {}  # slots to call again, and when
        self.called = [time.monotonic()] * len(slots)  # when each slot's call was made
        self.overdue: set[int] = set()  # slots restarted for running over --member-timeout
        self.experience: dict[int, Any] = {}  # per slot, the rows its buffer stored
        self.experience_bytes = [0] * len(slots)  # bytes of rows each worker took in
        self.calls = {slot: self._call(slot) for slot in range(len(slots))}

    def _call(self, slot: int) -> Any:
        self.called[slot] = time.monotonic()
        runner = self.runner
        worker, training = runner.workers[slot], runner.training
        arguments = (self.slots[slot], self.steps, training.eval_loop, training.eval_steps)
        if not runner.share_experience:
            return worker.train.remote(*arguments, *self.exports[slot])
        others = [rows for k, rows in runner.experience.items() if k != slot]
        called, self.experience[slot] = worker.train_sharing.options(num_returns=2).remote(
            *arguments, *self.exports[slot], *others
        )
        return called

    def run(self) -> list[list[Trained]]:
        try:
            return self._run()
        except MembersLost:
            # the run goes back to its checkpoint: the other workers finish their calls
            # first, so that none trains two generations at once
            if self.calls:
                self.ray.wait(list(self.calls.values()), num_returns=len(self.calls))
            raise

    def _run(self) -> list[list[Trained]]:
        results: dict[int, list[Trained]] = {}
        while self.calls or self.retries:
            self._call_again_when_due()
            refs = list(self.calls.values())
            ready = []
            if refs:
                ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=POLL_SECONDS)
            else:
                time.sleep(POLL_SECONDS)
            for slot, ref in list(self.calls.items()):
                if ref in ready:
                    del self.calls[slot]
                    self._collect(slot, ref, results)
            self._look_at_progress()
        return [results[slot] for slot in range(len(self.slots))]

    def _call_again_when_due(self) -> None:
        now = time.monotonic()
        for slot, due in list(self.retries.items()):
            if now >= due:
                del self.retries[slot]
                self.calls[slot] = self._call(slot)

    def _collect(self, slot: int, ref: Any, results: dict[int, list[Trained]]) -> None:
        from ray.exceptions import (
            ActorUnavailableError,
            ObjectLostError,
            RayActorError,
            RayTaskError,
        )

        try:
            trained: list[Trained]
            trained, self.seconds[slot], self.received[slot], *taken = self.ray.get(ref)
            self.experience_bytes[slot] = sum(taken)
        except ActorUnavailableError as exc:
            if not self.restarting[slot] or slot in self.overdue:  # a death, or our kill
                self._died(slot, exc)
            self.retries[slot] = time.monotonic() + RETRY_SECONDS  # still restarting
            return
        except RayActorError as exc:
            self._died(slot, exc)
            return
        except ObjectLostError:  # an argument (a copy's source, shared rows) left with its node
            raise MembersLost(f"a state or rows for {self._members(slot)} were lost") from None
        except RayTaskError as exc:
            if isinstance(exc.cause, ObjectLostError):
                raise MembersLost(f"a state or rows for {self._members(slot)} were lost") from None
            raise _worker_failure(slot, exc) from None
        results[slot] = trained
        done = sum(account.stats.steps for account in trained)
        self.progress(max(0, done - self.seen[slot]))
        self.seen[slot] = max(done, self.seen[slot])

    def _died(self, slot: int, exc: Exception) -> None:
        if getattr(exc, "actor_init_failed", False):
            raise _start_failure(self._members(slot), exc)
        self.deaths[slot] += 1
        bound = self.runner.member_timeout
        if self.deaths[slot] > MAX_DEATHS:
            raise too_many_deaths(self._members(slot), exc, bound, "generation")
        self._start_again_from_checkpoint(slot, exc)
        what = why_restarted(exc, slot in self.overdue, bound)
        self.overdue.discard(slot)
        self.runner.note(
            f"the Ray worker of {self._members(slot)} {what}: its members train this "
            "generation again on a restarted worker"
        )
        self.warned.discard(slot)
        self.restarting[slot] = True
        self.moved[slot], self.last[slot] = time.monotonic(), 0
        self.retries[slot] = time.monotonic() + RETRY_SECONDS

    def _start_again_from_checkpoint(self, slot: int, exc: Exception) -> None:
        """The dead worker's members start from the states the last checkpoint made of them
        (it held their sources).

        :raises MembersLost: a member has no such state (no checkpoint since it was made).
        """
        instructions = []
        for instruction, member in zip(self.slots[slot], self.members[slot], strict=True):
            if instruction.held is None or self.runner.where[instruction.held] != slot:
                instructions.append(instruction)  # a whole state, or a copy from elsewhere
            elif isinstance(member, Standin) and member.made is not None:
                instructions.append(Instruction(member.index, state=member.made))
            else:
                raise MembersLost(
                    f"the Ray worker of {self._members(slot)} died ({_death(exc)}) with members "
                    "that no checkpoint holds"
                )
        self.slots[slot] = instructions

    def _look_at_progress(self) -> None:
        asked = {slot: self.runner.workers[slot].progress.remote() for slot in self.calls}
        ready = []
        if asked:
            ready, _ = self.ray.wait(list(asked.values()), num_returns=len(asked), timeout=1.0)
        now = time.monotonic()
        for slot, ref in asked.items():
            steps = self._read(ref) if ref in ready else None
            if steps is not None and steps != self.last[slot]:  # it trains (again, after a death)
                self.last[slot], self.moved[slot] = steps, now
                self.warned.discard(slot)
                self.restarting[slot] = False
                if steps > self.seen[slot]:
                    self.progress(steps - self.seen[slot])
                    self.seen[slot] = steps
            elif now - self.moved[slot] > self.runner.timeout:
                self._waiting(slot, now - self.moved[slot])
        for slot in self.retries:  # to be called again: Ray is restarting them
            if now - self.moved[slot] > self.runner.timeout:
                self._waiting(slot, now - self.moved[slot])
        bound = self.runner.member_timeout
        for slot in self.calls:
            if bound is not None and now - self.called[slot] > bound and slot not in self.overdue:
                self.overdue.add(slot)  # its call fails as a death: handled there
                self.ray.kill(self.runner.workers[slot], no_restart=False)

    def _read(self, ref: Any) -> int | None:
        return read_steps(self.ray, ref)

    def _waiting(self, slot: int, seconds: float) -> None:
        if slot in self.warned:
            return
        self.warned.add(slot)
        self.runner.note(waiting_note(self._members(slot), seconds, self.runner.plan.cpus))

    def _members(self, slot: int) -> str:
        return described(self.slots[slot])


def described(instructions: list[Instruction]) -> str:
    """ "member 3" or "members 3, 7": who a call trains, for messages."""
    indices = [instruction.index for instruction in instructions]
    return ("member " if len(indices) == 1 else "members ") + ", ".join(map(str, indices))


def why_restarted(exc: Exception, overdue: bool, bound: float | None) -> str:
    """Why a worker's call ended early: it ran over ``--member-timeout``, or it died."""
    return f"ran over --member-timeout {bound or 0:g} s" if overdue else f"died ({_death(exc)})"


def too_many_deaths(members: str, exc: Exception, bound: float | None, within: str) -> AgileError:
    """The error that stops a run whose worker died (or ran over the bound) too often."""
    return TrainingError(
        f"the Ray worker of {members} died or ran over --member-timeout {bound or 0:g} s "
        f"{MAX_DEATHS + 1} times in one {within}: {_first_line(exc)}",
        "see the worker logs in the Ray session folder (e.g. for running out of memory), or "
        "raise --member-timeout",
    )


def waiting_note(members: str, seconds: float, cpus: float) -> str:
    """What the run says of a worker that has trained nothing for ``seconds``."""
    return (
        f"the Ray worker of {members} has trained nothing for {seconds:.0f} s: waiting for it "
        f"(a worker starting or restarting needs a node with {cpus:g} CPUs free; Ctrl-C stops "
        "the run and keeps its last checkpoint)"
    )


def read_steps(ray: Any, ref: Any) -> int | None:
    """A worker's answer to ``progress()``; None while it is restarting (its call fails and is
    made again)."""
    from ray.exceptions import RayError

    try:
        return int(ray.get(ref))
    except RayError:
        return None


def _slowed() -> dict[str, Any]:
    """For benchmarks and tests: a slowed slot (:data:`~agile_ray.worker.SLOW_SLOT`) said on
    the driver reaches the workers, wherever they run."""
    value = os.environ.get(SLOW_SLOT)
    return {"runtime_env": {"env_vars": {SLOW_SLOT: value}}} if value else {}


def _death(exc: Exception) -> str:
    """Why a worker is gone, in a few words."""
    from ray.exceptions import ActorUnavailableError

    if isinstance(exc, ActorUnavailableError):
        return "its process or its node stopped; Ray restarts it"
    return _first_line(exc)[:200]


def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _start_failure(members: str, exc: Exception) -> AgileError:
    """Why a worker could not start: the agile error its set-up raised (e.g. a manifest its
    node's plugins do not accept), or the first line of what Ray says."""
    raised = exc.args[0] if exc.args else None
    cause = getattr(raised, "cause", None)
    if isinstance(cause, AgileError):
        cause.message = f"the Ray worker of {members} could not start: {cause.message}"
        return cause
    return TrainingError(
        f"the Ray worker of {members} could not start: {_first_line(cause or exc)}",
        "every node needs agile and the run's plugins installed (the same versions)",
    )


def _worker_failure(slot: int, exc: Any) -> AgileError:
    """What a worker raised, as the run's error: an agile error as it was, else its text."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, AgileError):
        return cause
    said = f"{type(cause).__name__}: {cause}" if cause is not None else _first_line(exc)
    return TrainingError(f"a Ray worker (slot {slot}) failed: {said}")
