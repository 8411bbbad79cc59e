"""The base class of every spec, and the translation of Pydantic errors into field errors."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

from agile_cli.errors import FieldError


class Spec(BaseModel):
    """Base of every manifest section and plugin spec.

    Unknown keys are rejected, aliases and field names are both accepted, and assignments are
    validated. Every field must carry a ``description`` (it feeds ``agile schema`` and the docs).
    """

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        validate_assignment=True,
        use_attribute_docstrings=False,
        # Build validators on first use: `agile validate` loads every plugin's specs but
        # validates against only a few of them.
        defer_build=True,
    )

    @classmethod
    def known_keys(cls) -> list[str]:
        """Every key this spec accepts: field names and their aliases."""
        keys: list[str] = []
        for name, field in cls.model_fields.items():
            keys.append(name)
            keys.extend(_alias_names(field.validation_alias))
        return keys


def _alias_names(alias: Any) -> list[str]:
    if alias is None:
        return []
    if isinstance(alias, str):
        return [alias]
    choices = getattr(alias, "choices", None)
    if choices is not None:
        return [choice for choice in choices if isinstance(choice, str)]
    return []


def located_error(field: str, message: str, hint: str | None = None) -> PydanticCustomError:
    """An error to raise from a model validator that belongs to one field of the model.

    :param field: the field's key, or a dotted path below the model.
    :param message: what is wrong.
    :param hint: how to fix it.
    """
    safe = message.replace("{", "{{").replace("}", "}}")
    return PydanticCustomError("agile_field", safe, {"field": field, "hint": hint})


def reject_both_spellings(data: Any, spellings: tuple[str, str]) -> None:
    """Refuse a mapping that gives a field under both of its names."""
    if isinstance(data, Mapping) and all(name in data for name in spellings):
        first, second = spellings
        raise located_error(
            second, f"given together with '{first}', its other spelling", "keep only one"
        )


def suggest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``word``, if one is close enough to be a likely typo."""
    candidates = list(candidates)
    lowered = {candidate.lower(): candidate for candidate in candidates}
    if word.lower() in lowered:
        return lowered[word.lower()]
    matches = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return matches[0] if matches else None


def dotted(loc: Iterable[str | int]) -> str:
    """``("training", "evo_steps")`` -> ``training.evo_steps``; list indices as ``[i]``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def field_errors(error: ValidationError, model: type[BaseModel]) -> list[FieldError]:
    """Turn a Pydantic error on ``model`` into field errors with paths relative to it."""
    return [_one_error(detail, model) for detail in error.errors(include_url=False)]


def _one_error(detail: Mapping[str, Any], model: type[BaseModel]) -> FieldError:
    loc = [part for part in detail["loc"] if not _is_union_tag(part)]
    kind = detail["type"]
    if kind == "agile_field":
        parts = detail["ctx"]["field"].split(".")
        loc.extend(int(part) if part.isdigit() else part for part in parts)
        return FieldError(dotted(loc), str(detail["msg"]), detail["ctx"]["hint"])
    value = detail.get("input")
    if kind == "extra_forbidden":
        return _unknown_key(loc, model)
    if kind == "missing":
        return FieldError(dotted(loc), "required field is missing", "add it")
    message = _clean_message(str(detail["msg"]))
    hint = None if isinstance(value, Mapping | list) else f"got {value!r}"
    return FieldError(dotted(loc), message, hint)


def _is_union_tag(part: str | int) -> bool:
    # Pydantic puts the chosen member of a tagged union into the location; our tags are "<...>".
    return isinstance(part, str) and part.startswith("<")


def _clean_message(message: str) -> str:
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    return message[:1].lower() + message[1:] if message else message


def _unknown_key(loc: list[str | int], model: type[BaseModel]) -> FieldError:
    key = str(loc[-1])
    known = _keys_at(model, loc[:-1])
    close = suggest(key, known) if known else None
    if close:
        hint = f"did you mean '{close}'?"
    elif known:
        hint = "valid keys: " + ", ".join(sorted(known))
    else:
        hint = "remove it"
    return FieldError(dotted(loc), "unknown field", hint)


def _keys_at(model: type[BaseModel], loc: list[str | int]) -> list[str]:
    """The keys accepted at ``loc`` inside ``model`` (best effort; empty if unknown)."""
    annotation: Any = model
    for part in loc:
        annotation = _descend(annotation, part)
        if annotation is None:
            return []
    models = [m for m in _model_types(annotation)]
    keys: list[str] = []
    for member in models:
        keys.extend(member.known_keys() if issubclass(member, Spec) else member.model_fields)
    return sorted(set(keys))


def _descend(annotation: Any, part: str | int) -> Any:
    for member in _model_types(annotation):
        fields = member.model_fields
        if isinstance(part, str) and part in fields:
            return fields[part].annotation
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (dict, Mapping) and len(args) == 2:
        return args[1]
    if origin in (list, tuple) and args:
        return args[0]
    if origin in (Union, types.UnionType):
        for arg in args:
            found = _descend(arg, part)
            if found is not None:
                return found
    return None


def _model_types(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_types(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        found: list[type[BaseModel]] = []
        for arg in typing.get_args(annotation):
            found.extend(_model_types(arg))
        return found
    return []
