"""The driver's side: a runner that trains each slot of the population in a Ray worker, and
survives workers that die."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agile_cli import (
    AgileError,
    GenerationStats,
    Member,
    Progress,
    Runner,
    TrainingError,
    TrainingManifest,
)
from agile_cli.helpers import MemberOutcome
from agile_ray.cluster import Plan
from agile_ray.worker import MemberWorker

#: Seconds between looks at the workers' progress.
POLL_SECONDS = 0.5

#: Times one slot's worker may die within one generation before the run gives up.
MAX_DEATHS = 5

#: Seconds before calling a worker again that Ray is restarting.
RETRY_SECONDS = 1.0

Note = Callable[[str], None]


class RayRunner(Runner[Member]):
    """Trains and scores the members in Ray workers, one per slot of :class:`Plan`; the loop
    keeps selection, mutation and checkpoints on the driver.

    A worker's call carries its members' states and returns them trained, with their fitness:
    a worker that dies (or whose node does) is restarted by Ray and its call made again, so a
    death costs that generation's work for its members, and an empty replay buffer."""

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
    ) -> None:
        super().__init__(env=None)
        self.ray = ray
        self.plan = plan
        self.note = note
        self.timeout = timeout
        self.training = manifest.training
        remote = ray.remote(MemberWorker).options(
            num_cpus=plan.cpus,
            num_gpus=plan.gpus,
            max_restarts=-1,
            max_task_retries=0,
            max_concurrency=2,  # progress() answers while train() runs
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
        self.fitnesses: list[float] = []
        self.metrics: dict[str, Any] = {}

    def train(self, member: Member, steps: int, progress: Progress) -> GenerationStats:
        raise NotImplementedError("a RayRunner trains whole populations (train_population)")

    def train_population(
        self, members: list[Member], steps: int, progress: Progress
    ) -> list[GenerationStats]:
        """Every slot's members trained and scored in its worker, at once."""
        started = time.perf_counter()
        states = [member.state_dict() for member in members]
        slots, start = [], 0
        for size in self.plan.sizes:
            slots.append(states[start : start + size])
            start += size
        generation = _Generation(self, slots, steps, progress)
        outcomes = generation.run()
        flat = [outcome for slot in outcomes for outcome in slot]
        for member, outcome in zip(members, flat, strict=True):
            member.load_state_dict(outcome.state)
        self.fitnesses = [outcome.fitness for outcome in flat]
        wall = time.perf_counter() - started
        self.metrics = {
            "workers": len(self.workers),
            "wall_seconds": round(wall, 3),
            "worker_seconds": round(max(generation.seconds), 3),
            "overhead_seconds": round(wall - max(generation.seconds), 3),
            "bytes_sent": payload_bytes(states),
            "bytes_returned": payload_bytes([outcome.state for outcome in flat]),
            "worker_deaths": sum(generation.deaths),
        }
        return [outcome.stats for outcome in flat]

    def generation_metrics(self) -> dict[str, Any]:
        """``ray``: the last generation's workers, its wall time on the driver, the slowest
        worker's own time, the difference (what Ray and the members' states cost), the bytes
        of member state each way, and how many workers died."""
        return {"ray": self.metrics}

    def evaluate_population(
        self, members: list[Member], rounds: int, max_steps: int | None
    ) -> list[float]:
        """The fitnesses the workers measured right after training (same rounds and steps)."""
        return list(self.fitnesses)

    def close(self) -> None:
        for worker in self.workers:
            self.ray.kill(worker, no_restart=True)


class _Generation:
    """One generation's calls to the workers: waits for them, shows their progress, and makes
    a dead worker's call again."""

    def __init__(
        self, runner: RayRunner, slots: list[list[dict[str, Any]]], steps: int, progress: Progress
    ) -> None:
        self.runner, self.slots, self.steps, self.progress = runner, slots, steps, progress
        self.ray = runner.ray
        self.deaths = [0] * len(slots)
        self.seen = [0] * len(slots)  # steps shown, per slot
        self.last = [0] * len(slots)  # steps the worker said last
        self.moved = [time.monotonic()] * len(slots)
        self.warned: set[int] = set()
        self.seconds = [0.0] * len(slots)  # each worker's own time on its call
        self.restarting = [False] * len(slots)  # died, and not yet trained since
        self.retries: dict[int, float] = {}  # slots to call again, and when
        self.calls = {slot: self._call(slot) for slot in range(len(slots))}

    def _call(self, slot: int) -> Any:
        training = self.runner.training
        worker = self.runner.workers[slot]
        states = self.slots[slot]
        return worker.train.remote(states, self.steps, training.eval_loop, training.eval_steps)

    def run(self) -> list[list[MemberOutcome]]:
        results: dict[int, list[MemberOutcome]] = {}
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

    def _collect(self, slot: int, ref: Any, results: dict[int, list[MemberOutcome]]) -> None:
        from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError

        try:
            outcomes: list[MemberOutcome]
            outcomes, self.seconds[slot] = self.ray.get(ref)
        except ActorUnavailableError as exc:
            if not self.restarting[slot]:
                self._died(slot, exc)
            self.retries[slot] = time.monotonic() + RETRY_SECONDS  # still restarting
            return
        except RayActorError as exc:
            self._died(slot, exc)
            return
        except RayTaskError as exc:
            raise _worker_failure(slot, exc) from None
        results[slot] = outcomes
        done = sum(outcome.stats.steps for outcome in outcomes)
        self.progress(max(0, done - self.seen[slot]))
        self.seen[slot] = max(done, self.seen[slot])

    def _died(self, slot: int, exc: Exception) -> None:
        if getattr(exc, "actor_init_failed", False):
            raise _start_failure(self._members(slot), exc)
        self.deaths[slot] += 1
        if self.deaths[slot] > MAX_DEATHS:
            raise TrainingError(
                f"the Ray worker of {self._members(slot)} died {MAX_DEATHS + 1} times in one "
                f"generation: {_first_line(exc)}",
                "see the worker logs in the Ray session folder (e.g. for running out of memory)",
            )
        self.runner.note(
            f"the Ray worker of {self._members(slot)} died ({_death(exc)}): its members "
            "train this generation again on a restarted worker"
        )
        self.warned.discard(slot)
        self.restarting[slot] = True
        self.moved[slot], self.last[slot] = time.monotonic(), 0
        self.retries[slot] = time.monotonic() + RETRY_SECONDS

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

    def _read(self, ref: Any) -> int | None:
        from ray.exceptions import RayError

        try:
            return int(self.ray.get(ref))
        except RayError:  # restarting: its call fails and is made again
            return None

    def _waiting(self, slot: int, seconds: float) -> None:
        if slot in self.warned:
            return
        self.warned.add(slot)
        plan = self.runner.plan
        self.runner.note(
            f"the Ray worker of {self._members(slot)} has trained nothing for {seconds:.0f} s: "
            f"waiting for it (a worker starting or restarting needs a node with {plan.cpus:g} "
            "CPUs free; Ctrl-C stops the run and keeps its last generation's checkpoint)"
        )

    def _members(self, slot: int) -> str:
        indices = [state["index"] for state in self.slots[slot]]
        return ("member " if len(indices) == 1 else "members ") + ", ".join(map(str, indices))


def payload_bytes(value: Any) -> int:
    """The bytes of the tensors and arrays in ``value`` (dicts, lists and tuples walked): what
    moving a member's state costs, less pickling's small change."""
    if hasattr(value, "untyped_storage"):  # a tensor
        return int(value.numel() * value.element_size())
    if hasattr(value, "nbytes"):  # an array
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(payload_bytes(item) for item in value.values())
    if isinstance(value, list | tuple):
        return sum(payload_bytes(item) for item in value)
    return 0


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
