"""Scoring a saved agent: the elite of a run folder, or a member of a checkpoint."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from agile_cli.errors import AgileError, UsageError
from agile_cli.host.registry import Registry
from agile_cli.manifest import TrainingManifest
from agile_cli.member import AgentContext, Member
from agile_cli.training import checkpoint, setup, trust
from agile_cli.training.resume import check_compatible, explain_mismatch


def load_agent(
    path: Path,
    registry: Registry,
    *,
    member: int | None = None,
    device: str = "auto",
    trust_code: bool = False,
) -> tuple[Member, TrainingManifest]:
    """The saved agent and its manifest. ``path``: a run folder, elite.pt or a checkpoint.

    :param trust_code: build the environment even when the checkpoint names code that this
        user's agile did not seal as it is now (see :mod:`.trust`). The relative names of a
        run this user sealed resolve where it was trained, not in the current directory.
    """
    if path.is_dir():
        path = path / "elite.pt"
    state = checkpoint.load(path, kind=(checkpoint.POPULATION, checkpoint.MEMBER))
    manifest = _trusted_manifest(state, path, registry, trust_code)
    with explain_mismatch():
        saved = member_state(state, member, path)
    return _built(state, manifest, registry, [saved], device)[0], manifest


def load_population(
    path: Path, registry: Registry, *, device: str = "auto", trust_code: bool = False
) -> tuple[list[Member], TrainingManifest, dict[str, Any]]:
    """Every member a population checkpoint holds, its manifest and the checkpoint's loop
    counters (``state``). ``path``: a run folder (its ``checkpoints/latest.pt``) or a
    population checkpoint.

    :raises UsageError: ``path`` is a member file (``elite.pt``), which holds one member.
    """
    if path.is_dir():
        path = path / "checkpoints" / "latest.pt"
    state = checkpoint.load(path, kind=(checkpoint.POPULATION, checkpoint.MEMBER))
    if state["kind"] == checkpoint.MEMBER:
        raise UsageError(
            f"{path} holds one member, not a population",
            "give the run folder, or one of its checkpoints/*.pt",
        )
    manifest = _trusted_manifest(state, path, registry, trust_code)
    members = _built(state, manifest, registry, state["members"], device)
    return members, manifest, state["state"]


def _trusted_manifest(
    state: dict[str, Any], path: Path, registry: Registry, trust_code: bool
) -> TrainingManifest:
    recorded = TrainingManifest.get_validated(state["manifest"], registry=registry)
    return trust.checked(state, recorded, path, trusted=trust_code)


def _built(
    state: dict[str, Any],
    manifest: TrainingManifest,
    registry: Registry,
    saved: list[dict[str, Any]],
    device: str,
) -> list[Member]:
    """Members of ``manifest``'s algorithm holding the ``saved`` states."""
    env = setup.build_environment(manifest, registry, seed=0)
    try:
        spaces = setup.member_spaces(manifest, env)
        check_compatible(state, manifest, setup.describe_spaces(spaces))
        context = AgentContext(
            device=setup.resolve_device(device),
            num_envs=env.num_envs,
            training=manifest.training,
            network=manifest.network,
            replay_buffer=manifest.replay_buffer,
        )
        cls = setup.algorithm_class(manifest, registry)
        with explain_mismatch():
            first = setup.build_population(manifest, cls, env, context, size=1)[0]
            members = [first.clone(held["index"]) for held in saved[1:]]
            members.insert(0, first)
            for member, held in zip(members, saved, strict=True):
                member.load_state_dict(held)
    finally:
        env.close()
    return members


def run_seed(path: Path) -> int:
    """The seed of the run that saved ``path`` (a run folder, elite.pt or a checkpoint), as
    its checkpoint records it (one saved before checkpoints did is given the seed such a run
    takes without ``--seed`` when it is read: see :mod:`.checkpoint`)."""
    if path.is_dir():
        path = path / "elite.pt"
    state = checkpoint.load(path, kind=(checkpoint.POPULATION, checkpoint.MEMBER))
    return int(state["run_seed"])


def member_state(state: dict[str, Any], member: int | None, path: Path) -> dict[str, Any]:
    """The saved member of checkpoint ``state`` (read from ``path``): a member file's one,
    else member ``member`` of the population (None: the best by its latest fitness).

    :raises UsageError: no such member, naming where it is or which members there are.
    """
    if "member" in state:
        if member is not None and state["member"]["index"] != member:
            raise _only_one_member(path, state["member"]["index"], member)
        return cast(dict[str, Any], state["member"])
    members = {saved["index"]: saved for saved in state["members"]}
    if member is None:  # the best of the population by its latest fitness
        best = max(members.values(), key=lambda s: (s["record"]["fitness"] or [-np.inf])[-1])
        return cast(dict[str, Any], best)
    if member not in members:
        raise UsageError(
            f"no member {member} in {path}", "members: " + ", ".join(map(str, sorted(members)))
        )
    return cast(dict[str, Any], members[member])


def _only_one_member(path: Path, held: int, member: int) -> UsageError:
    """The error for ``--member`` on an elite.pt, which holds one member: the run's population
    checkpoint holds every member, so name it (or the members it holds, without ``member``)."""
    said = f"{path} holds member {held} only"
    latest = path.parent / "checkpoints" / "latest.pt"
    if not latest.is_file():
        hint = f"give a population checkpoint (checkpoints/*.pt) with --member {member}"
        return UsageError(f"{said}; a population checkpoint holds every member", hint)
    try:
        population = checkpoint.load(latest, kind=checkpoint.POPULATION)
        indices = sorted(saved["index"] for saved in population["members"])
    except (AgileError, KeyError, TypeError):  # damaged: loading it will say so
        indices = [member]
    if member not in indices:
        listing = ", ".join(map(str, indices))
        return UsageError(f"{said}, and {latest} has no member {member}", f"members: {listing}")
    return UsageError(
        f"{said}; the population checkpoint holds every member",
        f"give it instead: {latest} --member {member}",
    )


@dataclass
class Evaluation:
    """What ``agile evaluate`` found.

    :param returns: each episode's return (None when the paradigm scores its own way).
    :param fitness: the paradigm's own score (None for episodes).
    :param details: lines the paradigm's runner adds under the score (e.g. sample outputs).
    """

    returns: list[float] | None = None
    fitness: float | None = None
    details: list[str] = field(default_factory=list)


def score(
    agent: Member, manifest: TrainingManifest, registry: Registry, episodes: int, seed: int,
    *, run_seed: Callable[[], int] | None = None,
) -> Evaluation:  # fmt: skip
    """Returns of ``episodes`` full episodes, acting without exploration; or, for a paradigm
    whose runner scores members its own way (bandits, language models), that score over
    ``episodes`` rounds, with what the runner has to say about it.

    :param run_seed: gives the seed of the run that trained ``agent`` (asked only when
        needed): a paradigm that scores its own way then scores on the data that run held out
        (an LLM's held-out rows depend on the run's environment seed), not on a split drawn
        from ``seed``.
    """
    spec = _scoring_spec(manifest, episodes)
    env = setup.build_environment_from(spec, manifest, registry, seed)
    try:
        runner = setup.build_runner(manifest, env, None)  # scoring shares no experience
        returns = runner.episode_returns(agent, episodes, manifest.training.eval_steps, seed)
        if returns is None:  # the paradigm scores its own way
            if run_seed is not None:
                env.close()
                held_out = setup.seeds(run_seed())["environment"]
                env = setup.build_environment_from(spec, manifest, registry, held_out)
                runner = setup.build_runner(manifest, env, None)
            scores = runner.evaluate_population([agent], episodes, manifest.training.eval_steps)
            fitness = float(scores[0])
            return Evaluation(fitness=fitness, details=list(runner.details(agent)))
    finally:
        env.close()
    return Evaluation(returns=[float(value) for value in returns])


def episode_returns(
    agents: Sequence[Member], manifest: TrainingManifest, registry: Registry, episodes: int,
    seed: int,
) -> list[list[float]] | None:  # fmt: skip
    """Each agent's returns of the same ``episodes`` greedy episodes from ``seed``, played in
    one environment built once; None for a paradigm that plays no episodes (it scores its own
    way)."""
    env = setup.build_environment_from(_scoring_spec(manifest, episodes), manifest, registry, seed)
    try:
        runner = setup.build_runner(manifest, env, None)
        found = []
        for agent in agents:
            returns = runner.episode_returns(agent, episodes, manifest.training.eval_steps, seed)
            if returns is None:
                return None
            found.append([float(value) for value in returns])
    finally:
        env.close()
    return found


def _scoring_spec(manifest: TrainingManifest, episodes: int) -> Any:
    """The environment section with one copy per episode, stepped in this process."""
    updates = {
        key: value
        for key, value in (("num_envs", episodes), ("sync", True))
        if key in type(manifest.environment).model_fields
    }
    return manifest.environment.model_copy(update=updates)
