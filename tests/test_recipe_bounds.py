"""A recipe's values are the manifest's (issue #48, item 4): each hyperparameter of its schedule
is checked as the algorithm section's field of that name is, each architecture against the
network section's bounds and agile's limits, the largest architecture counts in the memory
estimate, and one long note shared by aliases cannot grow into a huge manifest."""

from __future__ import annotations

import copy
import json
import math
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from click.testing import Result
from gymnasium import spaces

from agile_cli import hookimpl
from agile_cli.loader import MAX_TEXT
from agile_rl import NetworkSpec
from agile_rl.nn.arch import NetworkArch, arch_from_spec, check_within

from .plugins.toy_paradigm import ToyParadigmPlugin

Run = Callable[..., Result]
Edit = Callable[[dict[str, Any]], None]

VECTOR = spaces.Box(-1.0, 1.0, (4,), dtype=np.float32)  # CartPole's observations
NETWORK = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]},
           "head_config": {"hidden_size": [16]}}  # fmt: skip
#: What each algorithm's recipe replays besides the architecture (its members' values).
VALUES = {
    "DQN": {"lr": 1e-3, "batch_size": 16, "learn_step": 4, "gamma": 0.99, "tau": 1e-3},
    "PPO": {"lr": 1e-3, "batch_size": 16, "learn_step": 64, "update_epochs": 2, "gamma": 0.99},
}
#: Address space an `agile` command may take: torch's import and a tiny run fit well under it.
CEILING = 3 << 30


def _architecture() -> dict[str, Any]:
    """The architecture a member of :data:`NETWORK` has on CartPole, as a recipe gives it."""
    arch = arch_from_spec(NetworkSpec.model_validate(NETWORK), VECTOR, latent_norm=True)
    return arch.to_dict()


def _recipe(algorithm: str = "DQN", generations: int = 2) -> dict[str, Any]:
    """A valid recipe manifest: ``generations`` of 64 steps, the second a wider encoder."""
    wider = _architecture()
    wider["encoder"]["hidden_size"] = [24, 8]
    schedule = [
        {"generation": g, "hyperparameters": dict(VALUES[algorithm]),
         "architecture": _architecture() if g == 1 else copy.deepcopy(wider)}
        for g in range(1, generations + 1)
    ]  # fmt: skip
    return {
        "algorithm": {"name": algorithm, "batch_size": 16},
        "environment": {"name": "CartPole-v1", "num_envs": 2},
        "training": {"max_steps": 64 * generations, "evo_steps": 64, "pop_size": 1},
        "network": copy.deepcopy(NETWORK),
        "recipe": {"source": "runs/somewhere", "schedule": schedule},
    }


def _written(tmp_path: Path, manifest: dict[str, Any]) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    return path


def _hyperparameter(name: str, value: Any) -> Edit:
    return lambda m: m["recipe"]["schedule"][1]["hyperparameters"].update({name: value})


def _architecture_edit(part: str | None, **values: Any) -> Edit:
    def edit(manifest: dict[str, Any]) -> None:
        arch = manifest["recipe"]["schedule"][1]["architecture"]
        (arch if part is None else arch[part]).update(values)

    return edit


STEP = "recipe.schedule[1]"
HOSTILE = [
    pytest.param("PPO", _hyperparameter("update_epochs", 1e12),
                 f"{STEP}.hyperparameters.update_epochs: input should be less than or equal to "
                 "10000 (got 1000000000000)", id="update_epochs-1e12"),
    pytest.param("DQN", _hyperparameter("lr", math.nan),
                 f"{STEP}.hyperparameters.lr: input should be a finite number (got nan)",
                 id="lr-nan"),
    pytest.param("DQN", _hyperparameter("gamma", math.inf),
                 f"{STEP}.hyperparameters.gamma: input should be a finite number (got inf)",
                 id="gamma-inf"),
    pytest.param("DQN", _hyperparameter("batch_size", 0),
                 f"{STEP}.hyperparameters.batch_size: input should be greater than or equal to 1 "
                 "(got 0)", id="batch_size-0"),
    pytest.param("DQN", _hyperparameter("batch_size", -7),
                 f"{STEP}.hyperparameters.batch_size: input should be greater than or equal to 1 "
                 "(got -7)", id="batch_size-minus-7"),
    pytest.param("DQN", _hyperparameter("tau", "0.001"),
                 f"{STEP}.hyperparameters.tau: expected a number, got a string (got '0.001'; "
                 "write the number without quotes)", id="tau-quoted"),
    pytest.param("DQN", _architecture_edit("head", hidden_size=[100_000, 100_000]),
                 f"{STEP}.architecture: head.hidden_size[0] is 100000, over "
                 "network.head_config.max_mlp_nodes 500", id="head-100000-wide"),
    pytest.param("DQN", _architecture_edit(None, latent_dim=1e9),
                 f"{STEP}.architecture: latent_dim is 1000000000, over network.max_latent_dim 128",
                 id="latent_dim-1e9"),
    pytest.param("DQN", _architecture_edit("encoder", hidden_size=[16] * 40),
                 f"{STEP}.architecture: encoder.hidden_size has 40 layers, over "
                 "network.encoder_config.max_hidden_layers 3", id="40-layers"),
    pytest.param("DQN", _architecture_edit("encoder", max_mlp_nodes=100_000),
                 f"{STEP}.architecture: encoder.max_mlp_nodes is 100000, over "
                 "network.encoder_config.max_mlp_nodes 500", id="embedded-max_mlp_nodes"),
    pytest.param("DQN", _architecture_edit(None, max_latent_dim=10**9),
                 f"{STEP}.architecture: max_latent_dim is 1000000000, over "
                 "network.max_latent_dim 128", id="embedded-max_latent_dim"),
    pytest.param("DQN", _architecture_edit("head", hidden_size=[0]),
                 f"{STEP}.architecture: head.hidden_size[0] is 0, under 1", id="width-0"),
    pytest.param("DQN", _architecture_edit("head", hidden_size=["64"]),
                 f"{STEP}.architecture: head.hidden_size is ['64'], not a list of whole numbers",
                 id="width-quoted"),
    pytest.param("DQN", _architecture_edit("head", activation="os.system"),
                 f"{STEP}.architecture: head.activation is 'os.system', not one of Tanh, GELU",
                 id="activation"),
    pytest.param("DQN", _architecture_edit(None, encoder={"kind": "lstm", "hidden_state_size": 8}),
                 f"{STEP}.architecture: encoder.kind is 'lstm', but an algorithm without a "
                 "hidden state takes no 'lstm'", id="lstm-without-recurrence"),
    pytest.param("DQN", _architecture_edit("encoder", kind="transformer"),
                 f"{STEP}.architecture: not a network architecture: unknown architecture kind "
                 "'transformer'", id="unknown-kind"),
    pytest.param("DQN", _architecture_edit("head", dropout=0.5),
                 f"{STEP}.architecture: not a network architecture: an architecture of kind "
                 "'mlp' has no field 'dropout'", id="unknown-field"),
]  # fmt: skip


@pytest.mark.parametrize(("algorithm", "edit", "line"), HOSTILE)
def test_a_hostile_value_is_refused_at_its_path(
    run: Run, tmp_path: Path, algorithm: str, edit: Edit, line: str
) -> None:
    manifest = _recipe(algorithm)
    edit(manifest)
    result = run("validate", str(_written(tmp_path, manifest)))
    assert result.exit_code == 2, result.output
    assert f"  {line}" in result.output
    assert "Traceback" not in result.output


def test_every_problem_of_the_schedule_is_listed_at_once(run: Run, tmp_path: Path) -> None:
    manifest = _recipe("PPO", generations=3)
    schedule = manifest["recipe"]["schedule"]
    schedule[0]["hyperparameters"].update(update_epochs=1e12, lr=math.nan)
    schedule[1]["hyperparameters"].update(batch_size=-7, gamma=math.inf)
    schedule[1]["architecture"]["head"]["hidden_size"] = [100_000, 100_000]
    schedule[2]["architecture"]["latent_dim"] = 1e9
    result = run("validate", str(_written(tmp_path, manifest)))
    assert result.exit_code == 2 and "recipe.yaml: invalid, 6 errors" in result.output
    listed = [
        "[0].hyperparameters.update_epochs", "[0].hyperparameters.lr",
        "[1].hyperparameters.batch_size", "[1].hyperparameters.gamma",
        "[1].architecture: head.hidden_size[0]", "[2].architecture: latent_dim",
    ]  # fmt: skip
    for path in listed:
        assert f"  recipe.schedule{path}" in result.output, result.output


def test_an_encoder_of_another_kind_than_the_section_declares_is_refused(
    run: Run, tmp_path: Path
) -> None:
    manifest = _recipe()
    cnn = {"kind": "cnn", "channel_size": [32], "kernel_size": [3], "stride_size": [1]}
    manifest["network"]["encoder_config"]["arch"] = "mlp"
    manifest["recipe"]["schedule"][1]["architecture"]["encoder"] = cnn
    result = run("validate", str(_written(tmp_path, manifest)))
    assert result.exit_code == 2
    assert "  recipe.schedule[1].architecture: encoder.kind is 'cnn', but the network " in (
        result.output
    )


def test_a_recipe_within_its_bounds_validates_trains_and_writes_its_recipe_again(
    run: Run, tmp_path: Path
) -> None:
    manifest = _recipe("DQN", generations=2)
    manifest["recipe"]["schedule"][1]["hyperparameters"]["batch_size"] = 32.0  # read as 32
    path = _written(tmp_path, manifest)
    assert run("validate", str(path)).exit_code == 0
    result = run("train", str(path), "--quiet", "--device", "cpu", "--run-dir",
                 str(tmp_path / "run"))  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "run" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    members = [json.loads(line)["members"][0] for line in lines]
    assert [m["arch"].split(" ->")[0] for m in members] == ["mlp[16]", "mlp[24,8]"]
    assert [m["hyperparameters"]["batch_size"] for m in members] == [16, 32]
    assert all(type(m["hyperparameters"]["batch_size"]) is int for m in members)
    again = run("recipe", str(tmp_path / "run"), "--out", str(tmp_path / "again.yaml"))
    assert again.exit_code == 0, again.output
    assert run("validate", str(tmp_path / "again.yaml")).exit_code == 0


def test_members_of_a_paradigm_without_an_architecture_check_take_none(
    make_host: Callable[..., Any], run: Run, tmp_path: Path
) -> None:
    host = make_host(("toy-paradigm", ToyParadigmPlugin()))
    step: dict[str, Any] = {"generation": 1, "hyperparameters": {"lr": 0.5},
                            "architecture": _architecture()}  # fmt: skip
    manifest = {
        "algorithm": {"name": "Fitter"},
        "environment": {"name": "line"},
        "training": {"pop_size": 1},
        "recipe": {"schedule": [step]},
    }
    result = run("validate", str(_written(tmp_path, manifest)), host=host)
    assert result.exit_code == 2
    assert (
        "  recipe.schedule[0].architecture: Fitter's members cannot adopt an architecture from "
        "a recipe (remove the architecture entries to replay the hyperparameters alone)"
    ) in result.output
    del step["architecture"]
    assert run("validate", str(_written(tmp_path, manifest)), host=host).exit_code == 0


def test_a_paradigm_s_architecture_check_must_be_callable(make_host: Callable[..., Any]) -> None:
    class Broken:
        @hookimpl
        def agile_register_paradigms(self, register: Any) -> None:
            register(name="broken", implementation="m:P", check_architecture="agile_rl:check")

    host = make_host(("broken", Broken()))
    info = next(info for info in host.plugins if info.name == "broken")
    assert info.status == "failed"
    assert "paradigm 'broken': check_architecture 'agile_rl:check' is not callable" in str(
        info.error
    )


# -- check_within: what the RL library offers for any architecture read from a file -------------

SECTIONS: dict[str, tuple[dict[str, Any], spaces.Space[Any]]] = {
    "mlp": ({}, VECTOR),
    "cnn": ({"encoder_config": {"arch": "cnn", "channel_size": [8, 16], "kernel_size": [3, 3],
                                "stride_size": [1, 1]}},
            spaces.Box(0, 255, (3, 16, 16), dtype=np.uint8)),
    "multiinput": ({"encoder_config": {"arch": "multiinput", "vector_space_mlp": True}},
                   spaces.Dict({"image": spaces.Box(0, 255, (3, 8, 8), dtype=np.uint8),
                                "vector": VECTOR})),
    "simba": ({"simba": True}, VECTOR),
    "lstm": ({"encoder_config": {"arch": "lstm", "hidden_state_size": 32}}, VECTOR),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(SECTIONS))
def test_every_architecture_evolution_grows_from_a_section_is_within_it(kind: str) -> None:
    section, space = SECTIONS[kind]
    network = NetworkSpec.model_validate(section)
    arch = arch_from_spec(network, space, recurrent=kind == "lstm")
    rng = np.random.default_rng(0)
    names = [method.name for method in arch.mutation_methods()]
    for _ in range(200):
        arch, _ = arch.apply(str(rng.choice(names)), rng)
        check_within(NetworkArch.from_dict(json.loads(json.dumps(arch.to_dict()))), network)
    assert arch.encoder.kind == kind


def test_check_within_names_the_first_size_past_its_bound() -> None:
    cnn, image = SECTIONS["cnn"]
    network = NetworkSpec.model_validate(cnn)
    data = arch_from_spec(network, image).to_dict()
    data["encoder"]["channel_size"] = [8, 100_000]
    with pytest.raises(ValueError) as caught:
        check_within(NetworkArch.from_dict(data), network)
    assert str(caught.value) == (
        "encoder.channel_size[1] is 100000, over network.encoder_config.max_channel_size 256"
    )
    plain = NetworkSpec()  # no encoder_config: an mlp encoder has the defaults' bounds
    data = arch_from_spec(plain, VECTOR).to_dict()
    data["encoder"]["max_mlp_nodes"] = 10**6
    with pytest.raises(ValueError) as caught:
        check_within(NetworkArch.from_dict(data), plain)
    assert str(caught.value) == (
        "encoder.max_mlp_nodes is 1000000, over the mlp encoder's default max_mlp_nodes 500"
    )
    widest = NetworkSpec.model_validate({"head_config": {"max_mlp_nodes": 65_536}})
    data = arch_from_spec(widest, VECTOR).to_dict()
    data["head"]["hidden_size"] = [65_537]
    with pytest.raises(ValueError) as caught:
        check_within(NetworkArch.from_dict(data), widest)
    assert str(caught.value) == "head.hidden_size[0] is 65537, over agile's limit 65536"


# -- the memory estimate counts the largest architecture a recipe adopts -------------------------


def _agile(*args: str, available: int | None = None, timeout: float = 120) -> Any:
    """``agile ARGS`` in a process that may take at most :data:`CEILING` of address space,
    on a machine with ``available`` bytes of memory (None: this one's)."""
    script = "import sys\nfrom agile_cli import memory\n"
    if available is not None:
        script += f"memory.available_memory = lambda: {available}\n"
    script += "from agile_cli.cli import main\nmain(sys.argv[1:])\n"

    def ceiling() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CEILING, CEILING))

    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True,
        timeout=timeout, preexec_fn=ceiling,
    )  # fmt: skip


def test_a_recipe_within_the_bounds_but_not_the_machine_is_refused_before_training(
    tmp_path: Path,
) -> None:
    """A 20,000-wide head is within this section's bounds, and takes 6.4 GB with Adam's state:
    on a machine with 2 GiB it is refused by the recipe's field, nothing built."""
    manifest = _recipe()
    manifest["network"]["head_config"]["max_mlp_nodes"] = 20_000
    manifest["recipe"]["schedule"][1]["architecture"]["head"]["hidden_size"] = [20_000, 20_000]
    path = _written(tmp_path, manifest)
    assert _agile("validate", str(path)).returncode == 0
    done = _agile("train", str(path), "--quiet", "--device", "cpu", "--run-dir",
                  str(tmp_path / "run"), available=2 << 30)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "error: recipe.schedule[1].architecture: the population needs 6.0 GiB (at least 400,4"
    ) in done.stdout + done.stderr
    assert "more than the 2.0 GiB this machine has available (narrow that architecture" in (
        done.stdout + done.stderr
    )
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_hostile_recipe_is_refused_by_agile_train_before_any_run_folder(tmp_path: Path) -> None:
    manifest = _recipe()
    manifest["recipe"]["schedule"][1]["architecture"]["head"]["hidden_size"] = [100_000, 100_000]
    path = _written(tmp_path, manifest)
    done = _agile("train", str(path), "--quiet", "--device", "cpu", "--run-dir",
                  str(tmp_path / "run"), timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "recipe.schedule[1].architecture: head.hidden_size[0] is 100000, over "
        "network.head_config.max_mlp_nodes 500"
    ) in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


# -- one long note shared by aliases -------------------------------------------------------------


def test_a_recipe_whose_notes_share_one_long_string_is_refused_at_once(
    run: Run, tmp_path: Path
) -> None:
    """300 aliases of a 400 KB note (a 400 KB file) made a 120 MB manifest.yaml in 78 s."""
    manifest = _recipe()
    text = yaml.safe_dump({k: v for k, v in manifest.items() if k != "recipe"}, sort_keys=False)
    note = "x" * 400_000
    lines = [f"  - {{generation: 1, mutation: &note {note}}}"]
    lines += [f"  - {{generation: {g}, mutation: *note}}" for g in range(2, 301)]
    path = tmp_path / "recipe.yaml"
    path.write_text(text + "recipe:\n  schedule:\n" + "\n".join(lines) + "\n", encoding="utf-8")
    assert path.stat().st_size < 420_000
    said = f"anchors and aliases expand to more than {MAX_TEXT:,} characters of text"
    for args in (["validate"], ["train", "--quiet", "--run-dir", str(tmp_path / "run")]):
        started = time.perf_counter()
        result = run(args[0], str(path), *args[1:])
        assert time.perf_counter() - started < 1.0
        assert result.exit_code == 2 and said in result.output, result.output
    assert not (tmp_path / "run").exists()
