"""Replay buffers: ring storage, masking, seeded sampling, checkpoints, n-step and priorities."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_cli import UsageError
from agile_rl.runtime.buffers import (
    NStepAccumulator,
    NStepBatch,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    SumTree,
    Transitions,
)

VECTOR = spaces.Box(-10.0, 10.0, shape=(3,), dtype=np.float32)
TWO_ACTIONS = spaces.Discrete(2)


def _fill(buffer: ReplayBuffer, rows: int, start: float = 0.0) -> None:
    """Add ``rows`` transitions one env-batch of 1 at a time; row ``v`` carries ``v`` everywhere:
    obs ``[v, v, v]``, next_obs ``[v + 0.5] * 3``, reward ``v``, action ``v % 2``."""
    for value in np.arange(start, start + rows):
        obs = np.full((1, 3), value, dtype=np.float32)
        buffer.add(obs, np.array([int(value) % 2]), np.array([value]), obs + 0.5, np.array([0]))


def _assert_aligned(batch: Transitions) -> None:
    """Every sampled row is one stored transition, not a mix of several."""
    values = batch.obs[:, 0]
    assert torch.equal(batch.obs, values[:, None].expand(-1, 3))
    assert torch.equal(batch.next_obs, batch.obs + 0.5)
    assert torch.equal(batch.rewards, values)
    assert torch.equal(batch.actions, values.long() % 2)


def test_ring_buffer_overwrites_the_oldest_when_full() -> None:
    buffer = ReplayBuffer(5, VECTOR, TWO_ACTIONS, gamma=0.9)
    _fill(buffer, 7)
    assert len(buffer) == 5
    batch = buffer.sample(500, torch.Generator().manual_seed(0))
    assert set(batch.rewards.tolist()) == {2.0, 3.0, 4.0, 5.0, 6.0}
    _assert_aligned(batch)


def _add_batch(buffer: ReplayBuffer, values: np.ndarray) -> None:
    """Add one env-batch whose rows follow the convention of :func:`_fill`."""
    obs = values[:, None].repeat(3, axis=1).astype(np.float32)
    actions = values.astype(np.int64) % 2
    buffer.add(obs, actions, values, obs + 0.5, np.zeros(len(values)))


def test_a_batch_wraps_around_the_end_of_the_ring() -> None:
    buffer = ReplayBuffer(5, VECTOR, TWO_ACTIONS, gamma=0.9)
    _add_batch(buffer, np.arange(4.0))
    _add_batch(buffer, np.arange(4.0, 7.0))  # slots 4, 0, 1
    assert len(buffer) == 5
    batch = buffer.sample(500, torch.Generator().manual_seed(0))
    assert set(batch.rewards.tolist()) == {2.0, 3.0, 4.0, 5.0, 6.0}
    _assert_aligned(batch)


def test_a_batch_larger_than_the_capacity_keeps_its_last_rows() -> None:
    buffer = ReplayBuffer(3, VECTOR, TWO_ACTIONS, gamma=0.9)
    _add_batch(buffer, np.arange(7.0))
    assert len(buffer) == 3
    batch = buffer.sample(200, torch.Generator().manual_seed(0))
    assert set(batch.rewards.tolist()) == {4.0, 5.0, 6.0}
    _assert_aligned(batch)


def test_mask_skips_rows_and_samples_are_stored_transitions() -> None:
    buffer = ReplayBuffer(10, VECTOR, TWO_ACTIONS, gamma=0.9)
    values = np.arange(4.0)
    obs = values[:, None].repeat(3, axis=1).astype(np.float32)
    mask = np.array([True, False, True, False])
    buffer.add(obs, values.astype(np.int64) % 2, values, obs + 0.5, values == 2, mask=mask)
    assert len(buffer) == 2
    batch = buffer.sample(200, torch.Generator().manual_seed(0))
    assert set(batch.rewards.tolist()) == {0.0, 2.0}
    _assert_aligned(batch)
    assert torch.equal(batch.terminated, (batch.rewards == 2).float())
    assert batch.discounts is None  # one-step transitions: the algorithm's own gamma
    assert torch.equal(batch.weights, torch.ones(200))
    assert torch.equal(batch.rewards, 2.0 * batch.indices)  # kept rows fill slots 0 and 1


def test_all_masked_rows_store_nothing() -> None:
    buffer = ReplayBuffer(10, VECTOR, TWO_ACTIONS, gamma=0.9)
    obs = np.zeros((2, 3), dtype=np.float32)
    buffer.add(obs, np.zeros(2), np.zeros(2), obs, np.zeros(2), mask=np.zeros(2, dtype=bool))
    assert len(buffer) == 0
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(1, torch.Generator())


def test_explicit_discounts_are_stored_per_transition() -> None:
    buffer = ReplayBuffer(4, VECTOR, TWO_ACTIONS, gamma=0.9)
    obs = np.array([[0.0] * 3, [1.0] * 3], dtype=np.float32)
    discounts = np.array([0.5, 0.25])
    buffer.add(obs, np.zeros(2), np.array([0.0, 1.0]), obs, np.zeros(2), discounts=discounts)
    batch = buffer.sample(100, torch.Generator().manual_seed(0))
    assert torch.equal(batch.discounts, torch.where(batch.rewards == 0, 0.5, 0.25))


def test_sampling_is_reproducible_with_the_same_seed_only() -> None:
    buffer = ReplayBuffer(100, VECTOR, TWO_ACTIONS, gamma=0.9)
    _fill(buffer, 100)
    torch.manual_seed(0)
    first = buffer.sample(32, torch.Generator().manual_seed(7))
    torch.manual_seed(1)  # the global RNG must play no part
    again = buffer.sample(32, torch.Generator().manual_seed(7))
    other = buffer.sample(32, torch.Generator().manual_seed(8))
    assert torch.equal(first.indices, again.indices)
    assert torch.equal(first.obs, again.obs)
    assert not torch.equal(first.indices, other.indices)


def test_dict_observations_with_uint8_images_and_box_actions() -> None:
    observation_space = spaces.Dict(
        {
            "image": spaces.Box(0, 255, shape=(2, 4, 4), dtype=np.uint8),
            "position": spaces.Discrete(5),
        }
    )
    action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    buffer = ReplayBuffer(8, observation_space, action_space, gamma=0.99)
    image = np.stack([np.full((2, 4, 4), 200 + i, dtype=np.uint8) for i in range(3)])
    obs = {"image": image, "position": np.array([0, 1, 2])}
    next_obs = {"image": image + 1, "position": np.array([1, 2, 3])}
    actions = np.array([[0.5, -0.5], [0.25, -0.25], [1.0, -1.0]], dtype=np.float32)
    buffer.add(obs, actions, np.zeros(3), next_obs, np.zeros(3))
    batch = buffer.sample(50, torch.Generator().manual_seed(0))
    assert batch.obs["image"].dtype == torch.uint8
    assert batch.obs["image"].shape == (50, 2, 4, 4)
    assert batch.obs["position"].dtype == torch.int64
    assert batch.obs["position"].shape == (50,)
    assert batch.actions.dtype == torch.float32
    assert batch.actions.shape == (50, 2)
    slot = batch.obs["position"]
    assert torch.equal(batch.obs["image"][:, 0, 0, 0], (200 + slot).to(torch.uint8))
    assert torch.equal(batch.next_obs["image"], batch.obs["image"] + 1)
    assert torch.equal(batch.next_obs["position"], slot + 1)
    assert torch.equal(batch.actions, torch.from_numpy(actions)[slot])


def test_discrete_and_multidiscrete_actions_are_int64() -> None:
    for action_space, actions, shape in [
        (spaces.Discrete(3), np.array([2, 1]), (10,)),
        (spaces.MultiDiscrete([3, 4]), np.array([[2, 3], [1, 0]]), (10, 2)),
    ]:
        buffer = ReplayBuffer(4, VECTOR, action_space, gamma=0.9)
        obs = np.array([[0.0] * 3, [1.0] * 3], dtype=np.float32)
        buffer.add(obs, actions, np.zeros(2), obs, np.zeros(2))
        batch = buffer.sample(10, torch.Generator().manual_seed(0))
        assert batch.actions.dtype == torch.int64
        assert batch.actions.shape == shape
        assert torch.equal(batch.actions, torch.from_numpy(actions)[batch.obs[:, 0].long()])


def test_unsupported_space_is_refused_with_a_hint() -> None:
    from agile_cli.errors import UsageError

    nested = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3)))
    with pytest.raises(UsageError, match="Tuple") as caught:
        ReplayBuffer(4, nested, TWO_ACTIONS, gamma=0.9)
    assert caught.value.hint is not None
    assert "FlattenObservation" in caught.value.hint


def _round_trip(state: dict) -> dict:
    saved = io.BytesIO()
    torch.save(state, saved)
    saved.seek(0)
    return torch.load(saved)


@pytest.mark.parametrize("buffer_class", [ReplayBuffer, PrioritizedReplayBuffer])
def test_state_dict_round_trip_reproduces_samples(buffer_class: type[ReplayBuffer]) -> None:
    buffer = buffer_class(6, VECTOR, TWO_ACTIONS, gamma=0.9)
    _fill(buffer, 8)
    if isinstance(buffer, PrioritizedReplayBuffer):
        buffer.update_priorities(torch.tensor([0, 3]), np.array([5.0, 0.1]))
    state = _round_trip(buffer.state_dict())
    restored = buffer_class(6, VECTOR, TWO_ACTIONS, gamma=0.9)
    restored.load_state_dict(state)
    assert len(restored) == len(buffer)
    first = buffer.sample(40, torch.Generator().manual_seed(3))
    second = restored.sample(40, torch.Generator().manual_seed(3))
    for mine, theirs in zip(first, second, strict=True):
        assert (mine is None and theirs is None) or torch.equal(mine, theirs)
    # the write position came back too: the next add overwrites the same slot in both
    _fill(buffer, 1, start=100.0)
    _fill(restored, 1, start=100.0)
    assert torch.equal(buffer.state_dict()["rewards"], restored.state_dict()["rewards"])


def test_loading_a_state_of_another_shape_is_refused() -> None:
    from agile_cli.errors import UsageError

    buffer = ReplayBuffer(6, VECTOR, TWO_ACTIONS, gamma=0.9)
    _fill(buffer, 2)
    wider = ReplayBuffer(6, spaces.Box(-1, 1, shape=(4,)), TWO_ACTIONS, gamma=0.9)
    with pytest.raises(UsageError, match="obs shape"):
        wider.load_state_dict(buffer.state_dict())
    with pytest.raises(UsageError, match="capacities"):
        ReplayBuffer(7, VECTOR, TWO_ACTIONS, gamma=0.9).load_state_dict(buffer.state_dict())


def _step(
    accumulator: NStepAccumulator, value: float, *, done: str = "", env: int = 0
) -> NStepBatch | None:
    """Push one step for env ``env`` of ``accumulator`` (others masked out); obs is the step
    number ``value``, next_obs ``value + 1``, reward ``value + 1``."""
    count = accumulator.num_envs
    obs = np.full((count, 1), value, dtype=np.float32)
    mask = np.arange(count) == env
    terminated = mask & (done == "terminated")
    truncated = mask & (done == "truncated")
    rewards = np.full(count, value + 1.0)
    actions = np.full(count, int(value))
    return accumulator.push(obs, actions, rewards, obs + 1, terminated, truncated, mask)


def test_n_step_returns_by_hand() -> None:
    accumulator = NStepAccumulator(3, 0.9, num_envs=1)
    assert _step(accumulator, 0) is None
    assert _step(accumulator, 1) is None
    first = _step(accumulator, 2)
    assert first is not None
    assert first.rewards.tolist() == pytest.approx([1 + 0.9 * 2 + 0.81 * 3])
    assert first.discounts.tolist() == pytest.approx([0.729])
    assert first.obs.tolist() == [[0.0]]
    assert first.next_obs.tolist() == [[3.0]]  # the observation after step 3
    assert first.actions.tolist() == [0]
    assert first.terminated.tolist() == [0.0]
    second = _step(accumulator, 3)
    assert second is not None
    assert second.rewards.tolist() == pytest.approx([2 + 0.9 * 3 + 0.81 * 4])
    assert second.obs.tolist() == [[1.0]]
    assert first.rewards.dtype == first.discounts.dtype == np.float32


def test_termination_flushes_shorter_windows() -> None:
    accumulator = NStepAccumulator(3, 0.9, num_envs=1)
    assert _step(accumulator, 0) is None
    batch = _step(accumulator, 1, done="terminated")
    assert batch is not None
    assert batch.obs.tolist() == [[0.0], [1.0]]
    assert batch.rewards.tolist() == pytest.approx([1 + 0.9 * 2, 2])
    assert batch.discounts.tolist() == pytest.approx([0.81, 0.9])
    assert batch.terminated.tolist() == [1.0, 1.0]
    assert batch.next_obs.tolist() == [[2.0], [2.0]]
    # the next episode starts from scratch
    assert _step(accumulator, 10) is None


def test_truncation_flushes_and_keeps_bootstrapping() -> None:
    accumulator = NStepAccumulator(3, 0.9, num_envs=1)
    _step(accumulator, 0)
    batch = _step(accumulator, 1, done="truncated")
    assert batch is not None
    assert batch.terminated.tolist() == [0.0, 0.0]
    assert batch.discounts.tolist() == pytest.approx([0.81, 0.9])
    assert batch.next_obs.tolist() == [[2.0], [2.0]]


def test_masked_rows_are_ignored_and_envs_interleave_independently() -> None:
    accumulator = NStepAccumulator(2, 0.5, num_envs=2)
    assert _step(accumulator, 0, env=0) is None
    assert _step(accumulator, 100, env=1) is None
    # env 1 terminating does not flush env 0's pending step
    ended = _step(accumulator, 101, env=1, done="terminated")
    assert ended is not None
    assert ended.obs.tolist() == [[100.0], [101.0]]
    assert ended.rewards.tolist() == pytest.approx([101 + 0.5 * 102, 102])
    # a masked-out done row flushes nothing
    masked = np.zeros(2, dtype=bool)
    obs = np.zeros((2, 1), dtype=np.float32)
    done = np.ones(2, dtype=bool)
    assert accumulator.push(obs, np.zeros(2), np.zeros(2), obs, done, done, masked) is None
    batch = _step(accumulator, 1, env=0)
    assert batch is not None
    assert batch.obs.tolist() == [[0.0]]
    assert batch.rewards.tolist() == pytest.approx([1 + 0.5 * 2])
    assert batch.next_obs.tolist() == [[2.0]]


def _windows_one_by_one(n_step: int, gamma: float, steps: list[dict]) -> list[tuple]:
    """What n-step accumulation yields, computed env by env with plain lists."""
    windows: dict[int, list[tuple[float, float]]] = {}
    out = []
    for step in steps:
        for env in np.flatnonzero(step["mask"]):
            window = windows.setdefault(env, [])
            window.append((float(step["obs"][env, 0]), float(step["rewards"][env])))
            done = step["terminated"][env] or step["truncated"][env]
            while window and (done or len(window) == n_step):
                ret = sum(gamma**i * reward for i, (_, reward) in enumerate(window))
                ended = float(step["terminated"][env])
                out.append((window[0][0], ret, float(step["next_obs"][env, 0]), ended,
                            gamma ** len(window)))  # fmt: skip
                window.pop(0)
                if not done:
                    break
    return out


@pytest.mark.parametrize("n_step", [1, 3, 5])
def test_n_step_windows_of_many_envs_match_them_one_by_one(n_step: int) -> None:
    rng = np.random.default_rng(n_step)
    envs, gamma = 6, 0.9
    steps = [
        {"obs": rng.normal(size=(envs, 1)).astype(np.float32), "rewards": rng.normal(size=envs),
         "next_obs": rng.normal(size=(envs, 1)).astype(np.float32),
         "terminated": rng.random(envs) < 0.1, "truncated": rng.random(envs) < 0.05,
         "mask": rng.random(envs) < 0.8}
        for _ in range(60)
    ]  # fmt: skip
    accumulator = NStepAccumulator(n_step, gamma, num_envs=envs)
    got = []
    for step in steps:
        batch = accumulator.push(step["obs"], np.zeros(envs), step["rewards"], step["next_obs"],
                                 step["terminated"], step["truncated"], step["mask"])  # fmt: skip
        if batch is not None:
            got += zip(batch.obs[:, 0], batch.rewards, batch.next_obs[:, 0], batch.terminated,
                       batch.discounts, strict=True)  # fmt: skip
    expected = _windows_one_by_one(n_step, gamma, steps)
    assert len(got) == len(expected) > 0
    np.testing.assert_allclose(np.array(got, dtype=np.float64), np.array(expected), rtol=1e-6)


def test_resetting_an_accumulator_drops_pending_windows() -> None:
    accumulator = NStepAccumulator(3, 0.9, num_envs=1)
    _step(accumulator, 0)
    _step(accumulator, 1)
    accumulator.reset()
    assert _step(accumulator, 10) is None and _step(accumulator, 11) is None
    batch = _step(accumulator, 12)
    assert batch is not None and batch.obs.tolist() == [[10.0]]


def test_n_step_batches_go_straight_into_a_buffer_with_dict_observations() -> None:
    accumulator = NStepAccumulator(2, 0.9, num_envs=2)
    space = spaces.Dict({"x": spaces.Box(-1, 1, shape=(2,)), "k": spaces.Discrete(9)})
    buffer = ReplayBuffer(10, space, TWO_ACTIONS, gamma=0.9)
    for step in range(3):
        obs = {"x": np.full((2, 2), step, dtype=np.float32), "k": np.array([step, step])}
        next_obs = {"x": obs["x"] + 1, "k": obs["k"] + 1}
        batch = accumulator.push(
            obs, np.zeros(2), np.ones(2), next_obs, np.zeros(2), np.zeros(2, dtype=bool)
        )
        if batch is not None:
            buffer.add(**batch._asdict())
    assert len(buffer) == 4
    sample = buffer.sample(50, torch.Generator().manual_seed(0))
    assert torch.equal(sample.next_obs["k"], sample.obs["k"] + 2)
    assert torch.allclose(sample.discounts, torch.full((50,), 0.81))
    assert torch.allclose(sample.rewards, torch.full((50,), 1.9))


def test_each_n_step_row_keeps_the_one_step_transition_it_starts_with() -> None:
    """Two environments, 2-step windows: env 0 runs on, env 1's episode ends at step 1. The
    first steps are the plain transitions: the next step's observation within a window, the
    reached one (and its termination) for a window of one step."""
    accumulator = NStepAccumulator(2, 0.9, num_envs=2)
    space = spaces.Dict({"x": spaces.Box(-9, 9, shape=(1,)), "k": spaces.Discrete(9)})
    buffer = ReplayBuffer(10, space, TWO_ACTIONS, gamma=0.9, first_steps=True)
    ends = [np.array([False, False]), np.array([False, True]), np.array([False, False])]
    for step, ended in enumerate(ends):
        obs = {"x": np.full((2, 1), step, dtype=np.float32), "k": np.array([step, step])}
        reached = {"x": obs["x"] + 1, "k": obs["k"] + 1}
        rewards = np.array([1.0, 10.0]) * (step + 1)
        batch = accumulator.push(obs, np.zeros(2), rewards, reached, ended, np.zeros(2, bool))
        if batch is not None:
            buffer.add(**batch._asdict())
    sample = buffer.sample(64, torch.Generator().manual_seed(0))
    assert sample.step_rewards is not None and sample.step_terminated is not None
    assert isinstance(sample.step_next_obs, dict)
    torch.testing.assert_close(sample.step_next_obs["k"], sample.obs["k"] + 1)
    step = sample.obs["k"].float()
    torch.testing.assert_close(sample.step_rewards, torch.where(
        sample.rewards > 15, 10.0 * (step + 1), 1.0 * (step + 1)))  # fmt: skip
    # env 1's step 1 ended its episode: its first step is terminal, every other is not
    torch.testing.assert_close(sample.step_terminated, (sample.rewards == 20.0).float())
    with pytest.raises(ValueError, match="first="):
        buffer.add(obs, np.zeros(2), np.zeros(2), obs, np.zeros(2))


def test_a_buffer_keeping_first_steps_refuses_rows_saved_without_them() -> None:
    plain = ReplayBuffer(8, VECTOR, TWO_ACTIONS, gamma=0.9)
    _fill(plain, 3)
    keeping = ReplayBuffer(8, VECTOR, TWO_ACTIONS, gamma=0.9, first_steps=True)
    with pytest.raises(UsageError, match="step_rewards column"):
        keeping.load_state_dict(plain.state_dict())
    with pytest.raises(UsageError, match="step_rewards column"):
        keeping.add_rows(plain.rows_since(0))
    assert len(keeping) == 0


def _prioritised(alpha: float, rows: int = 3) -> PrioritizedReplayBuffer:
    buffer = PrioritizedReplayBuffer(8, VECTOR, TWO_ACTIONS, gamma=0.9, alpha=alpha)
    _fill(buffer, rows)
    return buffer


def test_sampling_follows_priorities() -> None:
    buffer = _prioritised(alpha=1.0)
    buffer.update_priorities(torch.tensor([0, 1, 2]), torch.tensor([1.0, 1.0, 8.0]))
    batch = buffer.sample(4000, torch.Generator().manual_seed(0))
    share = (batch.indices == 2).float().mean().item()
    assert 0.75 < share < 0.85
    _assert_aligned(batch)
    assert torch.all(batch.weights <= 1.0)
    assert batch.weights.max().item() == 1.0
    # rarely drawn slots carry the largest weights: (N * P)^-beta with P = 0.1 vs 0.8
    rare = batch.weights[batch.indices == 0][0].item()
    assert rare == 1.0
    common = batch.weights[batch.indices == 2][0].item()
    assert common == pytest.approx(8.0**-0.4)


def test_alpha_zero_samples_uniformly() -> None:
    buffer = _prioritised(alpha=0.0, rows=4)
    buffer.update_priorities(torch.tensor([0, 1, 2, 3]), np.array([1.0, 1.0, 50.0, 0.01]))
    batch = buffer.sample(4000, torch.Generator().manual_seed(0))
    counts = torch.bincount(batch.indices, minlength=4).float() / 4000
    assert torch.allclose(counts, torch.full((4,), 0.25), atol=0.03)
    assert torch.equal(batch.weights, torch.ones(4000))


def test_new_transitions_get_the_largest_priority_seen() -> None:
    buffer = _prioritised(alpha=1.0, rows=2)
    buffer.update_priorities(torch.tensor([0, 1]), np.array([0.5, 4.0]))
    _fill(buffer, 1, start=2.0)
    batch = buffer.sample(4500, torch.Generator().manual_seed(0))
    counts = torch.bincount(batch.indices, minlength=3).float() / 4500
    assert torch.allclose(counts, torch.tensor([0.5, 4.0, 4.0]) / 8.5, atol=0.03)


def test_invalid_priorities_are_refused() -> None:
    buffer = _prioritised(alpha=0.5)
    with pytest.raises(ValueError, match="positive"):
        buffer.update_priorities(torch.tensor([0]), np.array([0.0]))
    with pytest.raises(ValueError, match="stored slots"):
        buffer.update_priorities(torch.tensor([5]), np.array([1.0]))


def test_sum_tree_stays_consistent_after_many_updates() -> None:
    rng = np.random.default_rng(0)
    tree = SumTree(100)
    leaves = np.zeros(100)
    for _ in range(300):
        slots = rng.integers(0, 100, size=16)
        values = rng.random(16) * 10
        tree.set(slots, values)
        leaves[slots] = values  # numpy keeps the last value of a repeated slot, as the tree
    assert tree.total == pytest.approx(leaves.sum(), rel=1e-12)
    assert np.array_equal(tree.get(np.arange(100)), leaves)
    cumulative = np.cumsum(leaves)
    targets = rng.random(1000) * leaves.sum()
    assert np.array_equal(tree.find(targets), np.searchsorted(cumulative, targets, side="right"))


def test_sum_tree_never_returns_an_empty_slot() -> None:
    tree = SumTree(5)
    tree.set(np.array([0, 1, 2]), np.array([1.0, 0.0, 2.0]))
    found = tree.find(np.array([0.0, 1.0, 2.999, 3.0, 3.5]))
    assert found.tolist() == [0, 2, 2, 2, 2]


# -- rows shared between buffers (the ray backend's --share-experience) ---------------------------


@pytest.mark.parametrize("buffer_class", [ReplayBuffer, PrioritizedReplayBuffer])
def test_rows_since_a_mark_move_to_another_buffer_in_order(
    buffer_class: type[ReplayBuffer],
) -> None:
    giver = buffer_class(6, VECTOR, TWO_ACTIONS, gamma=0.9)
    _fill(giver, 4)
    mark = giver.added
    _fill(giver, 5, start=10.0)  # wraps the ring of 6: rows 10-14 are its latest
    rows = giver.rows_since(mark)
    assert rows["count"] == 5 and rows["columns"]["rewards"].tolist() == [10, 11, 12, 13, 14]
    taker = buffer_class(4, VECTOR, TWO_ACTIONS, gamma=0.9)
    _fill(taker, 3, start=100.0)
    taker.add_rows(rows)  # more than it holds: its last 4 rows, after its own
    assert len(taker) == 4 and taker.added == 7
    batch = taker.sample(400, torch.Generator().manual_seed(0))
    assert set(batch.rewards.tolist()) == {11.0, 12.0, 13.0, 14.0}
    _assert_aligned(batch)
    assert giver.rows_since(giver.added)["count"] == 0


def test_shared_rows_keep_their_n_step_discounts() -> None:
    giver = ReplayBuffer(8, VECTOR, TWO_ACTIONS, gamma=0.9)
    obs = np.zeros((2, 3), dtype=np.float32)
    giver.add(obs, np.array([0, 1]), np.array([1.0, 2.0]), obs, np.array([0, 1]),
              discounts=np.array([0.81, 0.0], dtype=np.float32))  # fmt: skip
    taker = ReplayBuffer(8, VECTOR, TWO_ACTIONS, gamma=0.9)
    taker.add_rows(giver.rows_since(0))
    batch = taker.sample(50, torch.Generator().manual_seed(0))
    assert batch.discounts is not None
    assert sorted(set(batch.discounts.tolist())) == [0.0, pytest.approx(0.81)]


def test_rows_of_another_shape_are_refused() -> None:
    giver = ReplayBuffer(4, spaces.Box(-1.0, 1.0, shape=(2,)), TWO_ACTIONS, gamma=0.9)
    giver.add(np.zeros((1, 2), np.float32), np.array([0]), np.array([1.0]),
              np.zeros((1, 2), np.float32), np.array([0]))  # fmt: skip
    taker = ReplayBuffer(4, VECTOR, TWO_ACTIONS, gamma=0.9)
    with pytest.raises(UsageError, match="obs shape"):
        taker.add_rows(giver.rows_since(0))
    assert len(taker) == 0
