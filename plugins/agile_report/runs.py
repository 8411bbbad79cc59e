"""Run folders read back for a report: each generation's fitness, members and lineage, and
runs of one manifest with different seeds grouped together.

Only ``metrics.jsonl``, ``manifest.yaml`` and ``summary.json`` are read, through the
run-folder readers of :mod:`agile_cli.helpers` (bounded, typed). What cannot be read becomes
a note on the run: a metrics line is skipped with the sentence saying why, an unreadable
manifest or summary leaves out what it would have told. Only a run without one readable
generation is refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from agile_cli import UsageError
from agile_cli.helpers import (
    HINT,
    Fields,
    RunFileError,
    metrics_lines,
    printable,
    read_json,
    read_manifest,
)
from agile_report.replay import SECTIONS as REPLAY_SECTIONS
from agile_report.replay import Replay, read_replay

#: Manifest fields that only seed a run: runs differing in nothing else are seeds of one setup.
SEED_FIELDS = (("mutation", "rand_seed"), ("network", "random_seed"))
#: The longest name or setting shown in a label (an algorithm, a hyperparameter, a value).
MAX_LABEL = 60
#: Skipped metrics lines named one by one under a run; the others are counted.
MAX_SKIPS_SHOWN = 3

T = TypeVar("T")


def label(text: str, limit: int = MAX_LABEL) -> str:
    """``text`` read from a run folder as a label shows it: control characters escaped
    (:func:`~agile_cli.helpers.printable`), cut to ``limit`` characters."""
    shown = printable(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


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
    def read(cls, summary: Fields) -> ScoredElite | None:
        """The summary's elite (None where it has none).

        :raises RunFileError: it is not as agile writes it.
        """
        if not summary.has("elite"):
            return None
        elite = summary.mapping("elite")
        bounded = elite.has("low") and elite.has("high")
        return cls(
            member=elite.integer("member"),
            score=elite.number("score"),
            low=elite.number("low") if bounded else None,
            high=elite.number("high") if bounded else None,
            episodes=elite.count("episodes"),
            training_rank=elite.count("training_rank"),
            training_fitness=elite.number("training_fitness"),
        )


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
    skipped: list[str] = field(default_factory=list)  # metrics lines left out, and why
    unit: str = "steps"  # what its steps count ("env steps", "prompts"; older runs did not say)
    replay: Replay | None = None  # the recipe it retrained one member on, if it did
    notes: list[str] = field(default_factory=list)  # what could not be read, for the user
    elite: ScoredElite | None = None  # its best members scored again at its end, if they were

    @property
    def name(self) -> str:
        return printable(self.path.name)

    @property
    def setup(self) -> str:
        """A digest of :attr:`settings`: runs of one setup (seeds apart) share it."""
        text = json.dumps(self.settings, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def title(self) -> str:
        return f"{self.algorithm} on {self.environment}"

    def unread(self) -> list[str]:
        """What could not be read, for the user: the notes, then the skipped metrics lines
        (the first :data:`MAX_SKIPS_SHOWN` by their sentence, the rest counted)."""
        shown = [f"skipped {sentence}" for sentence in self.skipped[:MAX_SKIPS_SHOWN]]
        rest = len(self.skipped) - len(shown)
        if rest:
            shown.append(f"{rest:,} more unreadable lines of metrics.jsonl skipped")
        return [*self.notes, *shown]

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

    :raises UsageError: it has no generation yet.
    :raises RunFileError: no line of its metrics holds a generation (naming the first line
        that could not be read).
    """
    generations, skipped = read_generations(path / "metrics.jsonl")
    if not generations:
        raise _no_generation(path, skipped)
    notes: list[str] = []
    manifest = _noted(lambda: read_manifest(path / "manifest.yaml"), notes,
                      "the run is shown without its settings")  # fmt: skip
    summary_file = _noted(lambda: read_json(path / "summary.json"), notes,
                          "its seed, step unit and elite are left out")  # fmt: skip
    facts = Fields(manifest or {}, str(path / "manifest.yaml"))
    summary = Fields(summary_file or {}, str(path / "summary.json"))
    replay, note = read_replay(manifest or {})
    notes += [note] if note else []
    return Run(
        path=path,
        algorithm=_name(facts, summary, "algorithm", notes),
        environment=_name(facts, summary, "environment", notes),
        seed=_noted(lambda: summary.integer("seed") if summary.has("seed") else None, notes),
        target=_noted(lambda: _target(facts), notes),
        settings=unseeded_settings(manifest) if manifest is not None else _own_setup(path),
        generations=generations,
        skipped=skipped,
        unit=label(_noted(lambda: _text(summary, "step_unit"), notes) or "steps"),
        replay=replay,
        notes=notes,
        elite=_noted(lambda: ScoredElite.read(summary), notes),
    )


def _noted(read: Callable[[], T | None], notes: list[str], then: str = "") -> T | None:
    """What ``read`` returns; None where it raises :class:`RunFileError`, whose sentence is
    added to ``notes`` (with ``then``, what the report does without it)."""
    try:
        return read()
    except RunFileError as error:
        notes.append(f"{error.message}; {then}" if then else error.message)
        return None


def _name(manifest: Fields, summary: Fields, section: str, notes: list[str]) -> str:
    """The manifest's ``algorithm.name`` or ``environment.name``, else the summary's
    ``algorithm`` or ``environment``, else "?"; as a label."""

    def from_manifest() -> str | None:
        if not manifest.has(section):
            return None
        fields = manifest.mapping(section)
        return fields.text("name") if fields.has("name") else None

    found = _noted(from_manifest, notes) or _noted(lambda: _text(summary, section), notes)
    return label(found or "?")


def _text(fields: Fields, name: str) -> str | None:
    """A string field (None: not there)."""
    return fields.text(name) if fields.has(name) else None


def _target(manifest: Fields) -> float | None:
    """The manifest's ``training.target_score`` (None: not there)."""
    if not manifest.has("training"):
        return None
    training = manifest.mapping("training")
    return training.number("target_score") if training.has("target_score") else None


def _own_setup(path: Path) -> dict[str, str]:
    """The settings of a run whose manifest could not be read: a setup of its own."""
    return {"manifest.yaml": f"unreadable in {path}"}


def _no_generation(path: Path, skipped: list[str]) -> UsageError:
    """Why the run at ``path`` has nothing to report."""
    if not skipped:
        return UsageError(f"{path} has no finished generation yet", "report on it after one")
    more = len(skipped) - 1
    others = f" ({more:,} more unreadable line{'s' if more > 1 else ''})" if more else ""
    return RunFileError(f"{skipped[0]}; no line holds a generation to report{others}", HINT)


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
        return f"{label(key.rsplit('.', 1)[-1])}={label(run.settings.get(key, '-'))}"
    if run.replay is not None:
        return f"replay of {run.replay.name}"
    replayed = any(_replay_setting(name) for name in run.settings)
    return "replay unreadable" if replayed else "no replay"


def _replay_setting(key: str) -> bool:
    """Whether a dotted setting lies in a section that makes a run a replay."""
    return key.split(".", 1)[0] in REPLAY_SECTIONS


def read_generations(path: Path) -> tuple[list[Generation], list[str]]:
    """The generations of ``metrics.jsonl`` at ``path``, and for each line that holds none, the
    sentence saying why (naming the file and the line).

    :raises RunFileError: the file cannot be read at all.
    """
    generations: list[Generation] = []
    skipped: list[str] = []
    for line in metrics_lines(path):
        try:
            generations.append(_generation(line.fields()))
        except RunFileError as error:
            skipped.append(error.message)
    return generations, skipped


def _generation(record: Fields) -> Generation:
    """A metrics record as a generation: its members with a fitness (a member whose fitness
    is null, as a diverged one's is, is left out).

    :raises RunFileError: a field is missing or not as agile writes it, or no member has a
        fitness.
    """
    members = [member for row in record.records("members") if (member := _member(row))]
    if not members:
        raise record.problem("members", "holds no member with a fitness")
    per_member = record.count("steps_per_member") if record.has("steps_per_member") else None
    return Generation(
        number=record.integer("generation"),
        global_steps=record.count("global_steps"),
        wall_seconds=record.number("wall_seconds"),
        members=members,
        steps_per_member=per_member,
    )


def _member(row: Fields) -> Member | None:
    """A member's row (None: its fitness is null)."""
    if "fitness" in row.data and not row.has("fitness"):
        return None
    hyperparameters = row.numbers("hyperparameters") if row.has("hyperparameters") else {}
    return Member(
        index=row.integer("index"),
        fitness=row.number("fitness"),
        parent=row.integer("parent") if row.has("parent") else None,
        hyperparameters={label(name): value for name, value in hyperparameters.items()},
        parameters=row.count("parameters") if row.has("parameters") else None,
        arch=row.text("arch") if row.has("arch") else "",
        mutation=row.text("mutation") if row.has("mutation") else "",
    )
