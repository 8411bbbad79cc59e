"""Compiled stacked passes (``--compile on``) compute what eager ones do, and the mutations
of a run do not compile them again.

Most tests trace with ``aot_eager`` (the traced program, its masks and its autograd, without
inductor's minutes of compiling on this machine); one compiles with inductor itself, and
one trains a run with ``--compile on``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from agile_rl.runtime import compiled
from agile_rl.runtime.group import MemberGroup
from tests.test_batched import TOLERANCE, _arch, _assert_same_members, _filled_buffer, _population


def _reset() -> None:
    torch._dynamo.reset()
    compiled._compiled.clear()


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Compiled passes traced and differentiated by aot_eager instead of inductor."""
    _reset()
    monkeypatch.setattr(compiled, "compiler", torch._dynamo.lookup_backend("aot_eager"))
    yield
    _reset()


def _graphs() -> int:
    """The graphs this process has compiled so far."""
    return compiled.compilations()[0]


def _padded_members(
    algorithm: str, layer_norm: bool, latent_norm: bool, *, measured: bool = False
) -> list[Any]:
    """Three members of other widths (one padded group); ``measured``: their units'
    gradients are summed for dormant-neuron resets, as by default."""
    norms = {"layer_norm": layer_norm, "latent_norm": latent_norm}
    archs = [_arch((16,), 16, (16,), **norms), _arch((48,), 8, (32,), **norms),
             _arch((16,), 24, (16,), **norms)]  # fmt: skip
    members = _population(algorithm, archs)
    return members if measured else _unmeasured(members)


def _unmeasured(members: list[Any]) -> list[Any]:
    """``members``, whose units' gradients are not summed (their compiled passes then take
    no probes: see the update test below for those)."""
    for member in members:
        member.measures_neurons = False
    return members


def _outputs_and_grads(
    group: MemberGroup, name: str, obs: torch.Tensor, extra: torch.Tensor | None
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    network = group.net(name)
    out = next(iter(network(obs, extra).values()))
    trained = network.trained_tensors()  # the flat parameters where the pass is compiled
    grads = torch.autograd.grad(out.pow(2).sum(), trained, allow_unused=True)
    if network.runs_compiled:
        (flat,) = grads
        assert flat is not None
        return out, list(network.views_of(flat).values())
    return out, list(grads)


@pytest.mark.usefixtures("traced")
@pytest.mark.parametrize(
    ("algorithm", "network", "layer_norm", "latent_norm"),
    [("DDPG", "critic", True, True), ("DQN", "q", False, True)],
)
def test_compiled_passes_equal_eager_ones_for_padded_groups(
    algorithm: str, network: str, layer_norm: bool, latent_norm: bool
) -> None:
    members = _padded_members(algorithm, layer_norm, latent_norm)
    obs = torch.randn(3, 5, *members[0].observation_space.shape)
    extra = torch.randn(3, 5, 1) if network == "critic" else None  # the critic reads actions
    eager = _outputs_and_grads(MemberGroup(members), network, obs, extra)
    group = MemberGroup(members)
    group.compile_passes()
    before = _graphs()
    fast = _outputs_and_grads(group, network, obs, extra)
    assert _graphs() > before, "the compiled group ran eagerly"
    torch.testing.assert_close(fast[0], eager[0], **TOLERANCE)
    for mine, theirs in zip(fast[1], eager[1], strict=True):
        if theirs is None:
            assert mine is None or not mine.any()
        else:
            torch.testing.assert_close(mine, theirs, **TOLERANCE)


@pytest.mark.parametrize("name", sorted(compiled._FROM_OUTPUT))
def test_activations_that_take_their_gradient_from_their_output_equal_torch_s(name: str) -> None:
    x = torch.cat([torch.randn(64, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)])
    mine, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = compiled._FROM_OUTPUT[name].apply(mine)
    expected = getattr(torch.nn, name)()(theirs)
    weights = torch.randn_like(x)
    (out * weights).sum().backward()
    (expected * weights).sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(mine.grad, theirs.grad)


@pytest.mark.usefixtures("traced")
def test_other_widths_sizes_and_batches_do_not_compile_again() -> None:
    def passes(members: list[Any], rows: int) -> None:
        group = MemberGroup(members)
        group.compile_passes()
        obs = torch.randn(len(members), rows, *members[0].observation_space.shape)
        _outputs_and_grads(group, "q", obs, None)
        with torch.no_grad():
            group.net("target")(obs)

    before = _graphs()
    passes(_padded_members("DQN", True, False), 5)
    first = _graphs()
    assert first > before
    widened = _unmeasured(_population("DQN", [_arch((40,), 32, (24,)), _arch((40,), 32, (24,))]))
    passes(widened, 9)  # alike members (no padding), other widths, group size and batch
    passes(_padded_members("DQN", True, False)[:2], 17)
    assert _graphs() == first
    passes(_unmeasured(_population("DQN", [_arch((16, 16), 16, (16,))])), 5)  # a new layout
    assert _graphs() > first


def test_the_seconds_reported_compiling_include_dynamo_s_tracing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The seconds in ``metrics.jsonl`` are what compiling cost the run: with a backend that
    takes no time, most of the compiling call's time is still counted (its tracing)."""
    _reset()
    monkeypatch.setattr(compiled, "compiler", lambda graph, inputs: graph.forward)
    members = _unmeasured(_population("DQN", [_arch((16,), 16, (16,))] * 2))
    group = MemberGroup(members)
    group.compile_passes()
    obs = torch.randn(2, 5, *members[0].observation_space.shape)
    graphs, seconds = compiled.compilations()
    start = time.perf_counter()
    try:
        with torch.no_grad():
            group.net("q")(obs)
    finally:
        wall = time.perf_counter() - start
        _reset()
    after = compiled.compilations()
    assert after[0] == graphs + 1
    assert after[1] - seconds >= 0.5 * wall  # the rest: importing dynamo, building masks


@pytest.mark.usefixtures("traced")
def test_a_compiled_group_acts_eagerly_until_its_first_gradient_step() -> None:
    """A run's first environment steps do not wait for a compilation."""
    members = _padded_members("DQN", True, False)
    learner = type(members[0]).group_learner(MemberGroup(members, compiled=True))
    obs = torch.randn(3 * 2, *members[0].observation_space.shape).numpy()
    before = _graphs()
    learner.act(obs, explore=False)
    assert _graphs() == before
    buffer = _filled_buffer(members[0])
    batch, rows = buffer.sample_stacked([16] * 3, [m.generator for m in members], None)
    learner.learn_batch(batch, rows, torch.ones(3, dtype=torch.bool))
    learner.act(obs, explore=False)
    assert _graphs() > before


@pytest.mark.usefixtures("traced")
def test_compiled_teams_learn_as_eager_ones() -> None:
    """Multi-agent learners compile through the same passes: MATD3 teams (critics reading
    every agent's actions, delayed actor updates, one team inactive) over four steps."""
    from tests.test_maddpg import _team_buffer, _team_population

    members = _team_population("MATD3", policy_freq=[1, 2, 1], batch_size=[16, 24, 8])
    buffer = _team_buffer(members[0])
    active = torch.tensor([True, False, True])
    sizes = [int(m.spec.batch_size) for m in members]
    twins = [[m.clone(m.index) for m in members] for _ in range(2)]
    before = _graphs()
    for teams, compile_ in zip(twins, (True, False), strict=True):
        learner = type(teams[0]).group_learner(MemberGroup(teams, compiled=compile_))
        for _ in range(4):
            batch, rows = buffer.sample_stacked(sizes, [m.generator for m in teams])
            learner.learn_batch(batch, rows, active)
        learner.group.write_back()
    assert _graphs() > before, "the compiled teams ran eagerly"
    _assert_same_members(*twins)


def test_a_compiled_update_equals_the_eager_one_optimiser_state_and_unit_scores_included() -> None:
    """Inductor's own kernels: three DQN steps of a padded group, compiled and eager, the
    members' units' gradients summed for dormant-neuron resets (probes, compiled)."""
    _reset()
    members = _padded_members("DQN", True, True, measured=True)
    assert all(member.measures_neurons for member in members)
    twins = [member.clone(member.index) for member in members]
    buffer = _filled_buffer(members[0])
    for group, compile_ in ((members, True), (twins, False)):
        learner = type(group[0]).group_learner(MemberGroup(group, compiled=compile_))
        for _ in range(3):
            generators = [m.generator for m in group]
            batch, rows = buffer.sample_stacked([16] * 3, generators, None)
            learner.learn_batch(batch, rows, torch.ones(3, dtype=torch.bool))
        learner.group.write_back()
    _assert_same_members(members, twins)
    for member, twin in zip(members, twins, strict=True):
        scores, expected = member.neuron_scores["q"], twin.neuron_scores["q"]
        assert scores.keys() == expected.keys() and expected
        for layer, score in scores.items():
            torch.testing.assert_close(score, expected[layer], **TOLERANCE)


def test_a_run_with_compile_on_compiles_in_its_first_generation_only(
    run: Any, write: Any, tmp_path: Path
) -> None:
    manifest = write(
        "m.yaml",
        """
algorithm: {name: DQN, batch_size: 16, learn_step: 2}
environment: {name: CartPole-v1, num_envs: 2}
training: {max_steps: 300, evo_steps: 100, pop_size: 2, learning_delay: 20}
network: {latent_dim: 16, encoder_config: {hidden_size: [16]}, head_config: {hidden_size: [16]}}
mutation:
  probabilities: {no_mut: 0.0, arch_mut: 1.0, new_layer: 0.0, params_mut: 0.0, act_mut: 0.0,
                  rl_hp_mut: 0.0}
tournament_selection: {}
""",
    )
    result = run("train", str(manifest), "--run-dir", str(tmp_path / "run"), "--compile", "on")
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    graphs = [r["compiled"]["graphs"] for r in records if "compiled" in r]
    assert len(graphs) == 3, records
    # the first generation compiles the layout (one group of two members throughout); the
    # mutated widths of the next two compile nothing, with inductor's kernels
    assert graphs[0] > 0 and graphs[1:] == [0, 0], graphs
    archs = {m["arch"] for r in records for m in r["members"]}
    assert len(archs) > 1, "no member's network changed: the test shows nothing"


def test_compile_takes_auto_on_or_off(run: Any, write: Any, tmp_path: Path) -> None:
    manifest = write("m.yaml", "algorithm: {name: DQN}\nenvironment: {name: CartPole-v1}\n")
    result = run("train", str(manifest), "--run-dir", str(tmp_path / "run"), "--compile", "fast")
    assert result.exit_code == 2, result.output
    assert "--compile" in result.output and "auto" in result.output


_TINY_DQN = """
algorithm: {name: DQN, batch_size: 8, learn_step: 2}
environment: {name: CartPole-v1, num_envs: 2}
training: {max_steps: 60, evo_steps: 60, pop_size: 2, learning_delay: 10}
network: {latent_dim: 8, encoder_config: {hidden_size: [8]}, head_config: {hidden_size: [8]}}
"""


def _assert_training_stops(run: Any, write: Any, tmp_path: Path, reason: str) -> None:
    """A tiny DQN run with ``--compile on`` ends with exit 1, ``reason`` and the
    ``--compile off`` hint, and no traceback."""
    manifest = write("m.yaml", _TINY_DQN)
    result = run("train", str(manifest), "--run-dir", str(tmp_path / "run"), "--compile", "on")
    assert result.exit_code == 1, result.output
    assert reason in result.output and "--compile off" in result.output
    assert "Traceback" not in result.output


def test_compile_on_without_a_compiler_stops_before_training(
    run: Any, write: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agile_rl.training import runners

    monkeypatch.setattr(runners, "unavailable", lambda device: "no C++ compiler (g++ not found)")
    _assert_training_stops(run, write, tmp_path, "g++ not found")


@pytest.mark.usefixtures("traced")
def test_a_failed_compilation_is_a_training_error_naming_the_switch(
    run: Any, write: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(graph: Any, inputs: Any) -> Any:
        raise RuntimeError("the compiler crashed")

    monkeypatch.setattr(compiled, "compiler", broken)
    _assert_training_stops(run, write, tmp_path, "the compiler crashed")


@pytest.mark.usefixtures("traced")
def test_a_backward_pass_that_fails_to_compile_is_a_training_error_too(
    run: Any, write: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.exc import InductorError

    def broken(graph: Any, inputs: Any) -> Any:  # inductor wraps what fails in its compiler
        raise InductorError(RuntimeError("no backward today"), None)

    backend = aot_autograd(fw_compiler=lambda graph, inputs: graph, bw_compiler=broken)
    monkeypatch.setattr(compiled, "compiler", backend)
    _assert_training_stops(run, write, tmp_path, "no backward today")
