"""Group replay (``replay_buffer.group_replay_max_age``): a group whose completions tie takes
the stored completion of its task with the highest other return, as sampled (its tokens and
their log-probabilities then), within the age bound; the store keeps each task's latest
completion per return, four returns at most."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from agile_llm.replay import GroupReplay, Stored
from agile_llm.text import Completions

PAD = 0
ROOT = Path(__file__).resolve().parents[1]


def _batch(prompt: list[int], completions: list[list[int]]) -> tuple[Completions, torch.Tensor]:
    """Completions of one prompt laid out as generation lays them (prompt, then completion
    right-padded), with log-probabilities ``-(token / 10)`` at each completion token."""
    width = len(prompt) + max(len(c) for c in completions)
    ids = torch.full((len(completions), width), PAD)
    mask = torch.zeros_like(ids)
    done = torch.zeros_like(ids, dtype=torch.bool)
    old = torch.zeros((len(completions), width - 1))
    for row, tokens in enumerate(completions):
        end = len(prompt) + len(tokens)
        ids[row, : len(prompt)] = torch.tensor(prompt)
        ids[row, len(prompt) : end] = torch.tensor(tokens)
        mask[row, :end] = 1
        done[row, len(prompt) : end] = True
        old[row, len(prompt) - 1 : end - 1] = -torch.tensor(tokens, dtype=torch.float32) / 10
    texts = ["".join(chr(96 + t) for t in tokens) for tokens in completions]
    return Completions(ids, mask, done, texts), old


def test_a_tied_group_takes_the_latest_stored_success_of_its_task() -> None:
    replay = GroupReplay(max_age=4)
    first, old = _batch([5, 6], [[1, 2, 3], [4, 3]])
    replay.apply(["task"], 2, first, old, torch.tensor([1.0, 0.0]), version=0, pad=PAD)
    tied, old = _batch([5, 6], [[7, 3], [8, 3]])
    done, old, rewards = replay.apply(["task"], 2, tied, old, torch.tensor([0.0, 0.0]), 2, PAD)
    assert rewards.tolist() == [0.0, 1.0] and replay.replayed == 1
    # the stored success, widened to fit: its tokens, its text, its log-probabilities then
    assert done.ids[1].tolist() == [5, 6, 1, 2, 3] and done.texts[1] == "abc"
    assert done.completion[1].tolist() == [False, False, True, True, True]
    assert done.mask[1].tolist() == [1, 1, 1, 1, 1]
    torch.testing.assert_close(old[1], torch.tensor([0.0, -0.1, -0.2, -0.3]))
    # the other row is as sampled, padded to the new width
    assert done.ids[0].tolist() == [5, 6, 7, 3, PAD] and done.completion[0, 4].item() is False
    torch.testing.assert_close(old[0], torch.tensor([0.0, -0.7, -0.3, 0.0]))


def test_an_all_success_group_takes_a_past_failure_and_other_tasks_are_left_alone() -> None:
    replay = GroupReplay(max_age=4)
    sampled, old = _batch([5], [[1], [2], [3], [4]])
    replay.apply(["a", "b"], 2, sampled, old, torch.tensor([0.0, 0.5, 1.0, 1.0]), 0, PAD)
    again, old = _batch([5], [[9], [9], [8], [8]])
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0])
    done, _, rewards = replay.apply(["a", "b"], 2, again, old, rewards, 1, PAD)
    assert rewards.tolist() == [1.0, 0.5, 1.0, 1.0]  # task a's best other return; b has none
    assert done.ids[:, 1].tolist() == [9, 2, 8, 8]


def test_an_entry_older_than_max_age_is_never_replayed() -> None:
    replay = GroupReplay(max_age=2)
    replay.record("task", 1.0, Stored((1,), (-0.1,), "a", version=0))
    assert replay.pick("task", 0.0, version=2) is not None
    assert replay.pick("task", 0.0, version=3) is None
    assert replay.pick("task", 1.0, version=1) is None  # the tied return itself is no use


def test_a_task_keeps_its_latest_completion_per_return_and_four_returns() -> None:
    replay = GroupReplay(max_age=10)
    for version, reward in enumerate([0.1, 0.2, 0.3, 0.4, 0.2, 0.5]):
        replay.record("task", reward, Stored((version,), (0.0,), str(version), version))
    kept = replay.tasks["task"]
    assert sorted(kept) == [0.2, 0.3, 0.4, 0.5]  # 0.1, the oldest, went when 0.5 came
    assert kept[0.2].version == 4  # the latest of its return
    chosen = replay.pick("task", 0.5, version=6)
    assert chosen is not None and chosen[0] == 0.4


def test_asynchronous_training_replays_into_each_sampled_batch(
    run: Any, tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2.58's asynchronous manifest with group replay trains here, every sampled batch passing
    through its member's store (the store then holds what was sampled)."""
    calls: list[tuple[int, int]] = []
    original = GroupReplay.apply

    def counted(self: GroupReplay, tasks: list[str], group: int, *args: Any) -> Any:
        calls.append((len(tasks), group))
        return original(self, tasks, group, *args)

    monkeypatch.setattr(GroupReplay, "apply", counted)
    monkeypatch.chdir(ROOT)
    options = {"network.pretrained_model_name_or_path": str(tiny), "algorithm.batch_size": 2,
               "algorithm.group_size": 2, "algorithm.max_output_tokens": 3,
               "training.max_steps": 6, "training.evo_steps": 3,
               "training.eval_rows": 2}  # fmt: skip
    sets = [part for key, value in options.items() for part in ("--set", f"{key}={value}")]
    manifest = ROOT / "tests" / "reference_258" / "llm" / "grpo_async.yaml"
    result = run("train", str(manifest), "--quiet", "--run-dir", str(tmp_path / "run"), *sets)
    assert result.exit_code == 0, result.output
    assert calls == [(2, 2)] * 6  # three iterations of two members, two prompts of two each
