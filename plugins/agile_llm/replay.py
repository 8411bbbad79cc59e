"""Group replay (``replay_buffer.group_replay_max_age``), as agilerl 2.58 defines it.

Each member keeps, per task (a prompt), its most recent completion for each return seen, up to
four returns (a fifth evicts the task's oldest). When every completion of a new group of that
task gets the same return, the group carries no advantage: one of them is swapped for the
stored completion with the highest other return, sampled at most ``max_age`` updates ago, so
that a group that all failed learns from a past success and one that all succeeded from a past
failure. The swapped-in completion keeps the log-probabilities it was sampled with, so the
importance ratio (and its clip) bounds what it teaches. The store is memory only: after a
resume it refills from new groups, as 2.58's does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agile_llm.text import Completions

RETURNS_PER_TASK = 4


@dataclass(frozen=True)
class Stored:
    """A completion as sampled: its tokens (the end token included), their log-probabilities
    then, its text, and the update of the policy that sampled it."""

    ids: tuple[int, ...]
    old: tuple[float, ...]
    text: str
    version: int


class GroupReplay:
    """One member's store of completions, by task and return."""

    def __init__(self, max_age: int, returns_per_task: int = RETURNS_PER_TASK) -> None:
        self.max_age, self.returns_per_task = max_age, returns_per_task
        self.tasks: dict[str, dict[float, Stored]] = {}
        self.replayed = 0  # completions swapped into tied groups so far

    def record(self, task: str, reward: float, stored: Stored) -> None:
        """Keep ``stored`` as the task's latest completion of return ``reward``."""
        kept = self.tasks.setdefault(task, {})
        kept.pop(reward, None)  # re-inserted: the dict's order is the order of recency
        kept[reward] = stored
        while len(kept) > self.returns_per_task:
            del kept[next(iter(kept))]

    def pick(self, task: str, tied: float, version: int) -> tuple[float, Stored] | None:
        """The stored completion of ``task`` with the highest return other than ``tied``,
        sampled at most ``max_age`` updates before ``version``; None where there is none."""
        fresh = [(reward, stored) for reward, stored in self.tasks.get(task, {}).items()
                 if reward != tied and version - stored.version <= self.max_age]  # fmt: skip
        return max(fresh, key=lambda entry: entry[0]) if fresh else None

    def apply(
        self, tasks: list[str], group: int, done: Completions, old: torch.Tensor,
        rewards: torch.Tensor, version: int, pad: int,
    ) -> tuple[Completions, torch.Tensor, torch.Tensor]:  # fmt: skip
        """The sampled groups (``group`` consecutive completions of each of ``tasks``) with the
        last completion of each tied group swapped for a stored one where there is one, their
        log-probabilities at sampling ``old`` ``[N, W - 1]`` and ``rewards`` with it (``pad``:
        the token that fills a widened batch); then the groups as sampled are recorded."""
        sampled = [_stored(done, old, row, version) for row in range(len(done.texts))]
        swaps = []
        for number, task in enumerate(tasks):
            own = rewards[number * group : (number + 1) * group]
            if group < 2 or bool((own != own[0]).any()):
                continue
            chosen = self.pick(task, float(own[0]), version)
            if chosen is not None:
                swaps.append(((number + 1) * group - 1, *chosen))
        for row, stored in enumerate(sampled):
            self.record(tasks[row // group], float(rewards[row]), stored)
        if not swaps:
            return done, old, rewards
        self.replayed += len(swaps)
        return _swapped(done, old, rewards, swaps, pad)


def _start(done: Completions) -> int:
    """The column where completions begin (after the left-padded prompts)."""
    begins = [int(row.nonzero()[0]) for row in done.completion if bool(row.any())]
    return min(begins) if begins else int(done.ids.shape[1])


def _stored(done: Completions, old: torch.Tensor, row: int, version: int) -> Stored:
    columns = done.completion[row].nonzero().flatten()
    ids = done.ids[row, columns].tolist()
    # old[:, t] is the log-probability of the token in column t + 1
    log_probs = old[row, (columns - 1).clamp(min=0)].tolist()
    return Stored(tuple(ids), tuple(log_probs), done.texts[row], version)


def _swapped(
    done: Completions, old: torch.Tensor, rewards: torch.Tensor,
    swaps: list[tuple[int, float, Stored]], pad: int,
) -> tuple[Completions, torch.Tensor, torch.Tensor]:  # fmt: skip
    """``done``, ``old`` and ``rewards`` with row ``r`` of each swap replaced by its stored
    completion (the batch widened where that completion is longer than its columns)."""
    start = _start(done)
    width = max(int(done.ids.shape[1]), *(start + len(s.ids) for _, _, s in swaps))
    extra = width - int(done.ids.shape[1])
    ids = torch.nn.functional.pad(done.ids, (0, extra), value=pad)
    mask = torch.nn.functional.pad(done.mask, (0, extra), value=0)
    completion = torch.nn.functional.pad(done.completion, (0, extra), value=False)
    old = torch.nn.functional.pad(old, (0, extra), value=0.0)
    rewards, texts = rewards.clone(), list(done.texts)
    for row, reward, stored in swaps:
        n = len(stored.ids)
        ids[row, start:] = pad
        ids[row, start : start + n] = torch.tensor(stored.ids, dtype=ids.dtype, device=ids.device)
        mask[row, start:] = 0
        mask[row, start : start + n] = 1
        completion[row] = False
        completion[row, start : start + n] = True
        old[row, start - 1 :] = 0.0
        old[row, start - 1 : start - 1 + n] = torch.tensor(stored.old, dtype=old.dtype,
                                                           device=old.device)  # fmt: skip
        rewards[row], texts[row] = reward, stored.text
    return Completions(ids, mask, completion, texts), old, rewards
