"""Recurrent PPO: the LSTM encoder and its mutations, hidden state through rollouts and
evaluation, sequence minibatches, and the plugin's conformance."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Categorical

from agile_cli.errors import ManifestError
from agile_cli.testing import (
    check_conformance,
    installed_host,
    smoke_train,
    tiny_manifest,
    tiny_population,
)
from agile_cli.training import setup
from agile_ppo.algorithm import PPO
from agile_ppo.episodes import Episodes, episode_spans, packed
from agile_ppo.wrappers import MaskVelocity
from agile_rl import LearnResult, NetworkSpec
from agile_rl.nn.arch import CnnLstmArch, MLPArch, NetworkArch, arch_from_spec
from agile_rl.nn.modules import EvolvableNetwork
from agile_rl.nn.recurrent_arch import LSTMArch
from agile_rl.nn.transfer import transfer_optimizer_state
from agile_rl.runtime.rollout import PolicyRecord, Rollout, RolloutBatch
from agile_rl.training.groups import Alone, Slot
from agile_rl.training.on_policy import OnPolicyRunner
from agile_rl.training.runners import EpisodeTracker

ENVS = Path(__file__).parent / "pomdp"
LSTM_NETWORK = {
    "latent_dim": 16,
    "encoder_config": {"arch": "lstm", "hidden_state_size": 16},
    "head_config": {"hidden_size": [16]},
}
RECURRENT = {"recurrent": True, "max_seq_len": 4}
VECTOR = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def _recall(num_envs: int = 2, **config: object) -> dict:
    return {"name": "recall", "entrypoint": "recall.py:make_recall", "path": str(ENVS),
            "num_envs": num_envs, "sync": True, "config": config}  # fmt: skip


def _arch(hidden: int = 32, **lstm: object) -> NetworkArch:
    return NetworkArch(LSTMArch(hidden, **lstm), 16, 8, 64, MLPArch((16,)))  # type: ignore[arg-type]


def _net(arch: NetworkArch, seed: int = 0) -> EvolvableNetwork:
    heads = {"policy": 2, "value": 1}
    return EvolvableNetwork(arch, VECTOR, heads, generator=torch.Generator().manual_seed(seed))


def _resized(net: EvolvableNetwork, hidden: int) -> EvolvableNetwork:
    return net.rebuilt(
        replace(net.arch, encoder=replace(net.arch.encoder, hidden_state_size=hidden))
    )


def _gates(tensor: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tensor.detach().chunk(4)


def _recurrent_member(environment: dict | None = None, **options: object):
    manifest = tiny_manifest(
        "PPO", algorithm_options={**RECURRENT, **options}, network=LSTM_NETWORK,
        environment=environment or _recall(),
    )  # fmt: skip
    return tiny_population(manifest, size=1)[0], manifest


def _env(manifest, seed: int = 0):
    return setup.build_environment(manifest, installed_host().registry, seed=seed)


# -- the LSTM encoder and its mutations ----------------------------------------------------------


@pytest.mark.parametrize("hidden", [48, 16])
def test_node_mutations_keep_each_gates_weights(hidden: int) -> None:
    old = _net(_arch(32))
    with torch.no_grad():  # biases start at zero: give them something to keep
        old.encoder.lstm.bias_ih_l0.normal_()
        old.encoder.lstm.bias_hh_l0.normal_()
    new = _resized(old, hidden)
    keep = min(32, hidden)
    for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
        before = getattr(old.encoder.lstm, name)
        after = getattr(new.encoder.lstm, name)
        assert after.shape[0] == 4 * hidden
        kept = (slice(0, keep), slice(0, keep)) if name == "weight_hh_l0" else (slice(0, keep),)
        for gate_before, gate_after in zip(_gates(before), _gates(after), strict=True):
            assert torch.equal(gate_after[kept], gate_before[kept])
    # A top-left copy would have put the input gate's rows where the forget gate's belong.
    forget = _gates(new.encoder.lstm.weight_hh_l0)[1][:keep, :keep]
    assert not torch.equal(forget, old.encoder.lstm.weight_hh_l0[hidden : hidden + keep, :keep])
    assert torch.equal(new.encoder.out.weight[:, :keep], old.encoder.out.weight[:, :keep])


def test_optimizer_moments_follow_the_gates() -> None:
    old = _net(_arch(32))
    optimizer = torch.optim.Adam(old.parameters(), lr=1e-3)
    outputs, _ = old.unroll(torch.randn(3, 2, 3), old.initial_state(2))
    outputs["value"].sum().backward()
    optimizer.step()
    new = _resized(old, 48)
    new_optimizer = torch.optim.Adam(new.parameters(), lr=1e-3)
    old_params, new_params = dict(old.named_parameters()), dict(new.named_parameters())
    transfer_optimizer_state(optimizer, old_params, new_optimizer, new_params)
    name = "encoder.lstm.weight_hh_l0"
    moved = new_optimizer.state[new_params[name]]["exp_avg"]
    source = optimizer.state[old_params[name]]["exp_avg"]
    for gate_before, gate_after in zip(_gates(source), _gates(moved), strict=True):
        assert torch.equal(gate_after[:32, :32], gate_before)
        assert not gate_after[32:].any() and not gate_after[:, 32:].any()


def test_lstm_arch_mutates_within_bounds_describes_and_round_trips() -> None:
    arch = _arch(128, min_hidden_state_size=64, max_hidden_state_size=160)
    assert arch.describe() == "lstm[128x1] -> 16 -> mlp[16]"
    assert NetworkArch.from_dict(arch.to_dict()) == arch
    names = [method.name for method in arch.mutation_methods()]
    assert {"encoder.add_node", "encoder.remove_node"} <= set(names)
    assert "encoder.add_layer" not in names  # depth is not evolved, as for SimBa
    rng = np.random.default_rng(0)
    for _ in range(30):
        arch, args = arch.apply(str(rng.choice(["encoder.add_node", "encoder.remove_node"])), rng)
        assert args["nodes"] in (16, 32, 64)
        assert 64 <= arch.encoder.hidden_state_size <= 160
        _net(arch)  # builds
    deeper, _ = arch.encoder.add_layer(rng)
    assert deeper.num_layers == 2 and deeper.remove_layer(rng)[0].num_layers == 1


def test_arch_from_spec_picks_the_lstm_for_recurrent_algorithms_only() -> None:
    spec = NetworkSpec.model_validate(LSTM_NETWORK)
    arch = arch_from_spec(spec, VECTOR, recurrent=True)
    assert arch.encoder == LSTMArch(16)
    assert arch_from_spec(NetworkSpec(), VECTOR, recurrent=True).encoder == LSTMArch(128)
    with pytest.raises(ManifestError, match=r"recurrent"):
        arch_from_spec(spec, VECTOR)  # an LSTM without recurrent
    images = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)  # as 2.58: convolutions, then an LSTM
    assert isinstance(arch_from_spec(NetworkSpec(), images, recurrent=True).encoder, CnnLstmArch)
    with pytest.raises(ManifestError, match=r"vector or image observations"):
        arch_from_spec(NetworkSpec(), gym.spaces.Dict({"x": VECTOR}), recurrent=True)
    mlp = NetworkSpec.model_validate({"encoder_config": {"hidden_size": [16]}})
    with pytest.raises(ManifestError, match=r"describes an MLP"):
        arch_from_spec(mlp, VECTOR, recurrent=True)


def test_unrolling_with_starts_equals_stepping_with_resets() -> None:
    net = _net(_arch(16))
    obs = torch.randn(6, 3, 3)
    starts = torch.zeros(6, 3, dtype=torch.bool)
    starts[2, 0] = starts[4, 1] = starts[4, 2] = True
    start_state = tuple(torch.randn_like(part) for part in net.initial_state(3))
    outputs, final = net.unroll(obs, start_state, starts)
    state, values = start_state, []
    for t in range(6):
        keep = (~starts[t]).float().view(1, 3, 1)
        out, state = net.unroll(obs[t : t + 1], tuple(part * keep for part in state))
        values.append(out["value"])
    assert torch.allclose(torch.cat(values), outputs["value"], atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(final, state, strict=True))
    with pytest.raises(TypeError, match="unroll"):
        net(obs[0])


# -- hidden state while acting -------------------------------------------------------------------


def test_the_state_carries_the_first_observation() -> None:
    member, _ = _recurrent_member()
    values = []
    for bit in (1.0, -1.0):
        member.reset_state()
        member.policy_step(torch.tensor([[bit], [bit]]))
        for _ in range(3):
            _, record = member.policy_step(torch.zeros(2, 1))
        values.append(record.values)
    assert not torch.allclose(values[0], values[1])
    # Forgetting one environment's state makes it act as from a fresh start.
    member.reset_state()
    member.policy_step(torch.tensor([[1.0], [1.0]]))
    member.reset_state(np.array([False, True]))
    _, record = member.policy_step(torch.zeros(2, 1))
    member.reset_state()
    _, fresh = member.policy_step(torch.zeros(2, 1))
    assert torch.allclose(record.values[1], fresh.values[1], atol=1e-6)
    assert not torch.allclose(record.values[0], fresh.values[0])


def test_collection_resets_the_state_where_episodes_start() -> None:
    member, manifest = _recurrent_member(_recall(3, length=4, random_length=True), learn_step=60)
    env = _env(manifest, seed=3)
    rollouts = []
    member.learn = lambda rollout, last_obs: rollouts.append(rollout) or LearnResult(0.0)  # type: ignore[method-assign]
    _alone(env).train_population([member], 60, lambda n: None)
    # Sequences of one step: initial_state holds the state each step was acted from.
    steps = rollouts[0].finish_sequences(torch.zeros(3), 0.99, 0.95, 1)
    valid = steps.valid.reshape(-1, 3)
    starts = torch.ones_like(valid)
    starts[1:] = ~valid[:-1]  # the step after a reset step begins an episode
    norms = steps.initial_state[0].abs().sum(dim=(0, 2)).reshape(-1, 3)
    assert 0 < int(starts[1:].sum()) < starts[1:].numel()
    assert (norms[starts] == 0).all() and (norms[~starts] > 0).all()


def test_evaluation_starts_from_a_fresh_state_and_carries_it() -> None:
    member, manifest = _recurrent_member()
    env = _env(manifest)
    member.policy_step(torch.ones(2, 1))  # leaves a state behind
    seen = []
    act = member.act

    def spy(obs: np.ndarray, *, explore: bool) -> np.ndarray:
        seen.append(member.hidden_state)
        return act(obs, explore=explore)

    member.act = spy  # type: ignore[method-assign]
    _alone(env).episode_returns(member, env.num_envs, None, seed=0)
    assert seen[0] is None  # reset after env.reset()
    assert len(seen) == 4 and all(state[0].abs().sum() > 0 for state in seen[1:])


# -- sequence minibatches ------------------------------------------------------------------------


def test_sequences_cut_pad_and_flag_a_hand_checked_rollout() -> None:
    # 5 steps of 2 environments in sequences of 2: chunk k of env n is sequence 2k + n.
    # Env 1's step 2 only resets it (invalid): its step 3 starts an episode inside chunk 1.
    # Env 0's step 3 only resets it: its step 4 starts chunk 2, whose stored state is reset.
    rollout = Rollout()
    for t in range(5):
        valid = np.array([t != 3, t != 2])
        value = torch.tensor([10.0 * t, 10.0 * t + 1])
        state = (value.view(1, 2, 1), -value.view(1, 2, 1))
        record = PolicyRecord(value.long(), torch.zeros(2), torch.zeros(2), state)
        rollout.add(value.view(2, 1), record, np.zeros(2), np.zeros(2, bool), np.zeros(2, bool),
                    valid)  # fmt: skip
    batch = rollout.finish_sequences(torch.zeros(2), 0.99, 0.95, 2)
    assert len(batch) == 6 and batch.valid.shape == (2, 6)
    assert batch.obs[..., 0].tolist() == [[0, 1, 20, 21, 40, 41], [10, 11, 30, 31, 0, 0]]
    assert batch.actions.tolist() == [[0, 1, 20, 21, 40, 41], [10, 11, 30, 31, 0, 0]]
    assert batch.valid.tolist() == [[True, True, True, False, True, True],
                                    [True, True, False, True, False, False]]  # fmt: skip
    assert batch.starts.tolist() == [[False] * 6, [False, False, False, True, False, False]]
    h, c = batch.initial_state
    assert h.flatten().tolist() == [0, 1, 20, 21, 40, 41] and torch.equal(c, -h)
    chunked = rollout.finish_sequences(torch.zeros(2), 0.99, 0.95, 2, stride=2)
    assert torch.equal(chunked.obs, batch.obs) and torch.equal(chunked.starts, batch.starts)
    picked = batch.select(torch.tensor([3, 0]))
    assert picked.obs[..., 0].tolist() == [[21, 0], [31, 10]]
    assert picked.initial_state[0].flatten().tolist() == [21, 0]
    assert picked.valid_steps().obs.flatten().tolist() == [0, 31, 10]


@pytest.mark.parametrize("max_seq_len", [4, None])
def test_a_minibatch_re_runs_collection_exactly_before_the_first_update(
    max_seq_len: int | None,
) -> None:
    member, manifest = _recurrent_member(
        _recall(3, random_length=True), learn_step=48, max_seq_len=max_seq_len
    )
    env = _env(manifest, seed=1)
    learner = member.solo_learner()
    rerun = learner.rerun
    checked = []

    def spy(chosen):
        steps, logits, values, rows = rerun(chosen)
        if not checked:
            checked.extend(_collected_again(steps, logits, values, rows))
        return steps, logits, values, rows

    learner.rerun = spy  # type: ignore[method-assign]
    member.solo_learner = lambda: learner  # type: ignore[method-assign]
    _alone(env).train_population([member], 48, lambda n: None)
    assert checked == [True, True]


def _collected_again(steps, logits, values, rows) -> list[bool]:
    """Whether re-run log-probabilities and values equal those collected, on valid steps."""
    valid = rows[0] > 0
    log_probs = Categorical(logits=logits[0][valid]).log_prob(steps.actions[0][valid])
    return [
        torch.allclose(log_probs, steps.log_probs[0][valid], atol=1e-6),
        torch.allclose(values[0][valid], steps.values[0][valid], atol=1e-6),
    ]


# -- whole-episode sequences (max_seq_len: null) ------------------------------------------------


def _hand_made_rollout() -> Rollout:
    """7 steps of 2 environments whose observation, action and stored state are ``10 t + n``.
    Env 0's episodes end at steps 2 (terminated) and 5 (truncated); env 1's step 0 only
    resets it (the rollout before ended its episode), its episode ends at step 3 and the next
    is still running when the rollout ends."""
    tracker = EpisodeTracker(2)
    tracker.prev_done[1] = True
    ends = {(2, 0): "terminated", (5, 0): "truncated", (3, 1): "terminated"}
    rollout = Rollout()
    for t in range(7):
        terminated = np.array([ends.get((t, n)) == "terminated" for n in range(2)])
        truncated = np.array([ends.get((t, n)) == "truncated" for n in range(2)])
        valid, _, _ = tracker.step_rows(np.ones(2), terminated, truncated)
        value = torch.tensor([10.0 * t, 10.0 * t + 1])
        state = (value.view(1, 2, 1), -value.view(1, 2, 1))
        record = PolicyRecord(value.long(), value / 100, value / 10, state)
        rollout.add(value.view(2, 1), record, np.ones(2), terminated, truncated, valid)
    return rollout


def test_episode_spans_are_the_runs_of_real_steps() -> None:
    valid = torch.tensor(
        [[True, False, True], [True, False, False], [False, False, True], [True, False, True]]
    )
    env, begin, end = episode_spans(valid)
    spans = list(zip(env.tolist(), begin.tolist(), end.tolist(), strict=True))
    assert spans == [(0, 0, 2), (0, 3, 4), (2, 0, 1), (2, 2, 4)]


def test_whole_episode_sequences_are_cut_exactly_at_episode_boundaries() -> None:
    one_step = _hand_made_rollout().finish_sequences(torch.zeros(2), 0.9, 0.95, 1)
    episodes = Episodes.of(one_step, 2)
    assert episodes.env.tolist() == [0, 0, 1, 1]
    assert episodes.begin.tolist() == [0, 4, 1, 5]
    assert episodes.length.tolist() == [3, 2, 3, 2]
    batch = episodes.select(torch.tensor([0, 1, 2, 3]))  # padded to the longest, 3 steps
    assert batch.obs[..., 0].T.tolist() == [[0, 10, 20], [40, 50, 0], [11, 21, 31], [51, 61, 0]]
    assert batch.actions.T.tolist() == [[0, 10, 20], [40, 50, 0], [11, 21, 31], [51, 61, 0]]
    assert batch.valid.T.tolist() == [[True] * 3, [True, True, False]] * 2
    assert not batch.starts.any()  # no episode starts inside a sequence
    h, c = batch.initial_state  # as stored at each sequence's first step
    assert h.flatten().tolist() == [0, 40, 11, 51] and torch.equal(c, -h)
    advantages = one_step.advantages[0].reshape(7, 2)
    assert torch.equal(batch.advantages[:, 2], advantages[1:4, 1])
    assert torch.equal(batch.advantages[:2, 3], advantages[5:7, 1])
    assert batch.advantages[2, 3] == 0 and batch.log_probs[2, 1] == 0  # padding
    alone = episodes.select(torch.tensor([3]))  # no padding for a single sequence
    assert alone.valid.shape == (2, 1) and alone.valid.all()
    assert alone.valid_steps().obs.flatten().tolist() == [51, 61]


def test_a_minibatch_holds_episodes_while_they_fit_in_batch_size_steps() -> None:
    lengths = [3, 5, 2, 7, 1, 12, 4]
    assert packed(list(range(7)), lengths, 8) == [[0, 1], [2], [3, 4], [5], [6]]
    assert packed([6, 2, 0, 5, 4], lengths, 8) == [[6, 2], [0], [5], [4]]
    assert packed([], lengths, 8) == []


def _collected_episodes(**options: object) -> tuple[PPO, Episodes]:
    """A member with ``max_seq_len: null`` and its second rollout's episodes (whose first
    sequences start from states carried over from the first rollout)."""
    member, manifest = _recurrent_member(
        _recall(3, length=6, random_length=True), learn_step=36, max_seq_len=None, **options
    )
    env = _env(manifest, seed=2)
    seen: list[Episodes] = []

    def collect(rollout: Rollout, last_obs: torch.Tensor) -> LearnResult:
        last_values = member.solo_learner().bootstrap_values(last_obs)[0]
        seen.append(member.sequences(rollout, last_values)[0])  # type: ignore[arg-type]
        return LearnResult(0.0)

    member.learn = collect  # type: ignore[method-assign,assignment]
    _alone(env).train_population([member], 72, lambda n: None)
    return member, seen[1]


def test_padding_adds_nothing_to_the_loss() -> None:
    member, episodes = _collected_episodes()
    rows = torch.arange(len(episodes))
    batch = episodes.select(rows)
    assert len(set(episodes.length.tolist())) > 1 and not batch.valid.all()  # it is padded
    assert batch.initial_state[0].abs().sum() > 0  # some sequence starts from a carried state
    learner = member.solo_learner()
    padded, _ = learner.objective(*learner.rerun([batch]))
    # Each episode alone, its valid steps side by side: no padding at all.
    parts = [learner.rerun([episodes.select(rows[j : j + 1])]) for j in range(len(episodes))]
    steps = RolloutBatch(
        *(torch.cat(field, dim=1) for field in zip(*(p[0] for p in parts), strict=True))
    )
    logits, values = (torch.cat([p[i] for p in parts], dim=1) for i in (1, 2))
    assert steps.actions.shape[1] == int(episodes.length.sum())
    unpadded, _ = learner.objective(steps, logits, values, torch.ones_like(values))
    assert torch.allclose(padded, unpadded, atol=1e-6)
    # Whatever the padding holds, the loss stays.
    noisy = torch.where(batch.valid.unsqueeze(-1), batch.obs, 50.0)  # type: ignore[arg-type]
    loss, _ = learner.objective(*learner.rerun([batch._replace(obs=noisy)]))
    assert torch.allclose(loss, padded, atol=1e-6)


def test_whole_episodes_re_run_collection_exactly_from_carried_states() -> None:
    member, episodes = _collected_episodes()  # the member has not learned: nothing changed
    carried = episodes.begin == 0
    assert episodes.select(torch.nonzero(carried).flatten()).initial_state[0].abs().sum() > 0
    chosen = episodes.select(torch.arange(len(episodes)))
    assert _collected_again(*member.solo_learner().rerun([chosen])) == [True, True]


def test_whole_episode_minibatches_count_batch_size_steps() -> None:
    member, episodes = _collected_episodes(batch_size=8, update_epochs=2)
    minibatches = [member.minibatch_rows(episodes, 8) for _ in range(2)]
    lengths = episodes.length
    for epoch in minibatches:
        assert sorted(torch.cat(epoch).tolist()) == list(range(len(episodes)))
        assert all(int(lengths[rows].sum()) <= 8 or len(rows) == 1 for rows in epoch)
        # Only the next episode not fitting closed a minibatch.
        for rows, after in pairwise(epoch):
            assert int(lengths[rows].sum() + lengths[after[0]]) > 8
    assert [rows.tolist() for rows in minibatches[0]] != [rows.tolist() for rows in minibatches[1]]


def test_whole_episode_recurrent_ppo_validates_and_trains(
    tmp_path: Path, run, write, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (
        "environment: {name: CartPole-v1}\nalgorithm:\n  name: PPO\n  recurrent: true\n"
        "  max_seq_len: null\nnetwork: {arch: lstm, encoder_config: {hidden_state_size: 32}}\n"
    )
    result = run("validate", str(write("manifest.yaml", text)))
    assert result.exit_code == 0, result.output
    made: list[int] = []
    of = Episodes.of
    monkeypatch.setattr(Episodes, "of", lambda batch, envs: made.append(envs) or of(batch, envs))
    manifest = tiny_manifest(
        "PPO", algorithm_options={**RECURRENT, "max_seq_len": None}, network=LSTM_NETWORK,
        environment=_recall(2, random_length=True),
    )  # fmt: skip
    trained = smoke_train(manifest, tmp_path / "run")
    assert len(trained.fitnesses) == 2 and all(np.isfinite(trained.fitnesses))
    assert all(member.spec.max_seq_len is None for member in trained.population)
    assert made and set(made) == {2}  # every update learned on whole episodes


# -- the plugin as a whole -----------------------------------------------------------------------


def test_recurrent_ppo_conforms(tmp_path: Path) -> None:
    check_conformance("PPO", tmp_path, algorithm_options=RECURRENT, network=LSTM_NETWORK)


@pytest.mark.parametrize("share_encoders", [True, False])
def test_recurrent_ppo_trains_and_evolves(tmp_path: Path, share_encoders: bool) -> None:
    manifest = tiny_manifest(
        "PPO", algorithm_options={**RECURRENT, "share_encoders": share_encoders},
        network=LSTM_NETWORK, environment=_recall(),
        mutation={"probabilities": {"no_mut": 0, "arch_mut": 1, "params_mut": 0, "rl_hp_mut": 0}},
    )  # fmt: skip
    result = smoke_train(manifest, tmp_path / "run")
    assert len(result.fitnesses) == 2 and all(np.isfinite(result.fitnesses))
    assert all(member.arch.encoder.kind == "lstm" for member in result.population)
    methods = {method.name for method in result.population[0].arch.mutation_methods()}
    assert all(m.record.mutation.split("(")[0] in methods for m in result.population)


def test_overlapping_sequences_start_every_stride_steps() -> None:
    # 5 steps of 1 environment in windows of 4 every 2 steps (fifty_percent_overlap):
    # windows start at steps 0 and 2, the second padded past step 4. Step 2 only resets the
    # environment, so step 3 starts an episode inside the first window; in the second window
    # step 2 comes first, its stored state already reset, and step 3 is still flagged.
    rollout = Rollout()
    for t in range(5):
        value = torch.tensor([float(t)])
        record = PolicyRecord(value.long(), torch.zeros(1), torch.zeros(1), (value.view(1, 1, 1),))
        rollout.add(value.view(1, 1), record, np.zeros(1), np.zeros(1, bool), np.zeros(1, bool),
                    np.array([t != 2]))  # fmt: skip
    batch = rollout.finish_sequences(torch.zeros(1), 0.99, 0.95, 4, stride=2)
    assert batch.obs[..., 0].T.tolist() == [[0, 1, 2, 3], [2, 3, 4, 0]]
    assert batch.valid.T.tolist() == [[True, True, False, True], [False, True, True, False]]
    assert batch.starts.T.tolist() == [[False, False, False, True], [False, True, False, False]]
    assert batch.initial_state[0].flatten().tolist() == [0, 2]
    every_step = rollout.finish_sequences(torch.zeros(1), 0.99, 0.95, 4, stride=1)
    assert every_step.obs[0, :, 0].tolist() == [0, 1]  # windows at steps 0 and 1 cover all 5


@pytest.mark.parametrize("kind", ["maximum", "fifty_percent_overlap"])
def test_overlapping_recurrent_ppo_trains(tmp_path: Path, kind: str) -> None:
    options = {**RECURRENT, "bptt_sequence_type": kind}
    manifest = tiny_manifest("PPO", algorithm_options=options, network=LSTM_NETWORK,
                             environment=_recall())  # fmt: skip
    result = smoke_train(manifest, tmp_path / "run")
    assert len(result.fitnesses) == 2 and all(np.isfinite(result.fitnesses))


def test_manifests_that_mix_up_recurrence_are_refused(run, write) -> None:
    base = "environment: {name: CartPole-v1}\nalgorithm:\n  name: PPO\n"
    cases = {
        "  recurrent: true\nnetwork: {simba: true}\n": "network.simba",
        "network: {arch: lstm, encoder_config: {hidden_state_size: 32}}\n": "recurrent: true",
        "  recurrent: true\nnetwork: {encoder_config: {hidden_size: [16]}}\n": "MLP encoder",
    }
    for extra, expected in cases.items():
        result = run("validate", str(write("manifest.yaml", base + extra)))
        assert result.exit_code != 0 and expected in result.output, result.output
    lstm = "network: {arch: lstm, encoder_config: {hidden_state_size: 32}}\n"
    good = base + "  recurrent: true\n" + lstm
    assert run("validate", str(write("manifest.yaml", good))).exit_code == 0


def test_mask_velocity_hides_the_velocities() -> None:
    env = MaskVelocity(gym.make("CartPole-v1"))
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        obs, *_ = env.step(1)
    assert obs[1] == 0 and obs[3] == 0 and obs[0] != 0 and obs[2] != 0
    assert env.observation_space.contains(obs)


class _Alone(OnPolicyRunner):
    """A runner whose members act and learn through their own methods (which the tests spy
    on), not through their group learner."""

    def _slots(self, members: Any) -> list[Slot]:
        self.num_envs = self._member_rows(len(members))
        return [Slot(Alone(m), [i], self._rows([i])) for i, m in enumerate(members)]


def _alone(env: Any) -> OnPolicyRunner:
    return _Alone(env)
