"""The ray backend's asynchronous runner (``--async``): each worker's slot trains its rounds
without waiting for the others, and the loop evolves a slot's members as soon as its round
ends (:mod:`agile_cli.training.asynchronous` says how).

When a slot's round ends, its members' states are *published*: exported once, as one Ray
object per member, owned by the driver. A copy that selection makes of a member of another
slot starts from that object (the other slot may be training the member further by then); so
does every member of a worker that died, which is restarted and trains its round again; and so
do checkpoints, which take each member as it started its current round. A published state is
named by the member's index and the steps it had trained (``(index, steps)``), and kept while a
member of the population, or a slot's latest, may still need it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from agile_cli import AsynchronousRunner, Member, MembersLost, Progress, SlotRound
from agile_cli.helpers import on_cpu
from agile_ray.resident import Instruction, Standin, Trained, payload_bytes, standin_of
from agile_ray.runner import (
    MAX_DEATHS,
    POLL_SECONDS,
    RETRY_SECONDS,
    RayRunner,
    _death,
    _start_failure,
    _worker_failure,
    described,
    read_steps,
    too_many_deaths,
    waiting_note,
    why_restarted,
)

#: A published state's name: the member's index and the steps it had trained.
Key = tuple[int, int]


@dataclass
class _SlotCall:
    """One slot's round in flight (called again after its worker dies)."""

    slot: int
    members: list[Member]
    instructions: list[Instruction]
    steps: int
    ref: Any = None
    called: float = 0.0
    retry_at: float | None = None
    deaths: int = 0
    restarting: bool = False  # died, and not trained since
    overdue: bool = False  # killed for running over --member-timeout
    seen: int = 0  # steps shown
    moved: float = 0.0  # when it was called, or its steps last changed
    warned: bool = False  # said that it waits


class AsyncRayRunner(RayRunner, AsynchronousRunner):
    """A :class:`~agile_ray.runner.RayRunner` whose slots train asynchronously."""

    def __init__(self, *args: Any, max_staleness: int = 2, **options: Any) -> None:
        super().__init__(*args, **options)
        self.max_staleness = max_staleness
        sizes = self.plan.sizes
        ends = [sum(sizes[: k + 1]) for k in range(len(sizes))]
        self.positions = [list(range(end - n, end)) for end, n in zip(ends, sizes, strict=True)]
        self.published: dict[Key, Any] = {}
        self.cache: dict[Key, dict[str, Any]] = {}  # published states the driver fetched
        self.holding: list[set[Key]] = [set() for _ in sizes]  # what each worker holds
        self.latest: list[set[Key]] = [set() for _ in sizes]  # each slot's last round's
        self.calls: dict[int, _SlotCall] = {}
        self.began: float | None = None
        self.slot_accounts = [
            {"rounds": 0, "steps": 0, "worker_seconds": 0.0, "ended_at": 0.0} for _ in sizes
        ]
        self.counts = {"bytes_copied": 0, "bytes_fetched": 0, "worker_deaths": 0}

    # -- AsynchronousRunner ----------------------------------------------------------------------

    def slots(self) -> list[list[int]]:
        return [list(positions) for positions in self.positions]

    def running(self) -> list[int]:
        return sorted(self.calls)

    def start(self, slot: int, members: list[Any], steps: int) -> None:
        if self.template is None:
            self.template = members[0].clone(members[0].index)
        if self.began is None:
            self.began = time.monotonic()
        instructions = [
            member.instruction()
            if isinstance(member, Standin)
            else Instruction(member.index, state=on_cpu(member.state_dict()))
            for member in members
        ]
        call = _SlotCall(slot, list(members), instructions, steps)
        self.calls[slot] = call
        self._call(call)

    def _call(self, call: _SlotCall) -> None:
        """Call the slot's worker, with the published states of the sources it does not hold."""
        wanted = sorted(_sources(call.members) - self.holding[call.slot])
        if missing := [key for key in wanted if key not in self.published]:
            raise MembersLost(f"member {missing[0][0]}'s state after {missing[0][1]} steps is lost")
        training = self.training
        call.called, call.retry_at = time.monotonic(), None
        call.moved = call.moved or call.called
        call.ref = self.workers[call.slot].train.remote(
            call.instructions, call.steps, training.eval_loop, training.eval_steps,
            *(self.published[key] for key in wanted),
        )  # fmt: skip

    def finished(self, progress: Progress) -> SlotRound:
        while True:
            refs = {call.ref: slot for slot, call in self.calls.items() if call.ref is not None}
            ready: list[Any] = []
            if refs:
                ready, _ = self.ray.wait(list(refs), num_returns=1, timeout=POLL_SECONDS)
            else:
                time.sleep(POLL_SECONDS)
            if ready and (done := self._collect(self.calls[refs[ready[0]]], progress)):
                return done
            self._call_again_when_due()
            self._look_at_progress(progress)

    def settle(self) -> None:
        refs = [call.ref for call in self.calls.values() if call.ref is not None]
        if refs:
            self.ray.wait(refs, num_returns=len(refs))
        self.calls = {}
        self.holding = [set() for _ in self.positions]  # what they hold is a round on

    # -- a round's end ---------------------------------------------------------------------------

    def _collect(self, call: _SlotCall, progress: Progress) -> SlotRound | None:
        from ray.exceptions import (
            ActorUnavailableError,
            ObjectLostError,
            RayError,
            RayTaskError,
        )

        try:
            trained: list[Trained]
            trained, seconds, received = self.ray.get(call.ref)
            refs = self._publish(call.slot, trained)
        except ActorUnavailableError as exc:
            if call.restarting and not call.overdue:  # still restarting: not a new death
                call.ref, call.retry_at = None, time.monotonic() + RETRY_SECONDS
            else:
                self._died(call, exc)
            return None
        except ObjectLostError:  # a published state left with its node
            raise MembersLost(f"a published state for {_members(call)} was lost") from None
        except RayTaskError as exc:
            if isinstance(exc.cause, ObjectLostError):
                raise MembersLost(f"a published state for {_members(call)} was lost") from None
            raise _worker_failure(call.slot, exc) from None
        except RayError as exc:  # the worker is gone (RayActorError, and the like)
            self._died(call, exc)
            return None
        del self.calls[call.slot]
        done = sum(account.stats.steps for account in trained)
        progress(max(0, done - call.seen))
        keys = [(account.index, account.steps) for account in trained]
        self.published.update(zip(keys, refs, strict=True))
        self.holding[call.slot], self.latest[call.slot] = set(keys), set(keys)
        self._account(call, trained, seconds, received)
        members = [
            standin_of(account, member.record, self)
            for account, member in zip(trained, call.members, strict=True)
        ]
        self._forget_unneeded()
        return SlotRound(
            call.slot, self.positions[call.slot], members,
            [account.stats for account in trained], [account.fitness for account in trained],
        )  # fmt: skip

    def _publish(self, slot: int, trained: list[Trained]) -> list[Any]:
        """One object per member the slot just trained, made before it trains them further."""
        indices = [account.index for account in trained]
        made = self.workers[slot].export_each.options(num_returns=len(indices)).remote(indices)
        refs = [made] if len(indices) == 1 else list(made)
        self.ray.wait(refs, num_returns=len(refs), fetch_local=False)
        return refs

    def _account(
        self, call: _SlotCall, trained: list[Trained], seconds: float, received: int
    ) -> None:
        sent = payload_bytes([instruction.state for instruction in call.instructions])
        self.counts["bytes_copied"] += received - sent
        slot = self.slot_accounts[call.slot]
        slot["rounds"] += 1
        slot["steps"] += sum(account.stats.steps for account in trained)
        slot["worker_seconds"] = round(float(slot["worker_seconds"]) + seconds, 3)
        slot["ended_at"] = round(time.monotonic() - (self.began or 0.0), 3)

    def _forget_unneeded(self) -> None:
        """Drop the published states no member of the population, nor a slot's latest, still
        starts from."""
        needed = set().union(*self.latest)
        for call in self.calls.values():
            needed |= _sources(call.members)
        for key in set(self.published) - needed:
            del self.published[key]
            self.cache.pop(key, None)

    # -- faults ----------------------------------------------------------------------------------

    def _died(self, call: _SlotCall, exc: Exception) -> None:
        if getattr(exc, "actor_init_failed", False):
            raise _start_failure(_members(call), exc)
        call.deaths += 1
        self.counts["worker_deaths"] += 1
        if call.deaths > MAX_DEATHS:
            raise too_many_deaths(_members(call), exc, self.member_timeout, "round")
        what = why_restarted(exc, call.overdue, self.member_timeout)
        self.note(
            f"the Ray worker of {_members(call)} {what}: its members train this round again "
            "on a restarted worker, from their published states"
        )
        self.holding[call.slot] = set()  # a restarted worker holds nothing
        call.overdue, call.restarting = False, True
        call.ref, call.retry_at = None, time.monotonic() + RETRY_SECONDS
        call.moved, call.warned = time.monotonic(), False

    def _call_again_when_due(self) -> None:
        now = time.monotonic()
        for call in self.calls.values():
            if call.ref is None and call.retry_at is not None and now >= call.retry_at:
                self._call(call)

    def _look_at_progress(self, progress: Progress) -> None:
        running = [call for call in self.calls.values() if call.ref is not None]
        asked = {call.slot: self.workers[call.slot].progress.remote() for call in running}
        ready: list[Any] = []
        if asked:
            ready, _ = self.ray.wait(list(asked.values()), num_returns=len(asked), timeout=1.0)
        now = time.monotonic()
        for call in running:
            ref = asked[call.slot]
            steps = read_steps(self.ray, ref) if ref in ready else None
            if steps is not None and steps > call.seen:
                progress(steps - call.seen)
                call.seen, call.restarting, call.moved, call.warned = steps, False, now, False
            bound = self.member_timeout
            if bound is not None and now - call.called > bound and not call.overdue:
                call.overdue = True  # its call fails as a death: handled there
                self.ray.kill(self.workers[call.slot], no_restart=False)
        for call in self.calls.values():  # training nothing, or waiting to be called again
            if not call.warned and now - call.moved > self.timeout:
                call.warned = True
                self.note(waiting_note(_members(call), now - call.moved, self.plan.cpus))

    # -- the driver's needs ----------------------------------------------------------------------

    def fetch(self, index: int, steps: int) -> dict[str, Any]:
        """A published state (the elite, checkpoints, scoring again)."""
        key = (index, steps)
        if key not in self.cache:
            self._fetch_published({key})
        return self.cache[key]

    def state_dicts(self, members: list[Member]) -> list[dict[str, Any]]:
        """The members as they start their current round, from their published sources (one
        fetch for all)."""
        unmade = [m for m in members if not (isinstance(m, Standin) and m.made is not None)]
        if wanted := _sources(unmade) - self.cache.keys():
            self._fetch_published(wanted)
        return [member.state_dict() for member in members]

    def _fetch_published(self, keys: set[Key]) -> None:
        from ray.exceptions import RayError

        if lost := sorted(keys - self.published.keys()):
            raise MembersLost(f"member {lost[0][0]}'s state after {lost[0][1]} steps is lost")
        ordered = sorted(keys)
        try:
            batches = self.ray.get([self.published[key] for key in ordered])
        except RayError as exc:
            raise MembersLost(f"a published member state was lost ({_death(exc)})") from None
        for key, batch in zip(ordered, batches, strict=True):
            self.cache[key] = batch[key[0]]
            self.counts["bytes_fetched"] += payload_bytes(batch)

    def generation_metrics(self) -> dict[str, Any]:
        """``ray``: the workers, the bytes of member state copied between workers and fetched
        by the driver since the last line, and the workers that died."""
        record = {"workers": len(self.workers), **self.counts}
        self.counts = dict.fromkeys(self.counts, 0)
        return {"ray": record}

    def async_metrics(self) -> dict[str, Any]:
        """Per slot: rounds, steps and the worker's own seconds so far, and when (seconds
        after the first round started) its last round ended."""
        return {"slots": [dict(account) for account in self.slot_accounts]}

    def train_population(self, members: list[Member], steps: int, progress: Progress) -> Any:
        raise NotImplementedError("an asynchronous runner trains slots (start, finished)")


def _sources(members: list[Member]) -> set[Key]:
    """The published states the stand-ins among ``members`` start from."""
    return {
        (m.held, m.record.steps) for m in members if isinstance(m, Standin) and m.held is not None
    }


def _members(call: _SlotCall) -> str:
    return described(call.instructions)
