"""Generalised advantage estimation against a hand-computed case."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agile_rl.runtime.rollout import Rollout, compute_gae


def test_gae_matches_a_hand_computed_episode() -> None:
    gamma, lam = 0.9, 0.8
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [1.0], [1.5]])
    last = torch.tensor([2.0])
    none = torch.zeros(3, 1)
    # delta_t = r_t + gamma * V_{t+1} - V_t
    d2 = 3.0 + 0.9 * 2.0 - 1.5  # 3.3
    d1 = 2.0 + 0.9 * 1.5 - 1.0  # 2.35
    d0 = 1.0 + 0.9 * 1.0 - 0.5  # 1.4
    a2 = d2
    a1 = d1 + gamma * lam * a2
    a0 = d0 + gamma * lam * a1
    advantages = compute_gae(rewards, values, last, none, none, gamma, lam)
    assert advantages.squeeze(1).tolist() == pytest.approx([a0, a1, a2])


def test_gae_stops_at_termination_and_bootstraps_truncation() -> None:
    gamma, lam = 0.9, 1.0
    rewards = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    values = torch.tensor([[0.0, 0.0], [5.0, 5.0]])
    last = torch.tensor([7.0, 7.0])
    # env 0 terminates at step 0; env 1 is truncated at step 0 (its next value is 5.0)
    terminated = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    dones = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    advantages = compute_gae(rewards, values, last, terminated, dones, gamma, lam)
    assert advantages[0, 0].item() == pytest.approx(1.0)  # no bootstrap after termination
    assert advantages[0, 1].item() == pytest.approx(1.0 + 0.9 * 5.0)  # bootstrap, no chaining
    assert advantages[1, 0].item() == pytest.approx(1.0 + 0.9 * 7.0 - 5.0)


def test_rollout_leaves_out_reset_steps() -> None:
    rollout = Rollout()
    for valid in ([True, True], [True, False]):
        step = (torch.zeros(2, dtype=torch.long), torch.zeros(2), torch.zeros(2))
        rollout.add(torch.zeros(2, 3), step, np.ones(2), np.zeros(2, bool), np.zeros(2, bool),
                    np.array(valid))  # fmt: skip
    batch = rollout.finish(torch.zeros(2), 0.99, 0.95)
    assert len(batch) == 3
    assert batch.obs.shape == (3, 3)


@pytest.mark.parametrize(("total", "learn_step"), [(512, 512), (512, 768), (512, 384), (7, 2048)])
def test_rollouts_split_a_generation_exactly(total: int, learn_step: int) -> None:
    from agile_rl.training.runners import rollout_lengths

    lengths = rollout_lengths(total, learn_step, num_envs=8)
    assert sum(lengths) == total
    assert max(lengths) - min(lengths) <= 1
    wanted = learn_step // 8
    if total <= wanted:
        assert lengths == [total]  # never longer than the generation
    else:
        assert all(wanted / 2 <= length <= wanted * 1.5 for length in lengths)
