"""Testing kit for plugin authors: a pytest plugin shipped with agile (entry point ``pytest11``).

Installed with agile, it gives every test suite these fixtures:

- ``agile_host(*plugins)``: a plugin host with the installed plugins plus ``plugins`` (objects
  or ``(name, object)`` pairs), for this test only;
- ``agile_cli(*args, host=None)``: run ``agile ARGS`` in-process and get click's ``Result``;
- ``agile_manifest(algorithm, **sections)``: a tiny validated manifest for an algorithm;
- ``agile_population(algorithm, size=2)``: members of a tiny population, ready to act;
- ``agile_smoke_train(algorithm, **sections)``: train a tiny evolving population and return
  the result (population, fitnesses, summary, run folder);
- ``agile_conformance(algorithm, **sections)``: :func:`check_conformance`;
- ``agile_reproducibility(algorithm, **sections)``: :func:`check_reproducibility` alone.

Those taking an algorithm also take ``registry=`` (e.g. ``agile_host(...).registry``, to test
a variant registered for one test); by default they use the installed plugins.

Importing this module imports neither torch nor gymnasium; the fixtures do, when used.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import pytest

TOY_ENVIRONMENT = {"name": "CartPole-v1", "num_envs": 2, "sync": True}
TINY_SECTIONS: dict[str, Any] = {
    "training": {"max_steps": 128, "evo_steps": 64, "pop_size": 2},
    "network": {
        "latent_dim": 16,
        "encoder_config": {"hidden_size": [16]},
        "head_config": {"hidden_size": [16]},
    },
    "mutation": {},
    "tournament_selection": {},
}


def tiny_manifest(
    algorithm: str, *, registry: Any = None, environment: Mapping[str, Any] | None = None,
    algorithm_options: Mapping[str, Any] | None = None, **sections: Any,
) -> Any:  # fmt: skip
    """A validated manifest: ``algorithm`` (batch size 16, plus ``algorithm_options``) on a
    toy environment, a 2-member population evolving over 2 generations of 64 steps;
    ``sections`` override whole sections."""
    from agile_cli.manifest import TrainingManifest

    data: dict[str, Any] = copy.deepcopy(TINY_SECTIONS)
    data["algorithm"] = {"name": algorithm, "batch_size": 16, **(algorithm_options or {})}
    data["environment"] = dict(environment or TOY_ENVIRONMENT)
    data.update(sections)
    return TrainingManifest.get_validated(data, registry=_registry(registry))


def _registry(registry: Any) -> Any:
    return registry if registry is not None else installed_host().registry


@functools.cache
def installed_host() -> Any:
    """The installed plugins' :class:`~agile_cli.host.plugins.PluginHost`, loaded once for the kit's
    process (a test suite builds many small manifests; pass ``registry=`` to test another).

    :raises BrokenPluginsError: when loading is strict and a plugin failed.
    """
    from agile_cli.host.plugins import build_host

    host = build_host()
    host.check()
    return host


def tiny_population(
    manifest: Any, registry: Any = None, size: int | None = None, device: str = "cpu"
) -> list[Any]:
    """Fresh members for ``manifest`` on ``device`` (the environment is built and closed)."""
    import torch

    from agile_cli.member import AgentContext
    from agile_cli.training import setup

    registry = _registry(registry)
    env = setup.build_environment(manifest, registry, seed=0)
    context = AgentContext(
        torch.device(device), env.num_envs, manifest.training, seed=0,
        network=manifest.network, replay_buffer=manifest.replay_buffer,
        mutation=manifest.mutation,
    )  # fmt: skip
    cls = setup.algorithm_class(manifest, registry)
    members = setup.build_population(manifest, cls, env, context, size=size)
    env.close()
    return members


def smoke_train(
    manifest: Any,
    run_dir: Path,
    registry: Any = None,
    *,
    seed: int | None = None,
    per_member: bool = False,
) -> Any:
    """Train ``manifest`` quietly on the CPU into ``run_dir`` (with ``seed``, as ``--seed``
    would; ``per_member`` as ``--per-member``); returns the :class:`~agile_cli.RunResult`."""
    from agile_cli.models.run_options import LocalRunOptions
    from agile_cli.training.loop import EvolutionLoop
    from agile_cli.training.progress import LogReporter

    options = LocalRunOptions(device="cpu", run_dir=run_dir, seed=seed, per_member=per_member)
    return EvolutionLoop(manifest, _registry(registry), options, LogReporter()).run()


#: Fields of a metrics record that measure the machine (or the process) rather than the run:
#: timings, and what the process compiled (a resumed process compiles again).
TIMING_FIELDS = ("wall_seconds", "steps_per_second", "compiled")


def seeded_metrics(
    manifest: Any, run_dir: Path, seed: int, registry: Any = None, *, per_member: bool = False
) -> list[Any]:
    """Train ``manifest`` with ``seed`` into ``run_dir``; the run's metrics records (each
    generation's fitnesses, hyperparameters, architectures and mutations) without timings."""
    import json

    smoke_train(manifest, run_dir, registry, seed=seed, per_member=per_member)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in record.items() if k not in TIMING_FIELDS} for record in records]


def check_reproducibility(
    algorithm: str, workdir: Path, *, registry: Any = None, **sections: Any
) -> None:
    """Two runs of a tiny evolving population with the same seed must log the same metrics:
    every random draw comes from a generator derived from the run's seed (a member's
    ``generator`` or ``rng``), never from torch's, numpy's or Python's global state or an
    unseeded ``Space.sample()``. Raises AssertionError naming the first generation that
    differs."""
    problems = _reproducibility_problems(algorithm, workdir, registry, sections)
    assert not problems, f"{algorithm} is not reproducible:\n- " + "\n- ".join(problems)


def _reproducibility_problems(
    algorithm: str, workdir: Path, registry: Any, sections: Mapping[str, Any]
) -> list[str]:
    """Two runs with one seed must log the same metrics, with members stacked where they can
    be and as groups of one (``--per-member``) alike."""
    registry = _registry(registry)
    manifest = tiny_manifest(algorithm, registry=registry, **sections)
    paths = {False: " (stacked)", True: " (groups of one)"}
    for per_member, label in paths.items():
        problems = _seeded_problems(manifest, workdir, registry, per_member, label)
        if problems:
            return problems
    return []


def _seeded_problems(
    manifest: Any, workdir: Path, registry: Any, per_member: bool, label: str
) -> list[str]:
    runs = [workdir / f"seeded-{int(per_member)}-{n}" for n in (1, 2)]
    first, second = (
        seeded_metrics(manifest, run, 7, registry, per_member=per_member) for run in runs
    )
    for one, two in zip(first, second, strict=False):
        if one != two:
            return [
                f"generation {one['generation']} of two runs with the same seed{label} "
                "differs (draw every random number from the member's generator or rng, and sample "
                "torch.distributions with self.sample(distribution)):\n"
                f"  {one['members']}\n  {two['members']}"
            ]
    if len(first) != len(second):
        return [f"two runs with the same seed ran {len(first)} and {len(second)} generations"]
    return []


def check_conformance(
    algorithm: str, workdir: Path, *, registry: Any = None, **sections: Any
) -> None:
    """Check what every algorithm plugin must do; raises AssertionError listing the failures.

    The spec forbids unknown keys and describes every field; each mutable hyperparameter is a
    numeric field of a built member's spec; the checkpoint of a member that has learned
    restores it exactly (hyperparameters, fitness history, greedy actions, learned parameters,
    and every attribute holding numbers: :func:`lost_attributes`); a run interrupted after its
    first generation resumes to the end with the same population; and two runs with the same
    seed log the same metrics (:func:`check_reproducibility`). ``registry``: the plugins to use
    (e.g. a host's from the ``agile_host`` fixture, to check a variant registered for one
    test); the installed ones when None.
    """
    registry = _registry(registry)
    problems = _spec_problems(registry.algorithms[algorithm].spec)
    manifest = tiny_manifest(algorithm, registry=registry, **sections)
    member, twin = tiny_population(manifest, registry, size=2)
    problems += _hyperparameter_problems(member)
    problems += _round_trip_problems(member, twin, manifest, registry)
    problems += _resume_problems(manifest, workdir, registry)
    problems += _reproducibility_problems(algorithm, workdir, registry, sections)
    assert not problems, f"{algorithm} does not conform:\n- " + "\n- ".join(problems)


def _spec_problems(spec: Any) -> list[str]:
    from pydantic import ValidationError

    problems = [
        f"spec field '{name}' has no description"
        for name, field in spec.model_fields.items()
        if not field.description
    ]
    try:
        spec.model_validate({"agile_conformance_unknown_key": 1})
        problems.append("spec accepts unknown keys")
    except ValidationError as error:
        if not any(e["type"] == "extra_forbidden" for e in error.errors()):
            problems.append("spec does not report unknown keys as extra_forbidden")
    return problems


def _hyperparameter_problems(member: Any) -> list[str]:
    fields = type(member.spec).model_fields
    return [
        f"mutable hyperparameter '{name}' is not a numeric field of {type(member.spec).__name__}"
        for name in member.spec.mutable_hyperparameters
        if name not in fields or not isinstance(getattr(member.spec, name), int | float)
    ]


def _round_trip_problems(member: Any, twin: Any, manifest: Any, registry: Any) -> list[str]:
    """Train ``member`` a little, save it through a checkpoint into the untrained ``twin``, and
    compare what learning changed."""
    import numpy as np
    import torch

    from agile_cli.training import checkpoint

    learn_a_little(member, manifest, registry)
    member.record.fitness.append(1.0)
    member.reset_state()  # what a resumed run starts from anyway
    twin.load_state_dict(_bytes_round_trip(member.state_dict(), checkpoint))
    twin.reset_state()
    problems = []
    if twin.hyperparameters() != member.hyperparameters():
        problems.append("checkpoint round trip changed the hyperparameters")
    if twin.record.fitness != member.record.fitness:
        problems.append("checkpoint round trip lost the fitness history")
    problems += lost_attributes(member, twin)
    space = member.observation_space
    if hasattr(space, "spaces"):
        return problems  # Dict spaces: no batch of samples to act on
    obs = np.stack([space.sample() for _ in range(4)])
    with torch.no_grad():
        if not np.array_equal(member.act(obs, explore=False), twin.act(obs, explore=False)):
            problems.append("checkpoint round trip changed the greedy actions")
    return problems


def learn_a_little(member: Any, manifest: Any, registry: Any = None) -> None:
    """Train ``member`` for one generation of ``manifest`` on the CPU, plus one more learn
    call where the paradigm keeps a replay buffer (whatever ``learn_step``), so that whatever
    learning changes has changed."""
    import torch

    from agile_cli.training import setup

    registry = _registry(registry)
    env = setup.build_environment(manifest, registry, seed=0)
    try:
        buffer = setup.build_buffer(manifest, env, torch.device("cpu"))
        runner = setup.build_runner(manifest, env, buffer)
        runner.train_population([member], manifest.generation_steps, lambda _steps: None)
        size = int(member.spec.batch_size)
        if buffer is not None and len(buffer) >= size:  # learning from a shared buffer
            member.learn(buffer.sample(size, member.generator))
    finally:
        env.close()


#: Member attributes that :meth:`~agile_rl.runtime.agent.Algorithm.state_dict` saves itself or that
#: describe the member's setting rather than what it learned.
_SAVED_OR_SETTING = frozenset(
    {
        "spec", "observation_space", "action_space", "observation_spaces", "action_spaces",
        "arch", "context", "device", "index", "record", "generator", "rng", "networks",
        "optimizers", "_plans", "_parameter_lists",
    }
)  # fmt: skip


def lost_attributes(member: Any, restored: Any) -> list[str]:
    """Problems for each attribute of ``member`` holding numbers (tensors, parameters, numpy
    arrays, ints, floats, bools, containers of them, networks or optimizers kept outside
    ``networks`` / ``optimizers``) whose value ``restored`` does not have."""
    problems = []
    for name, value in vars(member).items():
        if name in _SAVED_OR_SETTING or name.startswith("__"):
            continue
        saved = dict(_numeric_leaves(value))
        if not saved:
            continue
        if _same_leaves(saved, dict(_numeric_leaves(getattr(restored, name, None)))):
            continue
        problems.append(_lost_message(name, value))
    return problems


def _lost_message(name: str, value: Any) -> str:
    import torch

    if name == "learned_parameters":
        return (
            "checkpoint round trip changed a learned parameter (add_parameter): the core "
            "restores them, so do not reset them in set_architecture() or load_extra_state()"
        )
    if isinstance(value, torch.nn.Module | torch.optim.Optimizer):
        return (
            f"checkpoint round trip lost the state of '{name}' ({type(value).__name__}), kept "
            "outside self.networks / self.optimizers: build it with add_network / "
            "add_optimizer, or save its state_dict() in extra_state()"
        )
    return (
        f"checkpoint round trip lost '{name}' (learning changed it, the restored member has "
        "another value): return it from extra_state() and restore it in load_extra_state()"
    )


def _numeric_leaves(value: Any, path: str = "", depth: int = 0) -> Iterable[tuple[str, Any]]:
    """``(path, leaf)`` for every number, tensor or numeric array inside ``value``."""
    import numpy as np
    import torch

    if depth > 4:
        return
    if isinstance(value, torch.Tensor):
        yield path, value.detach().cpu()
    elif isinstance(value, bool | int | float | np.number | np.ndarray):
        if np.asarray(value).dtype.kind in "biuf":
            yield path, value
    elif isinstance(value, torch.nn.Module | torch.optim.Optimizer):
        yield from _numeric_leaves(value.state_dict(), path, depth + 1)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _numeric_leaves(item, f"{path}.{key}", depth + 1)
    elif isinstance(value, list | tuple):
        for position, item in enumerate(value):
            yield from _numeric_leaves(item, f"{path}[{position}]", depth + 1)


def _same_leaves(one: dict[str, Any], two: dict[str, Any]) -> bool:
    import numpy as np
    import torch

    if one.keys() != two.keys():
        return False
    for key, left in one.items():
        right = two[key]
        if isinstance(left, torch.Tensor) != isinstance(right, torch.Tensor):
            return False
        if isinstance(left, torch.Tensor):
            left, right = left.numpy(force=True), right.numpy(force=True)
        left, right = np.asarray(left), np.asarray(right)
        nan_too = left.dtype.kind == "f" and right.dtype.kind == "f"
        if not np.array_equal(left, right, equal_nan=nan_too):
            return False
    return True


def _bytes_round_trip(state: dict[str, Any], checkpoint: Any) -> dict[str, Any]:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "member.pt"
        checkpoint.save_atomically({"format": checkpoint.FORMAT_VERSION, "member": state}, path)
        return cast(dict[str, Any], checkpoint.load(path)["member"])


def _resume_problems(manifest: Any, workdir: Path, registry: Any) -> list[str]:
    from agile_cli.models.run_options import LocalRunOptions
    from agile_cli.training import checkpoint
    from agile_cli.training.loop import EvolutionLoop
    from agile_cli.training.progress import LogReporter
    from agile_cli.training.trainer import resume_local

    run_dir = workdir / "conformance-run"
    loop = EvolutionLoop(
        manifest, registry, LocalRunOptions(device="cpu", run_dir=run_dir), LogReporter()
    )
    interrupt_after(loop, members_trained=len(loop.population))
    first = loop.run()
    if not first.interrupted:
        return ["the run could not be interrupted (does it train more than one generation?)"]
    saved = [m["index"] for m in checkpoint.load(run_dir / "checkpoints" / "latest.pt")["members"]]
    resumed = resume_local(run_dir, registry, LocalRunOptions(device="cpu"), verbose=False)
    problems = []
    if resumed.summary["steps_per_member"] != manifest.training.max_steps:
        problems.append("a resumed run did not train to max_steps")
    if resumed.summary["generations"] < 2:
        problems.append("a resumed run did not continue past the interrupted generation")
    first_after = (run_dir / "metrics.jsonl").read_text().splitlines()[1]
    if any(f'"index": {index},' not in first_after for index in saved):
        problems.append("the resumed run did not continue with the saved population")
    return problems


def interrupt_after(loop: Any, members_trained: int) -> None:
    """Make ``loop`` raise KeyboardInterrupt (as Ctrl-C would) once ``members_trained`` member
    generations have been trained."""
    from agile_cli.runner import Runner

    calls = {"count": 0}
    if type(loop.runner).train_population is not Runner.train_population:
        # the runner trains the population its own way (at once): interrupt before a generation
        real_population = loop.runner.train_population

        def train_population(members: Any, steps: int, progress: Callable[[int], None]) -> Any:
            calls["count"] += len(members)
            if calls["count"] > members_trained:
                raise KeyboardInterrupt
            return real_population(members, steps, progress)

        loop.runner.train_population = train_population
        return
    real_train = loop.runner.train

    def train(member: Any, steps: int, progress: Callable[[int], None]) -> Any:
        calls["count"] += 1
        if calls["count"] > members_trained:
            raise KeyboardInterrupt
        return real_train(member, steps, progress)

    loop.runner.train = train


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture
def agile_host() -> Callable[..., Any]:
    """Build a plugin host from the installed plugins plus the given ones (this test only)."""
    from agile_cli.cli import CORE_COMMANDS
    from agile_cli.host.plugins import LoadingControls, build_host

    def make(*plugins: object, controls: LoadingControls | None = None) -> Any:
        pairs: Iterable[tuple[str, object]] = [
            p if isinstance(p, tuple) else (getattr(p, "__name__", type(p).__name__), p)
            for p in plugins
        ]
        return build_host(
            extra_plugins=pairs,
            reserved_commands=CORE_COMMANDS,
            controls=controls or LoadingControls(),
        )

    return make


@pytest.fixture
def agile_cli() -> Callable[..., Any]:
    """Run ``agile ARGS`` in-process (``host=`` a host from ``agile_host``); returns the Result."""
    from click.testing import CliRunner

    from agile_cli.cli import cli

    def invoke(*args: str, host: Any = None) -> Any:
        return CliRunner().invoke(cli, list(args), obj=host, catch_exceptions=False)

    return invoke


@pytest.fixture
def agile_manifest() -> Callable[..., Any]:
    """``agile_manifest("MyAlgo", training={...})``: a tiny validated manifest."""
    return tiny_manifest


@pytest.fixture
def agile_population() -> Callable[..., list[Any]]:
    """``agile_population("MyAlgo", size=2, registry=None, **sections)``: members of a tiny
    population (``registry``: e.g. ``agile_host(...).registry``; the installed plugins' when
    None)."""

    def build(algorithm: str, size: int = 2, *, registry: Any = None, **sections: Any) -> list[Any]:
        manifest = tiny_manifest(algorithm, registry=registry, **sections)
        return tiny_population(manifest, registry, size=size)

    return build


@pytest.fixture
def agile_smoke_train(tmp_path: Path) -> Callable[..., Any]:
    """``agile_smoke_train("MyAlgo", registry=None, **sections)``: train a tiny evolving
    population."""

    def train(algorithm: str, *, registry: Any = None, **sections: Any) -> Any:
        manifest = tiny_manifest(algorithm, registry=registry, **sections)
        return smoke_train(manifest, tmp_path / "smoke-run", registry)

    return train


@pytest.fixture
def agile_conformance(tmp_path: Path) -> Callable[..., None]:
    """``agile_conformance("MyAlgo", registry=None, **sections)``: :func:`check_conformance`
    in a temporary folder."""

    def check(algorithm: str, *, registry: Any = None, **sections: Any) -> None:
        check_conformance(algorithm, tmp_path, registry=registry, **sections)

    return check


@pytest.fixture
def agile_reproducibility(tmp_path: Path) -> Callable[..., None]:
    """``agile_reproducibility("MyAlgo")``: :func:`check_reproducibility` in a temporary
    folder (:func:`check_conformance` includes it)."""

    def check(algorithm: str, *, registry: Any = None, **sections: Any) -> None:
        check_reproducibility(algorithm, tmp_path, registry=registry, **sections)

    return check
