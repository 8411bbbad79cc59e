"""Validating a manifest mapping section by section, collecting every error with its path."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError, create_model

from agile_cli.errors import FieldError, ManifestError
from agile_cli.host.deferred import UnloadableError
from agile_cli.host.registry import (
    TOURNAMENT,
    AlgorithmAlias,
    AlgorithmEntry,
    ParadigmEntry,
    Registry,
    usable,
)
from agile_cli.models.algorithm import AlgorithmSpec, EnvironmentSpec
from agile_cli.models.base import Spec, alias_names, field_errors, suggest
from agile_cli.models.mutation import KIND_FIELDS, MutationSpec
from agile_cli.models.recipe import RecipeSpec
from agile_cli.models.selection import SelectionSpec
from agile_cli.models.training import TrainingSpec

M = TypeVar("M", bound=BaseModel)
_S = TypeVar("_S", bound=Spec)

SECTIONS = (
    "algorithm",
    "environment",
    "training",
    "network",
    "mutation",
    "tournament_selection",
    "replay_buffer",
    "recipe",
)
SELECTION_ALIAS = "selection_strategy"
#: The reference format's version key (its two spellings) and the version agile reads.
API_VERSION_KEYS = ("apiVersion", "api_version")
API_VERSION = "agilerl.com/v1"

PARADIGM_HINT = (
    "install (or, under AGILE_PLUGINS, also name) the plugin that registers it; "
    "`paradigms` registers agile's on- and off-policy ones"
)

# ``training`` keys of the format agile is compatible with that no installed plugin may read
# (its LLM fine-tuning options): a manifest keeps validating with them, and is told they are
# ignored.
FORMAT_TRAINING_KEYS = ("evaluation_interval", "num_epochs", "max_wall_seconds")
#: A value of :data:`REFERENCE_KEYS` meaning "whatever is written": the key does nothing in the
#: reference either (a label, a flag its builders drop).
ANY_VALUE = object()
# Keys agilerl 2.58 writes out, by section, that a section whose spec does not declare them
# reads as agile does anyway at the value given here (it keeps optimizer state, scores greedily,
# scales pixels to [0, 1], has no LLM rollout engines): a manifest may carry them silently, and
# another value is ignored with a warning.
REFERENCE_KEYS: dict[str, dict[str, Any]] = {
    "algorithm": {"normalize_images": True},
    "training": {
        "checkpoint_optimizer": True,
        "eval_samples_per_task": 0,
        "eval_greedy": True,
        "rollout_engines_per_agent": 0,
        "reuse_prefix_cache_across_syncs": False,
        "training_gpus_per_agent": 1,
        "rollout_mode": "colocated",
    },
    "network": {"has_evolvable_encoder": ANY_VALUE, "squash_output": False},
    "replay_buffer": {"kind": "classic", "name": ANY_VALUE},
}


@dataclass(frozen=True)
class Resolution:
    """A manifest mapping resolved against the registry: each section validated by its spec,
    and what the registry decided (the algorithm's name and paradigm, the environment builder).

    :param sections: section name -> validated spec (None for an omitted optional section).
    :param default_builder: the builder is the family's default (a manifest need not name it).
    :param warnings: valid but probably not what the author meant.
    """

    sections: dict[str, Any]
    algorithm_name: str
    paradigm: ParadigmEntry
    environment_builder: str | None
    default_builder: bool
    warnings: tuple[str, ...]


class _Collector:
    """Validates sections one by one, keeping every error instead of stopping at the first."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []
        self.warnings: list[str] = []
        self.builder: str | None = None

    def incomplete(self, data: Mapping[str, Any], sections: Mapping[str, Any]) -> bool:
        """Whether a section the manifest gives could not be read at all."""
        given = [name for name in SECTIONS if data.get(name) is not None]
        if data.get(SELECTION_ALIAS) is not None:
            given.append("tournament_selection")
        return any(sections.get(name) is None for name in given)

    def add(self, path: str, message: str, hint: str | None = None) -> None:
        self.errors.append(FieldError(path, message, hint))

    def unloadable(self, path: str, error: UnloadableError) -> None:
        """A part the manifest needs, of a plugin that cannot load it."""
        self.add(path, f"plugin '{error.plugin}' failed to load: {error.message}", error.hint)

    def section(self, path: str, model: type[M], raw: Any) -> M | None:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            self.add(path, f"must be a mapping, not {type(raw).__name__}")
            return None
        try:
            return model.model_validate(dict(raw))
        except ValidationError as exc:
            self.errors.extend(error.under(path) for error in field_errors(exc, model))
            unknown = {
                error["loc"][0]
                for error in exc.errors()
                if error["type"] == "extra_forbidden" and len(error["loc"]) == 1
            }
        return self._without(path, model, raw, unknown) if unknown else None

    def _without(
        self, path: str, model: type[M], raw: Mapping[str, Any], keys: set[Any]
    ) -> M | None:
        """The section read again without its unknown top-level ``keys``, so that what else is
        wrong with it shows in the same pass (errors already reported are not repeated)."""
        try:
            return model.model_validate({k: v for k, v in raw.items() if k not in keys})
        except ValidationError as exc:
            for error in field_errors(exc, model):
                if error.under(path) not in self.errors:
                    self.errors.append(error.under(path))
            return None


def validate_mapping(
    data: Mapping[str, Any], registry: Registry, source: str | None = None
) -> Resolution:
    """Validate a parsed manifest against the core specs and the registered plugins.

    :raises ManifestError: listing every problem found, each with its dotted path.
    """
    check = _Collector()
    _check_top_level(data, check)
    data = _folded_network_bounds(data, check)
    entry = _algorithm_entry(data.get("algorithm"), registry, check)
    algorithm: AlgorithmSpec | None = None
    environment: EnvironmentSpec | None = None
    if entry is not None:
        raw = _algorithm_fields(data["algorithm"], registry)
        raw = _without_reference_keys("algorithm", raw, entry.spec, check)
        algorithm = check.section("algorithm", entry.spec, raw)
        environment = _environment(data.get("environment"), entry, registry, check)
    elif "environment" in data and not isinstance(data["environment"], Mapping | str):
        check.add("environment", "must be a mapping or a name")
    training = _training(data.get("training"), entry, registry, check)
    network = _paradigm_section("network", data, entry, registry, check)
    mutation = _optional(check, "mutation", MutationSpec, data)
    selection = _selection(data, registry, check)
    replay = _paradigm_section("replay_buffer", data, entry, registry, check)
    if entry is not None and mutation is not None:
        mutation = _canonical_hp_names(mutation, entry.spec, check)
        _check_hp_selection(mutation, entry, algorithm, check)
        mutation = _check_mutation_kinds(mutation, entry, check)
    if selection is not None and training is not None:
        selection = _check_selection(selection, training, _selection_key(data), check)
    recipe = _recipe(data, entry, algorithm, training, network, registry, check)
    if None in (entry, algorithm, environment, training):
        raise ManifestError(check.errors, source=source)
    assert entry is not None and training is not None and algorithm is not None
    if training.evo_steps is None:
        evo_steps = min(entry.spec.default_evo_steps, training.max_steps)
        training = training.model_copy(update={"evo_steps": evo_steps})
    paradigm = registry.paradigm(entry.family)
    network = _resolved(algorithm, "network", network)
    mutation = _resolved(algorithm, "mutation", mutation)
    replay = _resolved(algorithm, "replay_buffer", replay)
    sections = dict(zip(SECTIONS, (algorithm, environment, training, network, mutation,
                                   selection, replay, recipe), strict=True))  # fmt: skip
    resolution = Resolution(
        sections=sections,
        algorithm_name=entry.name,
        paradigm=paradigm,
        environment_builder=check.builder,
        default_builder=check.builder == registry.builders_for(entry.family)[0],
        warnings=tuple(check.warnings),
    )
    if check.errors:
        error = ManifestError(check.errors, source=source)
        # every section given was read (its unknown keys aside): the rules across sections
        # can still be checked, so that one pass reports every problem of the file
        error.resolution = None if check.incomplete(data, sections) else resolution
        raise error
    return resolution


def _resolved(algorithm: AlgorithmSpec, name: str, section: _S | None) -> _S | None:
    """``section`` with what follows from ``algorithm`` filled in (see
    :meth:`~agile_cli.AlgorithmSpec.resolve_section`)."""
    if section is None:
        return None
    resolved = algorithm.resolve_section(name, section)
    assert isinstance(resolved, type(section)), f"{name} resolves to a section of its own type"
    return resolved


def _check_top_level(data: Mapping[str, Any], check: _Collector) -> None:
    known = (*SECTIONS, SELECTION_ALIAS, *API_VERSION_KEYS)
    _check_api_version(data, check)
    for key in data:
        if key not in known:
            close = suggest(str(key), known)
            hint = f"did you mean '{close}'?" if close else "valid sections: " + ", ".join(SECTIONS)
            check.add(str(key), "unknown section", hint)
    if SELECTION_ALIAS in data and "tournament_selection" in data:
        check.add(
            SELECTION_ALIAS,
            "given together with 'tournament_selection', its other spelling",
            "keep only one",
        )
    for required in ("algorithm", "environment"):
        if data.get(required) is None:
            check.add(required, "required section is missing", _EXAMPLES[required])


def _check_api_version(data: Mapping[str, Any], check: _Collector) -> None:
    """The reference's ``apiVersion`` (2.58 writes it out): the one version of its format
    agile reads, given once."""
    given = [key for key in API_VERSION_KEYS if key in data]
    if len(given) == 2:
        check.add("api_version", "given together with 'apiVersion', its other spelling",
                  "keep only one")  # fmt: skip
    for key in given:
        if data[key] != API_VERSION:
            check.add(key, f"{data[key]!r} is not a version agile reads",
                      f"write {key}: {API_VERSION}, or leave it out")  # fmt: skip


_EXAMPLES = {
    "algorithm": "e.g. algorithm: {name: DQN}",
    "environment": "e.g. environment: {name: CartPole-v1}",
}


def _algorithm_entry(raw: Any, registry: Registry, check: _Collector) -> AlgorithmEntry | None:
    if raw is None:
        return None
    names = sorted(registry.algorithms)
    if not isinstance(raw, Mapping):
        check.add("algorithm", f"must be a mapping, not {type(raw).__name__}", "e.g. {name: DQN}")
        return None
    name = raw.get("name")
    if name is None:
        check.add("algorithm.name", "required field is missing", "one of: " + ", ".join(names))
        return None
    found = registry.resolve_algorithm(name) if isinstance(name, str) else None
    if found is None:
        aliases = registry.algorithm_aliases
        close = suggest(str(name), [*names, *aliases])
        close = aliases[close].canonical if close in aliases else close
        hint = f"did you mean '{close}'?" if close else None
        listing = "installed: " + ", ".join(names) if names else "no algorithm plugin is installed"
        check.add("algorithm.name", f"unknown algorithm {name!r}", hint or listing)
        return None
    entry, alias = found
    missing = registry.missing_paradigm(entry)
    if missing is not None:
        check.add("algorithm.name", missing, PARADIGM_HINT)
        return None
    # the specs it needs, imported here the first time when named by reference
    failure = _failure(lambda: (entry.spec, registry.paradigm(entry.family).training))
    if failure is not None:
        check.unloadable("algorithm.name", failure)
        return None
    if alias is not None:
        _check_alias(alias, raw, check)
    return entry


def _check_alias(alias: AlgorithmAlias, raw: Mapping[str, Any], check: _Collector) -> None:
    """A name written as one of an algorithm's aliases: a warning naming the canonical
    spelling, and an error for a field given against what the alias implies."""
    implied = ", ".join(f"{key}: {_yaml(value)}" for key, value in alias.implies.items())
    meaning = f"{alias.canonical} with {implied}" if implied else alias.canonical
    for key, value in alias.implies.items():
        if key in raw and raw[key] != value:
            check.add(
                f"algorithm.{key}",
                f"{_yaml(raw[key])} contradicts algorithm.name '{alias.name}' ({meaning})",
                f"write name: {alias.canonical} to keep {key}: {_yaml(raw[key])}, or remove {key}",
            )
    spelling = ", ".join([f"name: {alias.canonical}", *([implied] if implied else [])])
    check.warnings.append(
        f"algorithm.name: '{alias.name}' is read as {meaning}; write {spelling} "
        "(the run folder's manifest.yaml says so)"
    )


def _yaml(value: Any) -> str:
    """A scalar as a manifest writes it (``true``, ``null``, ``3``)."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return str(value)


def _algorithm_fields(raw: Mapping[str, Any], registry: Registry) -> dict[str, Any]:
    """The algorithm section less its name, with the fields an alias of the name implies
    (a field the manifest gives wins; `_check_alias` refuses one that disagrees)."""
    fields = {key: value for key, value in raw.items() if key != "name"}
    name = raw.get("name")
    found = registry.resolve_algorithm(name) if isinstance(name, str) else None
    alias = found[1] if found is not None else None
    return fields if alias is None else {**alias.implies, **fields}


def _environment(raw: Any, entry: AlgorithmEntry, registry: Registry, check: _Collector) -> Any:
    if raw is None:
        return None
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, Mapping):
        check.add("environment", f"must be a mapping, not {type(raw).__name__}")
        return None
    raw = dict(raw)
    name = raw.pop("builder", None)
    builder = registry.environment_for(entry.family, name)
    if builder is None:
        able = registry.builders_for(entry.family)
        if name is None or not able:
            check.add(
                "environment",
                f"no installed plugin builds environments for {entry.family} algorithms "
                f"like {entry.name}",
                "install the plugin that provides them",
            )
        else:
            close = suggest(str(name), able)
            hint = f"did you mean '{close}'?" if close else "available: " + ", ".join(able)
            check.add("environment.builder", f"no builder '{name}' for {entry.name}", hint)
        return None
    try:
        builder_spec = builder.spec
    except UnloadableError as error:
        check.unloadable("environment" if name is None else "environment.builder", error)
        return None
    spec = check.section("environment", builder_spec, _tagged(raw, entry.spec.environment_tags))
    if spec is not None:
        check.builder = builder.name
        check.warnings.extend(spec.manifest_warnings())
    return spec


def _tagged(raw: dict[str, Any], tags: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` with what the algorithm fills into an environment section that names no other
    kind (:attr:`~agile_cli.AlgorithmSpec.environment_tags`), as the reference does."""
    kind = tags.get("env_type")
    if kind is None or raw.get("env_type") not in (None, kind):
        return raw
    return {**raw, **{key: value for key, value in tags.items() if raw.get(key) is None}}


def training_spec_for(entry: AlgorithmEntry | None, registry: Registry) -> type[TrainingSpec]:
    """The spec of the ``training`` section for ``entry``'s manifests (``<name>Training``): the
    core fields, the algorithm's, its paradigm's and every installed backend's (but those of
    a backend whose plugin cannot load them: :func:`_unloadable_backends`)."""
    parts: list[type[TrainingSpec]] = []
    if entry is not None:
        if entry.spec.training_spec is not None:
            parts.append(entry.spec.training_spec)
        paradigm = registry.paradigms.get(entry.family)  # None: validate reports it missing
        if paradigm is not None:
            parts.append(paradigm.training)
    backends = usable(registry.backends.values(), lambda backend: backend.training)
    parts += [backend.training for backend in backends if backend.training is not None]
    name = f"{entry.name}Training" if entry is not None else "Training"
    return _combined(name, tuple(parts))


def _unloadable_backends(registry: Registry) -> list[UnloadableError]:
    """Why the ``training`` fields of some backends are not accepted: their plugin cannot load
    them."""
    failures = []
    for backend in registry.backends.values():
        try:
            _ = backend.training
        except UnloadableError as error:
            failures.append(error)
    return failures


def _failure(load: Callable[[], object]) -> UnloadableError | None:
    """What ``load()`` raised when a plugin could not load a part it registered; None when it
    loaded."""
    try:
        load()
    except UnloadableError as error:
        return error
    return None


@functools.cache
def _combined(name: str, parts: tuple[type[TrainingSpec], ...]) -> type[TrainingSpec]:
    # A part another part already extends adds nothing (and would upset the MRO).
    extended = {part for part in parts if any(o is not part and issubclass(o, part) for o in parts)}
    bases = tuple(dict.fromkeys(p for p in parts if p is not TrainingSpec and p not in extended))
    if not bases:
        return TrainingSpec
    model: type[TrainingSpec] = create_model(name, __base__=bases, __doc__=TrainingSpec.__doc__)
    return model


def _training(
    raw: Any, entry: AlgorithmEntry | None, registry: Registry, check: _Collector
) -> TrainingSpec | None:
    """The training section, less keys other algorithms read (ignored, with a warning; with
    no known algorithm, silently: its name is the error to fix first)."""
    spec = training_spec_for(entry, registry)
    for error in _unloadable_backends(registry):
        check.warnings.append(
            f"training: plugin '{error.plugin}' failed to load: {error.message}; "
            "the fields it adds are not accepted"
        )
    if isinstance(raw, Mapping):
        raw = _without_reference_keys("training", raw, spec, check)
        unknown = set(raw) - _keys_of(spec)
        # only then are the other algorithms' specs worth importing
        elsewhere = _training_keys_elsewhere(registry) if unknown else set()
        ignored = [key for key in raw if key in unknown & elsewhere]
        if entry is not None:
            for key in ignored:
                check.warnings.append(f"training.{key}: ignored, {entry.name} does not read it")
        raw = {key: value for key, value in raw.items() if key not in ignored}
    return check.section("training", spec, raw)


def _without_reference_keys(
    section: str, raw: Any, spec: type[BaseModel], check: _Collector
) -> Any:
    """``raw`` less the keys of :data:`REFERENCE_KEYS` that ``spec`` does not declare: silently
    at the value that means what agile does, with a warning at another."""
    inert = REFERENCE_KEYS.get(section, {})
    if not isinstance(raw, Mapping) or not inert.keys() & raw.keys():
        return raw
    known = _keys_of(spec)
    kept = {}
    for key, value in raw.items():
        if key in known or key not in inert:
            kept[key] = value
        elif inert[key] is not ANY_VALUE and value != inert[key]:
            check.warnings.append(
                f"{section}.{key}: ignored, agile does not read it here (it acts as "
                f"{key}: {_yaml(inert[key])})"
            )
    return kept


def _folded_network_bounds(data: Mapping[str, Any], check: _Collector) -> Mapping[str, Any]:
    """The reference's ``mutation.network`` architecture bounds moved onto the network section
    they bound, as 2.58 does: its latent bounds, ``encoder`` into ``encoder_config`` and
    ``head_net`` into ``head_config``, what the network section writes itself winning."""
    mutation = data.get("mutation")
    if not isinstance(mutation, Mapping) or mutation.get("network") is None:
        return data
    bounds = mutation["network"]
    network = data.get("network") or {}
    if not isinstance(bounds, Mapping) or not isinstance(network, Mapping):
        if not isinstance(bounds, Mapping):
            check.add("mutation.network", f"must be a mapping, not {type(bounds).__name__}")
        return {**data, "mutation": {k: v for k, v in mutation.items() if k != "network"}}
    folded = dict(network)
    for key in ("min_latent_dim", "max_latent_dim"):
        if key in bounds:
            folded.setdefault(key, bounds[key])
    for source, target in (("encoder", "encoder_config"), ("head_net", "head_config")):
        part, own = bounds.get(source), folded.get(target)
        if part is not None and not isinstance(part, Mapping):
            check.add(f"mutation.network.{source}", f"must be a mapping, not {type(part).__name__}",
                      f"e.g. {source}: {{max_hidden_layers: 3}}")  # fmt: skip
        elif part is not None and (own is None or isinstance(own, Mapping)):
            folded[target] = {**part, **(own or {})}  # else network.{target}'s own error shows
    for key in set(bounds) - {"min_latent_dim", "max_latent_dim", "encoder", "head_net"}:
        check.add(f"mutation.network.{key}", "unknown field",
                  "valid keys: min_latent_dim, max_latent_dim, encoder, head_net")  # fmt: skip
    rest = {key: value for key, value in mutation.items() if key != "network"}
    return {**data, "network": folded, "mutation": rest}


def _keys_of(spec: type[BaseModel]) -> set[str]:
    """Every spelling of a spec's fields."""
    keys = set(spec.model_fields)
    for field in spec.model_fields.values():
        alias = field.validation_alias
        keys.update(getattr(alias, "choices", ()) if alias is not None else ())
    return {key for key in keys if isinstance(key, str)}


def _training_keys_elsewhere(registry: Registry) -> set[str]:
    """The ``training`` keys some paradigm or algorithm reads (those of broken plugins left
    out: their keys are unknown, as if the plugins were not installed)."""
    paradigms = usable(registry.paradigms.values(), lambda paradigm: paradigm.training)
    algorithms = usable(registry.algorithms.values(), lambda algorithm: algorithm.spec)
    specs = [paradigm.training for paradigm in paradigms]
    specs += [a.spec.training_spec for a in algorithms if a.spec.training_spec is not None]
    return set(FORMAT_TRAINING_KEYS).union(*(_keys_of(spec) for spec in specs))


def _recipe(
    data: Mapping[str, Any],
    entry: AlgorithmEntry | None,
    algorithm: AlgorithmSpec | None,
    training: TrainingSpec | None,
    network: Spec | None,
    registry: Registry,
    check: _Collector,
) -> RecipeSpec | None:
    """The recipe section: it retrains one member without evolution, on values its
    algorithm's section would take and architectures within the network section's bounds
    (``algorithm``, ``training``, ``network``: the validated sections, None where invalid)."""
    recipe = _optional(check, "recipe", RecipeSpec, data)
    if recipe is None:
        return None
    if training is not None and training.pop_size != 1:
        check.add("training.pop_size", f"is {training.pop_size}; a recipe retrains one member",
                  "set training.pop_size: 1 (agile recipe writes it so)")  # fmt: skip
    for section in ("mutation", "tournament_selection", SELECTION_ALIAS):
        if data.get(section) is not None:
            check.add(section, "a recipe replays its schedule instead of evolving",
                      f"remove the {section} section")  # fmt: skip
    if entry is None:
        return recipe
    raw = _algorithm_fields(data["algorithm"], registry)
    recipe = _schedule_values(recipe, entry, raw, check)
    paradigm = registry.paradigm(entry.family)
    _check_schedule_architectures(recipe, entry, paradigm, network, algorithm, check)
    return recipe


def _schedule_values(
    recipe: RecipeSpec, entry: AlgorithmEntry, raw: Mapping[str, Any], check: _Collector
) -> RecipeSpec:
    """Each hyperparameter of the schedule as the algorithm section takes it: one the members
    can change, of its field's type, within its bounds, through the spec's validators.

    :returns: the recipe with the values as the spec reads them (``1e3`` for an integer: 1000).
    """
    mutable = set(entry.spec.mutable_hyperparameters)
    said: dict[tuple[tuple[str, type, Any], ...], tuple[dict[str, Any], list[FieldError]]] = {}
    steps = []
    for position, step in enumerate(recipe.schedule):
        path = f"recipe.schedule[{position}].hyperparameters"
        for name in step.hyperparameters:
            if name not in mutable:
                check.add(
                    f"{path}.{name}",
                    f"not a hyperparameter {entry.name}'s members can change",
                    "they can change: " + ", ".join(sorted(mutable)),
                )
        values = {k: v for k, v in step.hyperparameters.items() if k in mutable}
        key = tuple((name, type(value), value) for name, value in sorted(values.items()))
        if key not in said:  # lineages repeat their values from one generation to the next
            said[key] = _read_values(entry.spec, raw, values)
        read, errors = said[key]
        check.errors.extend(error.under(path) for error in errors)
        steps.append(step.model_copy(update={"hyperparameters": read}))
    return recipe.model_copy(update={"schedule": steps})


def _read_values(
    spec: type[AlgorithmSpec], raw: Mapping[str, Any], values: dict[str, Any]
) -> tuple[dict[str, Any], list[FieldError]]:
    """``values`` as the algorithm section ``raw`` with them in place reads them, or what it
    says of them (errors of its other fields are the section's own, reported there)."""
    if not values:
        return values, []
    try:
        section = spec.model_validate({**raw, **values})
    except ValidationError as exc:
        errors = field_errors(exc, spec)
        return values, [error for error in errors if error.path.partition(".")[0] in values]
    return {name: getattr(section, name) for name in values}, []


def _check_schedule_architectures(
    recipe: RecipeSpec,
    entry: AlgorithmEntry,
    paradigm: ParadigmEntry,
    network: Spec | None,
    algorithm: AlgorithmSpec | None,
    check: _Collector,
) -> None:
    """Each architecture of the schedule as the paradigm's check takes it, against the
    validated network and algorithm sections (None where invalid: their own errors come
    first)."""
    for position, step in enumerate(recipe.schedule):
        if step.architecture is None:
            continue
        path = f"recipe.schedule[{position}].architecture"
        if paradigm.check_architecture is None:
            check.add(
                path,
                f"{entry.name}'s members cannot adopt an architecture from a recipe",
                "remove the architecture entries to replay the hyperparameters alone",
            )
        elif network is not None and algorithm is not None:
            try:
                paradigm.check_architecture(step.architecture, network, algorithm)
            except ValueError as exc:
                check.add(path, str(exc), _ARCHITECTURE_HINT)


_ARCHITECTURE_HINT = "give the architecture agile recipe wrote, within the network section's bounds"


def _optional(check: _Collector, key: str, model: type[M], data: Mapping[str, Any]) -> M | None:
    raw = data.get(key)
    return None if raw is None else check.section(key, model, raw)


def _selection(
    data: Mapping[str, Any], registry: Registry, check: _Collector
) -> SelectionSpec | None:
    """The selection section, validated by the spec of the strategy it names."""
    key = _selection_key(data)
    raw = data.get(key)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        check.add(key, f"must be a mapping, not {type(raw).__name__}")
        return None
    name = raw.get("strategy", TOURNAMENT.name)
    entry = registry.selections.get(name) if isinstance(name, str) else None
    if entry is None:
        known = sorted(registry.selections)
        close = suggest(str(name), known)
        hint = f"did you mean '{close}'?" if close else "registered: " + ", ".join(known)
        check.add(f"{key}.strategy", f"unknown selection strategy {name!r}", hint)
        return None
    try:
        spec = entry.spec
    except UnloadableError as error:
        check.unloadable(f"{key}.strategy", error)
        return None
    return check.section(key, spec, raw)


def _selection_key(data: Mapping[str, Any]) -> str:
    return SELECTION_ALIAS if SELECTION_ALIAS in data else "tournament_selection"


def _check_selection(
    selection: SelectionSpec, training: TrainingSpec, key: str, check: _Collector
) -> SelectionSpec:
    """The selection section against the population; with its population-dependent
    defaults filled in when it fits."""
    errors = selection.check_training(training, key)
    check.errors.extend(errors)
    return selection if errors else selection.resolved(training)


def _canonical_hp_names(
    mutation: MutationSpec, spec: type[AlgorithmSpec], check: _Collector
) -> MutationSpec:
    """``rl_hp_selection`` with a key that is another spelling of a mutable field (LLMPPO's
    ``lr`` for ``lr_actor``, as 2.58 reads it) renamed to the field."""
    spellings = {alias: name for name in spec.mutable_hyperparameters
                 for alias in alias_names(spec.model_fields[name].validation_alias)
                 if alias != name}  # fmt: skip
    renamed = {spellings.get(key, key): bounds for key, bounds in mutation.rl_hp_selection.items()}
    if len(renamed) < len(mutation.rl_hp_selection):
        both = sorted(key for key in mutation.rl_hp_selection if key in spellings)
        check.add(f"mutation.rl_hp_selection.{both[0]}", "given together with "
                  f"'{spellings[both[0]]}', its other spelling", "keep only one")  # fmt: skip
    if renamed == mutation.rl_hp_selection:
        return mutation
    return mutation.model_copy(update={"rl_hp_selection": renamed})


def _check_hp_selection(
    mutation: MutationSpec,
    entry: AlgorithmEntry,
    algorithm: AlgorithmSpec | None,
    check: _Collector,
) -> None:
    valid = entry.spec.mutable_hyperparameters
    for name, bounds in mutation.rl_hp_selection.items():
        path = f"mutation.rl_hp_selection.{name}"
        if name not in valid:
            close = suggest(name, valid)
            hint = (f"did you mean '{close}'? " if close else "") + "mutable: " + ", ".join(valid)
            check.add(path, f"{entry.name} has no mutable hyperparameter '{name}'", hint)
            continue
        field = entry.spec.model_fields[name]
        typed: Any = (  # a type built at run time
            Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
        )
        adapter: TypeAdapter[Any] = TypeAdapter(typed)
        for end in ("min", "max"):
            try:
                adapter.validate_python(getattr(bounds, end))
            except ValidationError as exc:
                for error in field_errors(exc, BaseModel):
                    check.add(f"{path}.{end}", error.message, f"{name} itself must allow it")
        written = algorithm is not None and name in algorithm.model_fields_set
        initial = getattr(algorithm, name) if algorithm is not None else field.default
        if isinstance(initial, int | float) and not bounds.min <= initial <= bounds.max:
            which = f"algorithm.{name}" if written else f"the default {name}"
            check.warnings.append(
                f"{path}: {which} ({initial}) lies outside "
                f"[{bounds.min}, {bounds.max}]; the first mutation clips it into range"
            )


def _check_mutation_kinds(
    mutation: MutationSpec, entry: AlgorithmEntry, check: _Collector
) -> MutationSpec:
    """Refuses a weight written for a kind of mutation the algorithm's members cannot
    undergo; returns ``mutation`` with the defaults of those kinds resolved to 0."""
    kinds = entry.spec.mutation_kinds
    probabilities = mutation.probabilities
    zeroed = {key: 0.0 for key, kind in KIND_FIELDS.items() if kind not in kinds}
    for key, kind in KIND_FIELDS.items():
        value = getattr(probabilities, key)
        if kind in kinds or key not in probabilities.model_fields_set or value == 0:
            continue
        able = ", ".join(k for k in ("architecture", "parameters", "activation", "rl_hp")
                         if k in kinds) or "none"  # fmt: skip
        check.add(
            f"mutation.probabilities.{key}",
            f"{entry.name} has no {kind} mutation (its members mutate: {able})",
            "set it to 0 or remove it (left out, it counts as 0)",
        )
    if not zeroed:
        return mutation
    resolved = probabilities.model_copy(update=zeroed)
    return mutation.model_copy(update={"probabilities": resolved})


def _paradigm_section(
    name: str,
    data: Mapping[str, Any],
    entry: AlgorithmEntry | None,
    registry: Registry,
    check: _Collector,
) -> Spec | None:
    """A section the algorithm's paradigm adds (``network``, ``replay_buffer``), validated
    against its spec and filled with defaults when left out; None, with a warning if the
    manifest gives it, where the paradigm adds no such section."""
    if entry is None:
        return None
    try:
        spec = registry.section_spec(entry, name)
    except UnloadableError as failure:
        check.unloadable(name, failure)
        return None
    if spec is None:
        if data.get(name) is not None:
            said = f"{name}: ignored, {entry.name} ({entry.family}) takes no {name} section"
            check.warnings.append(said)
        return None
    raw = _without_reference_keys(name, data.get(name), spec, check)
    section = check.section(name, spec, raw)
    if section is not None:
        for error in section.algorithm_errors(name, entry.name, entry.spec, _installed(registry)):
            check.add(error.path, error.message, error.hint)
    return section


def _installed(registry: Registry) -> Callable[[], dict[str, type[AlgorithmSpec]]]:
    """Every usable installed algorithm's spec by name, asked for only to write a hint."""
    return lambda: {e.name: e.spec for e in usable(registry.algorithms.values(), lambda e: e.spec)}
