"""The JSON Schema of the manifest, assembled from the core specs and registered plugins."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, create_model
from pydantic.json_schema import models_json_schema

from agile_cli.errors import UsageError
from agile_cli.host.registry import AlgorithmEntry, EnvironmentEntry, Registry
from agile_cli.models.base import alias_names, suggest
from agile_cli.models.mutation import MutationSpec
from agile_cli.models.recipe import RecipeSpec
from agile_cli.validation import training_spec_for

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def manifest_schema(registry: Registry, algorithm: str | None = None) -> dict[str, Any]:
    """A JSON Schema accepting exactly the manifests ``agile validate`` accepts (structurally).

    :param algorithm: restrict to one registered algorithm.
    """
    entries = _entries(registry, algorithm)
    spellings = {entry.name: _names(registry, entry) for entry in entries}
    named = {entry.name: _named_spec(entry, spellings[entry.name]) for entry in entries}
    builders = {
        name: _builder_spec(registry.environments[name])
        for entry in entries
        for name in registry.builders_for(entry.family)
    }
    networks = _section_specs(registry, entries, "network")
    replays = _section_specs(registry, entries, "replay_buffer")
    trainings = {entry.name: training_spec_for(entry, registry) for entry in entries}
    selections = [registry.selections[name].spec for name in sorted(registry.selections)]
    models = [
        *named.values(),
        *builders.values(),
        *networks,
        *dict.fromkeys(trainings.values()),
        MutationSpec,
        *selections,
        *replays,
        RecipeSpec,
    ]
    refs, definitions = models_json_schema(
        [(model, "validation") for model in models], ref_template="#/$defs/{model}"
    )

    def ref(model: type) -> dict[str, Any]:
        return refs[(model, "validation")]

    _add_spellings(models, ref, definitions.get("$defs", {}))

    def one_of(items: list[dict[str, Any]]) -> dict[str, Any]:
        return items[0] if len(items) == 1 else {"oneOf": items}

    properties: dict[str, Any] = {
        "algorithm": one_of([ref(model) for model in named.values()]),
        "environment": _any_of([ref(spec) for spec in builders.values()] or [{"type": "object"}]),
        "training": _any_of([ref(model) for model in dict.fromkeys(trainings.values())]),
        "network": _any_of([ref(model) for model in networks] or [{"type": "object"}]),
        "mutation": ref(MutationSpec),
        "tournament_selection": one_of([ref(spec) for spec in selections]),
        "selection_strategy": one_of([ref(spec) for spec in selections]),
        "replay_buffer": _any_of([ref(model) for model in replays] or [{"type": "object"}]),
        "recipe": ref(RecipeSpec),
    }
    return {
        "$schema": DRAFT,
        "title": "agile training manifest",
        "type": "object",
        "required": ["algorithm", "environment"],
        "additionalProperties": False,
        "properties": properties,
        "allOf": [
            *_per_family_rules(entries, spellings, registry, builders, trainings, ref),
            *_alias_rules(entries, registry),
        ],
        "$defs": definitions.get("$defs", {}),
    }


def _add_spellings(models: list[type[BaseModel]], ref: Any, definitions: dict[str, Any]) -> None:
    """Each field's other spellings (``env_config`` for ``config``, say) as properties of the
    same schema, since validation accepts them."""
    for model in models:
        name = ref(model)["$ref"].rsplit("/", 1)[-1]
        properties = definitions.get(name, {}).get("properties", {})
        for field_name, field in model.model_fields.items():
            spellings = alias_names(field.validation_alias)
            shown = next((key for key in [*spellings, field_name] if key in properties), None)
            for spelling in spellings if shown is not None else []:
                properties.setdefault(spelling, properties[shown])


def _any_of(items: list[dict[str, Any]]) -> dict[str, Any]:
    return items[0] if len(items) == 1 else {"anyOf": items}


def _entries(registry: Registry, algorithm: str | None) -> list[AlgorithmEntry]:
    if algorithm is None:
        return [registry.algorithms[name] for name in sorted(registry.algorithms)]
    found = registry.resolve_algorithm(algorithm)
    if found is None:
        close = suggest(algorithm, [*registry.algorithms, *registry.algorithm_aliases])
        raise UsageError(
            f"unknown algorithm '{algorithm}'",
            f"did you mean '{close}'?" if close else "see `agile plugins`",
        )
    return [found[0]]


def _names(registry: Registry, entry: AlgorithmEntry) -> list[str]:
    """Every spelling of ``entry``'s name a manifest may use: its own, then its aliases."""
    aliases = registry.algorithm_aliases.values()
    return [entry.name, *(alias.name for alias in aliases if alias.canonical == entry.name)]


def _named_spec(entry: AlgorithmEntry, names: list[str]) -> type:
    """The algorithm's spec with its ``name`` field, as it appears in a manifest."""
    name: Any = Literal[tuple(names)]  # a type built at run time
    described = "Algorithm name (case-sensitive)"
    if len(names) > 1:
        described += f"; {', '.join(repr(n) for n in names[1:])} also name it"
    return create_model(
        f"{entry.name}Algorithm",
        __base__=entry.spec,
        __doc__=entry.spec.__doc__,
        name=(name, Field(description=described + ".")),
    )


def _builder_spec(entry: EnvironmentEntry) -> type:
    """The builder's spec with the optional ``builder`` key that selects it."""
    builder: Any = Literal[entry.name] | None  # a type built at run time
    return create_model(
        f"{entry.name.title().replace('_', '')}Environment",
        __base__=entry.spec,
        __doc__=entry.spec.__doc__,
        builder=(
            builder,
            Field(None, description="Environment builder; omitted: the family's default."),
        ),
    )


def _per_family_rules(
    entries: list[AlgorithmEntry],
    spellings: dict[str, list[str]],
    registry: Registry,
    builders: dict[str, type],
    trainings: dict[str, type],
    ref: Any,
) -> list[dict[str, Any]]:
    """if algorithm.name is one of these (``spellings``: each algorithm's name and aliases),
    then environment, training and network use these specs."""
    rules = []
    for entry in entries:
        names = registry.builders_for(entry.family)
        then: dict[str, Any] = {"training": ref(trainings[entry.name])}
        for section in ("network", "replay_buffer"):
            if (spec := registry.section_spec(entry, section)) is not None:
                then[section] = ref(spec)
        if names:
            then["environment"] = _any_of([ref(builders[name]) for name in names])
        rules.append(
            {
                "if": _algorithm_is(spellings[entry.name]),
                "then": {"properties": then},
            }
        )
    return rules


def _alias_rules(entries: list[AlgorithmEntry], registry: Registry) -> list[dict[str, Any]]:
    """An alias that implies fields (``Recurrent PPO``: ``recurrent: true``) admits only
    those values for them, as ``agile validate`` does."""
    wanted = {entry.name for entry in entries}
    return [
        {
            "if": _algorithm_is([alias.name]),
            "then": {
                "properties": {
                    "algorithm": {
                        "properties": {key: {"const": v} for key, v in alias.implies.items()}
                    }
                }
            },
        }
        for alias in registry.algorithm_aliases.values()
        if alias.canonical in wanted and alias.implies
    ]


def _algorithm_is(names: list[str]) -> dict[str, Any]:
    name = {"const": names[0]} if len(names) == 1 else {"enum": names}
    return {
        "properties": {"algorithm": {"properties": {"name": name}}},
        "required": ["algorithm"],
    }


def _section_specs(registry: Registry, entries: list[AlgorithmEntry], section: str) -> list[type]:
    """The specs the algorithms' ``section`` (``network``, ``replay_buffer``) is validated
    against, each once."""
    found = (registry.section_spec(entry, section) for entry in entries)
    return list(dict.fromkeys(spec for spec in found if spec is not None))
