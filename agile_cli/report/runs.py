"""Run folders read back for a report: each generation's fitness, members and lineage, and
runs of one manifest with different seeds grouped together.

Only ``metrics.jsonl``, ``manifest.yaml`` and ``summary.json`` are read, as data (JSON and
safe YAML), a bounded line at a time.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from agile_cli.errors import UsageError, printable
from agile_cli.report.replay import SECTIONS as REPLAY_SECTIONS
from agile_cli.report.replay import Replay, read_replay

#: The longest metrics line read (one generation; a population of thousands fits well).
MAX_LINE = 16 * 1024 * 1024
#: Manifest fields that only seed a run: runs differing in nothing else are seeds of one setup.
SEED_FIELDS = (("mutation", "rand_seed"), ("network", "random_seed"))


@dataclass
class Member:
    """One member in one generation."""

    index: int
    fitness: float
    parent: int | None
    hyperparameters: dict[str, float]
    parameters: int | None
    arch: str
    mutation: str

    @property
    def cloned_from(self) -> int | None:
        """The index of the member this one was cloned from before this generation (None: it
        was kept, or the metrics name no parent)."""
        return self.parent if self.parent is not None and self.parent != self.index else None

    @property
    def mutated(self) -> bool:
        """Whether it was mutated before this generation (its label is not "none" or
        "none (...)"; older runs wrote no label)."""
        label = self.mutation.strip()
        return bool(label) and label != "none" and not label.startswith("none (")


@dataclass
class Generation:
    """One line of ``metrics.jsonl``."""

    number: int
    global_steps: int
    wall_seconds: float
    members: list[Member]
    steps_per_member: int | None = None  # older runs did not write it

    @property
    def best(self) -> float:
        return max(m.fitness for m in self.members)

    @property
    def mean(self) -> float:
        return float(np.mean([m.fitness for m in self.members]))

    @property
    def best_member(self) -> Member:
        return max(self.members, key=lambda m: m.fitness)


@dataclass
class ScoredElite:
    """The elite a run chose at its end by scoring its best members again (``summary.json``'s
    ``elite``): its mean return on fresh episodes with the 95% interval, and its training rank."""

    member: int
    score: float
    low: float | None
    high: float | None
    episodes: int
    training_rank: int
    training_fitness: float

    @classmethod
    def read(cls, summary: dict[str, Any]) -> ScoredElite | None:
        """The summary's elite, or None where it has none or it is not as agile writes it."""
        elite = summary.get("elite")
        if not isinstance(elite, dict):
            return None
        numbers = {name: elite.get(name) for name in ("score", "training_fitness")}
        counts = {name: elite.get(name) for name in ("member", "episodes", "training_rank")}
        bounds = [elite.get("low"), elite.get("high")]
        if not all(_is_number(value) for value in numbers.values()) or not all(
            isinstance(value, int) and not isinstance(value, bool) for value in counts.values()
        ):
            return None
        low, high = bounds if all(_is_number(value) for value in bounds) else (None, None)
        return cls(low=low, high=high, **numbers, **counts)  # type: ignore[arg-type]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class Run:
    """A run folder as the report sees it."""

    path: Path
    algorithm: str
    environment: str
    seed: int | None
    target: float | None
    settings: dict[str, str]  # the manifest without its seeds, flattened to dotted paths
    generations: list[Generation]
    skipped: int = 0  # metrics lines that could not be read
    unit: str = "steps"  # what its steps count ("env steps", "prompts"; older runs did not say)
    replay: Replay | None = None  # the recipe it retrained one member on, if it did
    notes: list[str] = field(default_factory=list)  # what could not be read, for the user
    elite: ScoredElite | None = None  # its best members scored again at its end, if they were

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def setup(self) -> str:
        """A digest of :attr:`settings`: runs of one setup (seeds apart) share it."""
        text = json.dumps(self.settings, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def title(self) -> str:
        return f"{self.algorithm} on {self.environment}"

    def hyperparameter_names(self) -> list[str]:
        names: dict[str, None] = {}
        for generation in self.generations:
            for member in generation.members:
                names.update(dict.fromkeys(member.hyperparameters))
        return list(names)

    def lineage(self, generation: int) -> list[int | None]:
        """For each member of generation ``generation`` (an index into :attr:`generations`),
        the position in the previous generation of the member it continues or was cloned
        from (None: the first generation, or a parent the metrics do not show)."""
        if generation == 0:
            return [None] * len(self.generations[0].members)
        before = {m.index: k for k, m in enumerate(self.generations[generation - 1].members)}
        links: list[int | None] = []
        for member in self.generations[generation].members:
            source = member.index if member.index in before else member.parent
            links.append(before.get(source) if source is not None else None)
        return links

    def ancestry(self) -> list[tuple[int, int]]:
        """The final best member's ancestry, oldest first: ``(generation, position)`` pairs,
        a generation as an index into :attr:`generations`, back as far as the metrics show."""
        last = self.generations[-1]
        slot: int | None = last.members.index(last.best_member)
        path: list[tuple[int, int]] = []
        for k in range(len(self.generations) - 1, -1, -1):
            if slot is None:
                break
            path.append((k, slot))
            slot = self.lineage(k)[slot]
        return path[::-1]


@dataclass
class Group:
    """Runs of one setup (one manifest, different seeds), drawn as one curve."""

    label: str
    runs: list[Run] = field(default_factory=list)

    @property
    def target(self) -> float | None:
        return self.runs[0].target

    def scored_elites(self) -> np.ndarray | None:
        """Each seed's elite scored again at its end, where there are several seeds and every
        one has it (None otherwise)."""
        scores = [run.elite.score for run in self.runs if run.elite is not None]
        if len(self.runs) < 2 or len(scores) != len(self.runs):
            return None
        return np.array(scores)


def find_runs(paths: Iterable[Path]) -> list[Path]:
    """Run folders named by ``paths``: each a run folder, or a folder holding run folders.

    :raises UsageError: a path holds no run at all.
    """
    found: list[Path] = []
    for path in paths:
        if (path / "metrics.jsonl").is_file():
            found.append(path)
            continue
        inner = sorted(p.parent for p in path.glob("*/metrics.jsonl")) if path.is_dir() else []
        if not inner:
            what = "a folder" if path.is_dir() else "not a folder"
            raise UsageError(
                f"{path} holds no run ({what} without metrics.jsonl)",
                "name a run folder (runs/<algorithm>-<env>-<time>) or a folder of them",
            )
        found.extend(inner)
    return list(dict.fromkeys(found))


def load_run(path: Path) -> Run:
    """Read one run folder.

    :raises UsageError: it has no generation yet, or its manifest cannot be read.
    """
    manifest = read_yaml(path / "manifest.yaml")
    summary = read_json(path / "summary.json")
    generations, skipped = _read_generations(path / "metrics.jsonl")
    if not generations:
        raise UsageError(f"{path} has no finished generation yet", "report on it after one")
    algorithm = manifest.get("algorithm", {}).get("name") or summary.get("algorithm", "?")
    environment = manifest.get("environment", {}).get("name") or summary.get("environment", "?")
    seed = summary.get("seed")
    target = manifest.get("training", {}).get("target_score")
    unit = summary.get("step_unit")
    replay, note = read_replay(manifest)
    return Run(
        path=path,
        algorithm=str(algorithm),
        environment=str(environment),
        seed=seed if isinstance(seed, int) else None,
        target=float(target) if isinstance(target, int | float) else None,
        settings=unseeded_settings(manifest),
        generations=generations,
        skipped=skipped,
        unit=printable(unit) if isinstance(unit, str) and unit else "steps",
        replay=replay,
        notes=[note] if note else [],
        elite=ScoredElite.read(summary),
    )


def unseeded_settings(manifest: dict[str, Any]) -> dict[str, str]:
    """Every leaf of the manifest by its dotted path, less the fields that only seed a run."""
    flat: dict[str, str] = {}

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict) and value:
            for key, inner in value.items():
                walk(inner, f"{path}.{key}" if path else str(key))
        else:
            flat[path] = json.dumps(value, sort_keys=True, default=str)

    walk(manifest, "")
    for section, name in SEED_FIELDS:
        flat.pop(f"{section}.{name}", None)
    return flat


def group_runs(runs: list[Run]) -> list[Group]:
    """Runs of one setup together, in the order first seen; each labelled by its algorithm and
    environment and, where setups would share a label, by the settings that tell them apart."""
    groups: dict[str, Group] = {}
    for run in runs:
        groups.setdefault(run.setup, Group(run.title)).runs.append(run)
    by_title: dict[str, list[Group]] = {}
    for group in groups.values():
        by_title.setdefault(group.label, []).append(group)
    for alike in by_title.values():
        if len(alike) > 1:
            for group in alike:
                group.label += f" ({_difference(group, alike)})"
    return list(groups.values())


def _difference(group: Group, alike: list[Group]) -> str:
    """The settings of ``group`` that some other group of ``alike`` does not share (at most
    three; a replay's section counts as one), or its first run's folder name."""
    mine = group.runs[0].settings
    keys: set[str] = set()
    for other in alike:
        theirs = other.runs[0].settings
        differ = {key for key in mine.keys() | theirs.keys() if mine.get(key) != theirs.get(key)}
        keys |= {"replay" if _replay_setting(key) else key for key in differ}
    if not keys or len(keys) > 3:
        return group.runs[0].name
    return ", ".join(_setting(group.runs[0], key) for key in sorted(keys))


def _setting(run: Run, key: str) -> str:
    """``name=value`` for a setting in a group's label; a replay by what it replays."""
    if key != "replay":
        return f"{key.rsplit('.', 1)[-1]}={run.settings.get(key, '-')}"
    if run.replay is not None:
        return f"replay of {run.replay.name}"
    replayed = any(_replay_setting(name) for name in run.settings)
    return "replay unreadable" if replayed else "no replay"


def _replay_setting(key: str) -> bool:
    """Whether a dotted setting lies in a section that makes a run a replay."""
    return key.split(".", 1)[0] in REPLAY_SECTIONS


def _read_generations(path: Path) -> tuple[list[Generation], int]:
    generations: list[Generation] = []
    skipped = 0
    for line in _bounded_lines(path):
        generation = _generation(line)
        if generation is None:
            skipped += 1
        else:
            generations.append(generation)
    return generations, skipped


def _bounded_lines(path: Path) -> Iterator[str | None]:
    """Each line of ``path``; None for one longer than :data:`MAX_LINE` (not kept)."""
    with path.open(encoding="utf-8", errors="replace") as stream:
        while line := stream.readline(MAX_LINE):
            if not line.endswith("\n") and len(line) == MAX_LINE:
                while (rest := stream.readline(MAX_LINE)) and not rest.endswith("\n"):
                    pass
                yield None
            elif line.strip():
                yield line


def _generation(line: str | None) -> Generation | None:
    if line is None:
        return None
    try:
        record = json.loads(line)
        members = [_member(row) for row in record["members"]]
        per_member = record.get("steps_per_member")
        generation = Generation(
            number=int(record["generation"]),
            global_steps=int(record["global_steps"]),
            wall_seconds=float(record["wall_seconds"]),
            members=[m for m in members if math.isfinite(m.fitness)],
            steps_per_member=per_member if isinstance(per_member, int) else None,
        )
    except (ValueError, KeyError, TypeError):
        return None
    return generation if generation.members else None


def _member(row: dict[str, Any]) -> Member:
    parent, parameters = row.get("parent"), row.get("parameters")
    return Member(
        index=int(row["index"]),
        fitness=float(row["fitness"]) if row["fitness"] is not None else math.nan,
        parent=int(parent) if parent is not None else None,
        hyperparameters={
            str(k): float(v)
            for k, v in (row.get("hyperparameters") or {}).items()
            if isinstance(v, int | float)
        },
        parameters=int(parameters) if parameters is not None else None,
        arch=str(row.get("arch", "")),
        mutation=str(row.get("mutation", "")),
    )


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        with path.open(encoding="utf-8") as stream:
            document = yaml.safe_load(stream.read(MAX_LINE))
    except FileNotFoundError:
        return {}
    except (OSError, yaml.YAMLError) as error:
        raise UsageError(f"cannot read {path}: {error}") from None
    return document if isinstance(document, dict) else {}


def read_json(path: Path) -> dict[str, Any]:
    try:
        with path.open(encoding="utf-8") as stream:
            document = json.loads(stream.read(MAX_LINE))
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}
