"""Contextual bandits: the table environment, NeuralUCB's and NeuralTS's exploration, training."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml

from agile_bandits.environment import BanditEnv, load_table
from agile_bandits.runner import BanditRunner
from agile_bandits.spec import BanditEnvSpec
from agile_cli import EnvironmentNotFoundError, ManifestError, TrainingManifest, UsageError
from agile_cli.testing import smoke_train, tiny_manifest, tiny_population

FEATURES = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]] * 16)
TARGETS = np.array(["b", "a", "c", "a"] * 16)
TABLE = {"name": "toy", "features": FEATURES, "targets": TARGETS}


def _member(algorithm: str = "NeuralUCB", **options):
    manifest = tiny_manifest(algorithm, environment=TABLE, algorithm_options=options)
    return tiny_population(manifest, size=1)[0]


def _patched(member, values, features):
    member.gradient_features = lambda obs: (values, features)
    return member


def test_ucb_bonus_and_sherman_morrison_match_the_formulas() -> None:
    member = _member(gamma=0.5, lamb=2.0)
    size = member.a_inv.shape[0]
    assert member.a_inv.dim() == 2 and torch.allclose(member.a_inv, torch.eye(size) / 2.0)
    g = torch.zeros(1, 3, size)
    g[0, 0, 0], g[0, 1, 1], g[0, 2, :2] = 4.0, 1.0, 1.0
    values = torch.tensor([[0.0, 0.5, 0.2]])
    # bonuses 0.5 * sqrt(g^T g / 2): arm 0: 0.5 * sqrt(8) = 1.41 wins over 0.5 + 0.35, 0.2 + 0.5
    assert _patched(member, values, g).act(np.zeros((1, 2)), explore=True).tolist() == [0]
    design = 2.0 * torch.eye(size) + torch.outer(g[0, 0], g[0, 0])
    assert torch.allclose(member.a_inv, torch.linalg.inv(design), atol=1e-6)
    # now the bonus of arm 0 is 0.5 * sqrt(16 / (2 + 16)): arm 1 (0.5 + 0.354) wins
    expected = 0.5 * torch.sqrt(torch.tensor([16 / 18, 1 / 2, 1 / 18 + 1 / 2]))
    assert torch.allclose(member.uncertainty(g).sqrt() * 0.5, expected[None], atol=1e-6)
    assert member.act(np.zeros((1, 2)), explore=True).tolist() == [1]
    design += torch.outer(g[0, 1], g[0, 1])
    assert torch.allclose(member.a_inv, torch.linalg.inv(design), atol=1e-6)


def test_diagonal_inverse_is_elementwise() -> None:
    member = _member()
    member.a_inv = torch.full((3,), 0.5)
    member.update_inverse(torch.tensor([1.0, 2.0, 0.0]))
    assert torch.allclose(member.a_inv, torch.tensor([1 / 3, 1 / 6, 0.5]))
    assert member.uncertainty(torch.tensor([[1.0, 1.0, 2.0]])).item() == pytest.approx(2.5)


def test_thompson_draws_have_the_mean_and_variance_of_the_posterior() -> None:
    member = _member("NeuralTS", gamma=0.5)
    values = torch.tensor([[1.0, -2.0]]).expand(20000, 2)
    variance = torch.tensor([[4.0, 0.25]]).expand(20000, 2)
    draws = member.explore_scores(values, variance)
    assert torch.allclose(draws.mean(0), torch.tensor([1.0, -2.0]), atol=0.03)
    assert torch.allclose(draws.var(0), torch.tensor([0.25 * 4.0, 0.25 * 0.25]), rtol=0.05)


def test_gradient_features_are_the_gradients_of_each_output() -> None:
    member = _member()
    obs = FEATURES[:1]
    values, features = member.gradient_features(obs)
    network = member.networks["q"]
    output = network(member.obs_tensor(obs))["value"][0, 2]
    grads = torch.autograd.grad(output, list(network.parameters()))
    assert torch.allclose(features[0, 2], torch.cat([g.reshape(-1) for g in grads]), atol=1e-6)
    assert values[0, 2].item() == pytest.approx(output.item())


def test_architecture_change_keeps_the_inverse_of_surviving_parameters() -> None:
    member = _member(lamb=4.0)
    member.update_inverse(torch.ones(member.a_inv.shape[0]) * 0.1)
    before = dict(zip(_names(member), _diagonal(member.a_inv).tolist(), strict=True))
    member.set_architecture(member.arch.apply("head.add_node", np.random.default_rng(0))[0])
    after = dict(zip(_names(member), _diagonal(member.a_inv).tolist(), strict=True))
    assert member.a_inv.shape[0] == sum(p.numel() for p in member.networks["q"].parameters())
    assert all(after[k] == pytest.approx(v) for k, v in before.items() if k in after)
    assert any(value == pytest.approx(0.25) for key, value in after.items() if key not in before)


def _diagonal(inverse: torch.Tensor) -> torch.Tensor:
    return inverse if inverse.dim() == 1 else inverse.diagonal()


def _names(member) -> list[str]:
    return [
        f"{name}[{i}]" for name, p in member.networks["q"].named_parameters()
        for i in np.ndindex(*p.shape)
    ]  # fmt: skip


def test_csv_loader_skips_headers_and_maps_string_labels(tmp_path) -> None:
    (tmp_path / "x.csv").write_text("a,b\n1,2\n3,4\n5,6\n")
    (tmp_path / "y.csv").write_text("species\nsetosa\nvirginica\nsetosa\n")
    (tmp_path / "n.csv").write_text("2\n0\n2\n")
    assert load_table("x.csv", tmp_path, "f").tolist() == [[1, 2], [3, 4], [5, 6]]
    spec = BanditEnvSpec(features="x.csv", targets="y.csv", path=str(tmp_path))
    from agile_bandits.environment import BanditBuilder

    env = BanditBuilder().build(spec, seed=0)
    assert env.labels.tolist() == [0, 1, 0] and env.single_action_space.n == 2
    assert load_table("n.csv", tmp_path, "f").ravel().tolist() == [2, 0, 2]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"a,b\n1,2\n3\n5,6\n", "line 3 has 1 cell but line 2 has 2 cells"),
        (b"1,2\n3,4\n5,6,7\n", "line 3 has 3 cells but line 1 has 2 cells"),
        (b"a,b\n1,2\n3,x\x1b[2J\n", "line 3 holds 'x\\x1b[2J', not a number"),
        (b'1,2\n3,4\n5,"6\n7"\n', "line 4 holds '6\\n7', not a number"),
        (b"a,b\n1,2\n\xff,3\n", "line 3 is not UTF-8 text"),
    ],
    ids=["short-row", "long-row", "text", "quoted-lines", "latin-1"],
)
def test_a_malformed_features_csv_names_the_file_and_line(
    run, write, tmp_path, content, message
) -> None:
    (tmp_path / "x.csv").write_bytes(content)
    (tmp_path / "y.csv").write_text("0\n1\n0\n")
    where = f"environment.features: {tmp_path / 'x.csv'}, "
    with pytest.raises(UsageError) as error:
        load_table("x.csv", tmp_path, "environment.features")
    assert error.value.message == where + message
    environment = f"{{features: x.csv, targets: y.csv, path: '{tmp_path}'}}"
    manifest = write("m.yaml", f"algorithm: {{name: NeuralUCB}}\nenvironment: {environment}\n")
    result = run("train", str(manifest), "--run-dir", str(tmp_path / "run"))
    assert result.exit_code == 2, result.output
    assert where + message in result.output and "\x1b" not in result.output


def test_a_ragged_labels_csv_is_refused_but_text_labels_are_not(tmp_path) -> None:
    (tmp_path / "y.csv").write_text("setosa\nvirginica,2\nsetosa\n")
    with pytest.raises(UsageError, match="line 2 has 2 cells but line 1 has 1 cell"):
        load_table("y.csv", tmp_path, "environment.targets", labels=True)
    (tmp_path / "y.csv").write_text("setosa\nvirginica\nsetosa\n")
    labels = load_table("y.csv", tmp_path, "t", labels=True).ravel().tolist()
    assert labels == ["setosa", "virginica", "setosa"]


def test_environment_pays_one_for_the_right_class() -> None:
    env = BanditEnv(FEATURES, np.array([1, 0, 2, 0] * 16), seed=3)
    obs, _ = env.reset()
    assert obs.shape == (1, 2)
    label = env.labels[env.row]
    _, reward, *_ = env.step(np.array([label]))
    assert reward.tolist() == [1.0]
    _, reward, *_ = env.step(np.array([(env.labels[env.row] + 1) % 3]))
    assert reward.tolist() == [0.0]


def test_in_memory_tables_validate_and_are_labelled_on_disk() -> None:
    manifest = TrainingManifest.get_validated(
        {"algorithm": {"name": "NeuralTS"}, "environment": TABLE}
    )
    assert manifest.environment.features is not None
    assert manifest.evo_steps == 500 and manifest.algorithm.lr == pytest.approx(3e-3)
    dumped = manifest.to_dict()["environment"]
    assert dumped["features"] == "<in-memory table 64x2>"
    yaml.safe_dump(manifest.to_dict())


@pytest.mark.parametrize(
    ("environment", "path", "message"),
    [
        ("features: x.csv", "environment.targets", "required with environment.features"),
        ("targets: y.csv", "environment.features", "required with environment.targets"),
        ("{features: x.csv, targets: y.csv, entrypoint: 'm:f'}", "environment.entrypoint", ""),
        ("{name: B}", "environment.features", "labelled table or an entrypoint"),
        ("{features: x.txt, targets: y.csv}", "environment.features", "unsupported file type"),
        ("{features: [[1, 2]], targets: y.csv}", "environment.features", "file path"),
    ],
)
def test_table_xor_entrypoint_errors_name_the_field(run, write, environment, path, message) -> None:
    if not environment.startswith("{"):
        environment = "{" + environment + "}"
    text = f"algorithm: {{name: NeuralUCB}}\nenvironment: {environment}\n"
    result = run("validate", str(write("m.yaml", text)))
    assert result.exit_code == 2, result.output
    assert path in result.output and message in result.output


def test_runner_trains_in_episodes_and_evaluates_greedily() -> None:
    member = _member(batch_size=8, learn_step=2)
    env = BanditEnv(FEATURES, np.array([1, 0, 2, 0] * 16), seed=0)
    from agile_rl.runtime.buffers import ReplayBuffer

    buffer = ReplayBuffer(100, env.single_observation_space, env.single_action_space, gamma=1.0)
    calls = []
    [stats] = BanditRunner(env, buffer, episode_steps=20).train_population(
        [member], 50, calls.append
    )
    assert len(stats.episode_returns) == 3 and stats.steps == 50 == len(calls)
    assert len(stats.losses) == 2 * (50 - 7) and member.record.steps == 50
    assert len(buffer) == 50 and buffer.sample(4, member.generator).terminated.all()
    [fitness] = BanditRunner(env, buffer, episode_steps=20).evaluate_population([member], 2, None)
    assert 0.0 <= fitness <= 20.0


def test_in_memory_run_trains_but_cannot_be_reloaded(tmp_path) -> None:
    result = smoke_train(tiny_manifest("NeuralTS", environment=TABLE), tmp_path / "run")
    assert np.isfinite(result.summary["best_fitness"])
    with pytest.raises(ManifestError, match="in-memory table is not saved"):
        TrainingManifest.get_validated(tmp_path / "run" / "manifest.yaml")


def test_parquet_without_pandas_or_pyarrow_says_what_to_install(tmp_path, monkeypatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_tables(name, *args, **kwargs):
        if name.split(".")[0] in ("pandas", "pyarrow", "h5py"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tables)
    (tmp_path / "x.pq").write_bytes(b"")
    (tmp_path / "x.h5").write_bytes(b"")
    with pytest.raises(EnvironmentNotFoundError, match="pandas and pyarrow") as error:
        load_table("x.pq", tmp_path, "environment.features")
    assert "pip install pandas pyarrow" in error.value.hint
    with pytest.raises(EnvironmentNotFoundError, match="h5py"):
        load_table("x.h5", tmp_path, "environment.features")


# -- members learning together ------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["NeuralUCB", "NeuralTS"])
def test_a_group_learns_what_each_member_learns_alone(algorithm) -> None:
    from agile_rl import MemberGroup, ReplayBuffer, learn_stacked

    manifest = tiny_manifest(algorithm, environment=TABLE, training={"pop_size": 2})
    stacked = tiny_population(manifest)
    alone = [member.clone(member.index) for member in stacked]
    for members in (stacked, alone):
        members[1].set_hyperparameter("batch_size", 11)
        members[1].set_hyperparameter("lr", 3e-3)
    first = stacked[0]
    buffer = ReplayBuffer(128, first.observation_space, first.action_space, gamma=1.0)
    rng = np.random.default_rng(0)
    buffer.add(FEATURES.astype(np.float32), rng.integers(3, size=64), rng.random(64),
               FEATURES.astype(np.float32), np.ones(64, dtype=bool))  # fmt: skip
    learner = type(first).group_learner(MemberGroup(stacked))
    for step in range(5):
        active = [True, step % 2 == 0]
        grouped = learn_stacked(learner, buffer, active)
        for member, on, loss in zip(alone, active, grouped, strict=True):
            if on:
                own = member.learn(buffer.sample(int(member.spec.batch_size), member.generator))
                assert own.loss == pytest.approx(loss, rel=1e-5)
    learner.group.write_back()
    # float32 sums in another order (a stacked matmul against a member's own): 2.1e-6 apart
    # after five Adam steps on an AMD EPYC (AVX2), under 1e-6 on the machines before
    for together, single in zip(stacked, alone, strict=True):
        for a, b in zip(together.networks["q"].parameters(), single.networks["q"].parameters(),
                        strict=True):  # fmt: skip
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-5), (a - b).abs().max()


def test_members_play_in_lockstep_and_learn_as_a_group(tmp_path) -> None:
    training = {"max_steps": 40, "evo_steps": 20, "pop_size": 3}
    manifest = tiny_manifest("NeuralUCB", environment=TABLE, training=training)
    together = smoke_train(manifest, tmp_path / "together", seed=1)
    apart = smoke_train(manifest, tmp_path / "apart", seed=1, per_member=True)
    for result in (together, apart):
        assert all(member.record.steps == 40 for member in result.population)
    lines = (tmp_path / "together" / "metrics.jsonl").read_text().splitlines()
    groups = [yaml.safe_load(line)["groups"] for line in lines]
    assert any(len(group) > 1 for generation in groups for group in generation)
    first = yaml.safe_load((tmp_path / "apart" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["groups"] == [[0], [1], [2]]
