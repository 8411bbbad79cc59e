"""Starter manifests (``agile init``): every section of one registered algorithm, written from
the registered specs with each field at its default and its description as a comment.

Nothing here imports torch or an environment package: the specs are pydantic models, and the
written manifest is checked the way ``agile validate`` checks a file. Fields that validation
warns about (written at their default, they may still mean "set on purpose") and fields
accepted only for compatibility are written commented out, so the manifest validates without
warnings. Plugins' specs give the values that differ from the defaults (``starter_values``,
``AlgorithmSpec.starter_sections``): this module knows no plugin. The training budget is one a
first run finishes, the specs' or from a small table of well-known environments
(:data:`KNOWN_ENVIRONMENTS`), which also gives their kind of actions.
"""

from __future__ import annotations

import re
import textwrap
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined, to_jsonable_python

from agile_cli.errors import AgileError, UsageError
from agile_cli.host.registry import TOURNAMENT, AlgorithmEntry, EnvironmentEntry, Registry
from agile_cli.models.base import Spec, StarterValue, suggest
from agile_cli.models.mutation import KIND_FIELDS, MutationProbabilities, MutationSpec
from agile_cli.validation import training_spec_for

#: Width the description comments are wrapped at (plus their indentation).
WIDTH = 92
#: Words of a description that mark a field accepted for compatibility, or ignored.
_IGNORED = re.compile(r"for compatibility|\bignored\b|leave it out", re.IGNORECASE)
#: A warning's field path: ``training.evaluation_interval: ignored ...``.
_WARNED_PATH = re.compile(r"^([\w.]+):")
#: Starter values that differ from a field's default, and why.
_POPULATION = 4
_POPULATION_NOTE = "(default 1; a starter evolves a population of 4)"
_PLACEHOLDER = "Placeholder, replace it: "


@dataclass(frozen=True)
class KnownEnvironment:
    """What a starter knows of an environment id without building it.

    :param actions: the kind of its action space (``Discrete``, ``Box``); None for several
        agents, each with its own.
    :param max_steps: steps per member a first run trains for.
    :param target_score: a good score, where a first run may stop early; None: none known.
    """

    actions: str | None
    max_steps: int
    target_score: float | None = None


#: Well-known environments, known without importing their package (Gymnasium costs seconds
#: and builds the environment to tell its spaces). Targets are Gymnasium's reward thresholds;
#: Pendulum has none, so -200, as configs/training/td3/pendulum.yaml. Budgets are the shipped
#: configs' (CartPole, Pendulum, speaker-listener; LunarLander reached 200 at 250,000 steps
#: per member), else a first guess.
KNOWN_ENVIRONMENTS = {
    "CartPole-v1": KnownEnvironment("Discrete", 100_000, 475),
    "Acrobot-v1": KnownEnvironment("Discrete", 100_000, -100),
    "MountainCar-v0": KnownEnvironment("Discrete", 200_000, -110),
    "LunarLander-v3": KnownEnvironment("Discrete", 300_000, 200),
    "Pendulum-v1": KnownEnvironment("Box", 50_000, -200),
    "MountainCarContinuous-v0": KnownEnvironment("Box", 100_000, 90),
    "LunarLanderContinuous-v3": KnownEnvironment("Box", 300_000, 200),
    "mpe2.simple_speaker_listener_v4": KnownEnvironment(None, 100_000),
}
#: Steps per member of a first run on an environment not in the table.
MODEST_STEPS = 100_000


@dataclass(frozen=True)
class Doubt:
    """An environment named for an algorithm whose own starter environment acts in another
    kind of action space: only building a member tells whether the algorithm takes both
    (``agile init`` builds one before writing the starter).

    :param actions: the kind of the named environment's actions.
    :param usual: the algorithm's own starter environment, and ``usual_actions`` its kind.
    """

    environment: str
    actions: str
    usual: str
    usual_actions: str

    def fitting(self) -> list[str]:
        """The known environments with the usual kind of actions, the usual one first."""
        return [self.usual] + [
            name
            for name, known in KNOWN_ENVIRONMENTS.items()
            if known.actions == self.usual_actions and name != self.usual
        ]


@dataclass
class Entry:
    """One key of the written manifest: a value (or child keys) and the comment above it.

    :param value: what is written after the key (ignored when ``children`` is set).
    :param active: False writes the key commented out.
    :param example: a commented alternative written after the key (``# e.g. ...``).
    """

    key: str
    value: Any = None
    comment: str = ""
    children: list[Entry] | None = None
    active: bool = True
    example: str | None = None


@dataclass
class Starter:
    """A starter manifest: its sections, the comment lines on top, and what it needs."""

    sections: list[Entry]
    header: list[str]
    notes: list[str] = field(default_factory=list)
    doubt: Doubt | None = None

    def text(self) -> str:
        lines = [f"# {line}" if line else "#" for line in self.header]
        for section in self.sections:
            lines += ["", *_render(section, 0, commented=False)]
        return "\n".join(lines) + "\n"


def starter_manifest(registry: Registry, algorithm: str, environment: str | None = None) -> Starter:
    """The starter manifest of ``algorithm`` on ``environment`` (default: one its family suits).

    :raises UsageError: for an unregistered algorithm (with the closest name), or one no
        installed plugin can train or build environments for.
    """
    entry = _algorithm(registry, algorithm)
    builder = registry.environment_for(entry.family)
    if builder is None:
        raise UsageError(
            f"no installed plugin builds environments for {entry.family} algorithms like "
            f"{entry.name}",
            "install the plugin that provides them",
        )
    contributed = _contributed(registry, entry, builder.spec)
    usual = _usual_name(contributed, builder)
    values, notes = _starter_values(contributed, environment, usual, builder.name)
    named = Entry("name", entry.name, "Algorithm name (case-sensitive).")
    algorithm_fields = [named, *_fields(entry.spec, values.get("algorithm", {}), notes)]
    sections = [
        Entry("algorithm", comment=_summary(entry.spec), children=algorithm_fields),
        _environment(registry, entry, values.get("environment", {}), notes),
        _section("training", training_spec_for(entry, registry), values, notes),
        _mutation(entry),
        _selection(registry),
    ]
    if (network := registry.section_spec(entry, "network")) is not None:
        sections.insert(3, _section("network", network, values, notes))
    if (replay := registry.section_spec(entry, "replay_buffer")) is not None:
        sections.append(_section("replay_buffer", replay, values, notes))
    name = values["environment"]["name"]
    starter = Starter(sections, _header(entry, name, builder.name, environment is None))
    starter.doubt = _doubt(usual, environment)
    _settle(starter, registry)
    return starter


def _doubt(usual: str, environment: str | None) -> Doubt | None:
    """A :class:`Doubt` when ``environment`` and the algorithm's ``usual`` one are both known
    and act in different kinds of action spaces."""
    named = KNOWN_ENVIRONMENTS.get(environment or "")
    own = KNOWN_ENVIRONMENTS.get(usual)
    if environment is None or named is None or own is None:
        return None
    if named.actions is None or own.actions is None or named.actions == own.actions:
        return None
    return Doubt(environment, named.actions, usual, own.actions)


def _algorithm(registry: Registry, name: str) -> AlgorithmEntry:
    entry = registry.algorithms.get(name)
    if entry is None:
        known = sorted(registry.algorithms)
        close = suggest(name, known)
        listing = "registered: " + (", ".join(known) or "none (install an algorithm plugin)")
        raise UsageError(
            f"unknown algorithm '{name}'", f"did you mean '{close}'?" if close else listing
        )
    missing = registry.missing_paradigm(entry)
    if missing is not None:
        raise UsageError(missing, "install the plugin that registers it")
    return entry


def _header(entry: AlgorithmEntry, environment: str, builder: str, chosen: bool) -> list[str]:
    """The comment lines on top: what this is, which environment, what to do next."""
    where = f"Environment: {environment} (builder {builder})"
    if chosen:
        where += f", a default for this family; name another: `agile init {entry.name} ENV`."
    paragraphs = [
        f"Starter manifest of {entry.name} ({entry.family} algorithm of the plugin "
        f"'{entry.plugin}'), written by `agile init`. Every field is at its default (pop_size "
        "and the training budget aside) under its description; commented-out lines are "
        "alternatives, or fields accepted only for compatibility.",
        where,
        "Values marked 'Placeholder' stand for your own files or model: replace them.",
        "Check: agile validate FILE (add --check-env to build the environment); then agile "
        "train FILE.",
    ]
    return [line for text in paragraphs for line in textwrap.wrap(text, WIDTH)]


def _summary(spec: type[BaseModel]) -> str:
    """The first paragraph of a spec's docstring, on one line."""
    doc = (spec.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(doc.split())


# -- values the specs contribute ---------------------------------------------------------------


def _contributed(
    registry: Registry, entry: AlgorithmEntry, environment: type[Spec]
) -> dict[str, dict[str, StarterValue]]:
    """What the specs ask ``agile init`` to write (``section -> field -> value``): each
    section's spec's ``starter_values``, then the algorithm's for other sections
    (``starter_sections``) and its ``starter_environment``."""
    spec = entry.spec
    own: dict[str, type[Spec]] = {
        "algorithm": spec,
        "environment": environment,
        "training": training_spec_for(entry, registry),
    }
    for section in ("network", "replay_buffer"):
        if (model := registry.section_spec(entry, section)) is not None:
            own[section] = model
    contributed = {section: dict(model.starter_values) for section, model in own.items()}
    for section, fields in spec.starter_sections().items():
        contributed.setdefault(section, {}).update(fields)
    if spec.starter_environment is not None:
        contributed["environment"]["name"] = StarterValue(spec.starter_environment)
    return contributed


def _usual_name(contributed: dict[str, dict[str, StarterValue]], builder: EnvironmentEntry) -> str:
    """The environment a starter names when none is given: the one the specs give, else the
    builder spec's default name, else the builder's name (a placeholder)."""
    given = contributed["environment"].get("name")
    if given is not None:
        return str(given.value)
    default = builder.spec.model_fields["name"].default
    return default if isinstance(default, str) else builder.name


def _starter_values(
    contributed: dict[str, dict[str, StarterValue]],
    environment: str | None,
    usual: str,
    builder: str,
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Starter values (``section -> field -> value``) that differ from the defaults, and the
    notes explaining them (``section.field -> note``): what the specs contribute, the
    environment (``usual`` unless one is named) and a first run's budget."""
    notes: dict[str, str] = {"training.pop_size": _POPULATION_NOTE}
    values: dict[str, dict[str, Any]] = {"training": {"pop_size": _POPULATION}}
    for section, fields in contributed.items():
        for name, starter in fields.items():
            values.setdefault(section, {})[name] = starter.value
            note = _PLACEHOLDER + starter.note if starter.placeholder else starter.note
            if note:
                notes[f"{section}.{name}"] = note
    name = values.setdefault("environment", {})["name"] = environment or usual
    if environment is None and usual == builder and "name" not in contributed["environment"]:
        notes["environment.name"] = _PLACEHOLDER + "an environment the builder knows"
    _budget(contributed["training"].get("max_steps"), name, values["training"], notes)
    return values, notes


def _budget(
    budget: StarterValue | None, environment: str, training: dict[str, Any], notes: dict[str, str]
) -> None:
    """A budget a first run finishes (the default, 1,000,000 steps per member, takes hours):
    the one the specs give, else the known environment's, else a modest one to raise; and the
    environment's target score where it has one."""
    known = KNOWN_ENVIRONMENTS.get(environment)
    default = "(default 1,000,000; "
    if budget is not None:
        training["max_steps"] = budget.value
        what = budget.note or "a first run's budget"
        notes["training.max_steps"] = f"{default}{what}: raise it for a full run)"
    elif known is not None:
        training["max_steps"] = known.max_steps
        notes["training.max_steps"] = (
            f"{default}a first run's budget on {environment}: raise it for a longer run)"
        )
    else:
        training["max_steps"] = MODEST_STEPS
        notes["training.max_steps"] = (
            f"{default}a modest first budget: agile has no figures for {environment}, so "
            "raise it, and set target_score, once a first run shows what it needs)"
        )
    if known is not None and known.target_score is not None:
        training["target_score"] = known.target_score
        notes["training.target_score"] = (
            f"(default null; a good score on {environment}: the run stops early once the best "
            "member reaches it)"
        )


# -- sections -----------------------------------------------------------------------------------


def _section(
    key: str,
    spec: type[BaseModel],
    values: Mapping[str, Mapping[str, Any]],
    notes: Mapping[str, str],
) -> Entry:
    children = _fields(spec, values.get(key, {}), notes, prefix=key)
    return Entry(key, comment=_summary(spec), children=children)


def _environment(
    registry: Registry, entry: AlgorithmEntry, values: Mapping[str, Any], notes: Mapping[str, str]
) -> Entry:
    builders = registry.builders_for(entry.family)
    spec = registry.environments[builders[0]].spec
    builder = Entry(
        "builder",
        builders[0],
        f"Environment builder; omitted: the default for {entry.family} ({builders[0]}). "
        f"Installed: {', '.join(builders)}.",
        active=False,
    )
    children = [builder, *_fields(spec, values, notes, prefix="environment")]
    return Entry("environment", comment=_summary(spec), children=children)


def _fields(
    spec: type[BaseModel],
    values: Mapping[str, Any],
    notes: Mapping[str, str],
    prefix: str = "algorithm",
) -> list[Entry]:
    """An entry per field of ``spec``: the starter's value, else the default; nested specs
    expanded."""
    entries = []
    for name, info in spec.model_fields.items():
        note = notes.get(f"{prefix}.{name}", "")
        comment = "\n".join(filter(None, [info.description or "", note]))
        if name in values:
            entries.append(Entry(name, values[name], comment))
            continue
        entries.append(_default_entry(name, info, comment))
    return entries


def _default_entry(name: str, info: FieldInfo, comment: str) -> Entry:
    default = info.get_default(call_default_factory=True, validated_data={})
    if default is PydanticUndefined:
        return Entry(name, None, f"{comment}\n{_PLACEHOLDER}required, fill it in".strip())
    active = not _IGNORED.search(info.description or "")
    if isinstance(default, BaseModel):
        return Entry(name, comment=comment, children=_instance_fields(default), active=active)
    return Entry(name, default, comment, active=active, example=_example(info, default))


def _instance_fields(instance: BaseModel) -> list[Entry]:
    entries = []
    for name, info in type(instance).model_fields.items():
        value = getattr(instance, name)
        comment = info.description or ""
        active = not _IGNORED.search(comment)
        if isinstance(value, BaseModel):
            children = _instance_fields(value)
            entries.append(Entry(name, comment=comment, children=children, active=active))
        else:
            example = _example(info, value)
            entries.append(Entry(name, value, comment, active=active, example=example))
    return entries


def _example(info: FieldInfo, value: Any) -> str | None:
    """For a null field that takes one kind of spec: that spec's defaults, as an example."""
    if value is not None:
        return None
    models = [
        arg
        for arg in typing.get_args(info.annotation)
        if isinstance(arg, type) and issubclass(arg, BaseModel)
    ]
    if len(models) != 1:
        return None
    try:
        instance = models[0].model_validate({})
    except (ValueError, AgileError):
        return None
    return "e.g. " + _flow(instance.model_dump(mode="json"))


def _mutation(entry: AlgorithmEntry) -> Entry:
    kinds = entry.spec.mutation_kinds
    weights = []
    for item in _instance_fields(MutationProbabilities()):
        kind = KIND_FIELDS.get(item.key)
        if kind is not None and kind not in kinds:
            item.value = 0.0
            item.comment += f" ({entry.name} has no {kind} mutation.)"
        weights.append(item)
    fields = MutationSpec.model_fields
    children = [
        Entry("probabilities", comment=fields["probabilities"].description or "", children=weights),
        Entry("rl_hp_selection", comment=_hp_comment(entry), children=_hp_entries(entry)),
        *(
            Entry(name, fields[name].default, fields[name].description or "")
            for name in ("mutation_sd", "rand_seed")
        ),
    ]
    return Entry("mutation", comment=_summary(MutationSpec), children=children)


def _hp_comment(entry: AlgorithmEntry) -> str:
    return (
        f"Hyperparameters to mutate, each within [min, max]: {entry.name}'s default set "
        "(ranges as agile derives them when this is empty); the others its spec allows are "
        "commented out. Keys: min, max, grow_factor, shrink_factor."
    )


def _hp_entries(entry: AlgorithmEntry) -> list[Entry]:
    spec = entry.spec
    entries = []
    for name in spec.mutable_hyperparameters:
        info = spec.model_fields[name]
        default = info.get_default(call_default_factory=True, validated_data={})
        if not isinstance(default, int | float):
            continue
        bounds = hyperparameter_bounds(info, default)
        entries.append(
            Entry(name, bounds, info.description or "", active=name in spec.default_mutable)
        )
    return entries


def hyperparameter_bounds(info: FieldInfo, value: float) -> dict[str, float]:
    """The range ``agile train`` mutates ``value`` within when ``rl_hp_selection`` is empty
    (:func:`agile_cli.evolution.mutation.hyperparameter_ranges`), kept inside the field's own
    bounds: integers ``[value // 4, value * 4]``, floats ``[value / 10, value * 10]``."""
    low, high = _field_bounds(info)
    start: float
    stop: float
    if info.annotation is int:
        start, stop = max(1, int(value) // 4), max(int(value) * 4, 4)
        grow, shrink = 1.5, 0.75
    else:
        start, stop = (value / 10, value * 10) if value > 0 else (0.0, 1.0)
        grow, shrink = 1.2, 0.8
    start, stop = _round(_clip(start, low, high)), _round(_clip(stop, low, high))
    return {"min": min(start, value), "max": max(stop, value), "grow_factor": grow,
            "shrink_factor": shrink}  # fmt: skip


def _round(value: float) -> float:
    """``value`` to six significant digits (``5e-07``, not ``5.000000000000001e-07``)."""
    return value if isinstance(value, int) else float(f"{value:.6g}")


def _field_bounds(info: FieldInfo) -> tuple[float | None, float | None]:
    low = high = None
    for item in info.metadata:
        for attribute in ("ge", "gt"):
            bound = getattr(item, attribute, None)
            if isinstance(bound, int | float):
                low = bound
        for attribute in ("le", "lt"):
            bound = getattr(item, attribute, None)
            if isinstance(bound, int | float):
                high = bound
    return low, high


def _clip(value: float, low: float | None, high: float | None) -> float:
    if low is not None and value < low:
        value = low
    if high is not None and value > high:
        value = high
    return value


def _selection(registry: Registry) -> Entry:
    strategies = ", ".join(sorted(registry.selections))
    children = _instance_fields(TOURNAMENT.spec.model_validate({}))
    for item in children:
        if item.key == "strategy":
            item.comment += f" Registered: {strategies} (each with its own keys)."
    return Entry("tournament_selection", comment=_summary(TOURNAMENT.spec), children=children)


# -- validation ----------------------------------------------------------------------------------


def _settle(starter: Starter, registry: Registry, rounds: int = 5) -> None:
    """Comment out each written field validation warns about, until none is left; record
    in ``starter.notes`` what still stops the manifest from validating cleanly."""
    from agile_cli.loader import load_text
    from agile_cli.manifest import TrainingManifest

    for _ in range(rounds):
        try:
            data = load_text(starter.text(), source="starter")
            manifest = TrainingManifest.get_validated(data, registry=registry)
        except AgileError as error:
            starter.notes = [f"does not validate as written: {line}" for line in error.lines()]
            return
        warned = [_warned_entry(starter, warning) for warning in manifest.warnings]
        if not any(warned):
            starter.notes = [f"validation warns: {warning}" for warning in manifest.warnings]
            return
        for item in warned:
            if item is not None:
                item.active = False


def _warned_entry(starter: Starter, warning: str) -> Entry | None:
    """The active entry a warning names by its path, if the starter wrote it."""
    match = _WARNED_PATH.match(warning)
    if match is None:
        return None
    entries, found = starter.sections, None
    for part in match.group(1).split("."):
        found = next((e for e in entries if e.key == part and e.active), None)
        if found is None:
            return None
        entries = found.children or []
    return found


# -- rendering ----------------------------------------------------------------------------------


def _render(entry: Entry, indent: int, *, commented: bool) -> list[str]:
    """The lines of ``entry`` at ``indent``; commented out when it or a parent is inactive."""
    pad = " " * indent
    off = commented or not entry.active
    mark = "# " if off else ""
    lines = [f"{pad}# {line}" for line in _wrapped(entry.comment, indent)]
    if entry.children is None:
        lines.append(f"{pad}{mark}{entry.key}: {_flow(entry.value)}")
        if entry.example is not None:
            lines += [f"{pad}#   {line}" for line in _wrapped(entry.example, indent + 4)]
        return lines
    if not any(child.active for child in entry.children) and not off:
        lines.append(f"{pad}{entry.key}: {{}}")
        for child in entry.children:
            lines += _render(child, indent + 2, commented=True)
        return lines
    lines.append(f"{pad}{mark}{entry.key}:")
    for child in entry.children:
        lines += _render(child, indent + 2, commented=off)
    return lines


def _wrapped(text: str, indent: int) -> list[str]:
    """``text`` wrapped to the width left at ``indent``; each line of it a paragraph."""
    width = max(40, WIDTH - indent)
    return [line for part in text.split("\n") for line in textwrap.wrap(part, width)]


def _flow(value: Any) -> str:
    """A value as one line of YAML (flow style for lists and mappings)."""
    plain = to_jsonable_python(value)
    text: str = yaml.safe_dump(plain, default_flow_style=True, sort_keys=False, width=10_000)
    return text.removesuffix("\n...\n").strip()
