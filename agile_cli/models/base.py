"""The base class of every spec, and the translation of Pydantic errors into field errors."""

from __future__ import annotations

import difflib
import enum
import numbers
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, ClassVar, Union

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from agile_cli.errors import FieldError

#: ``json_schema_extra`` of a field agilerl 2.58's manifest format has no place for: ``agile
#: validate --reference`` leaves it out (with a note where it is not at its default).
AGILE_ONLY: dict[str, Any] = {"agile_only": True}


@dataclass(frozen=True)
class StarterValue:
    """What ``agile init`` writes for one field of a starter manifest instead of its default.

    :param value: the value written.
    :param note: why, a comment line under the field's description.
    :param placeholder: the value stands for the user's own (a data file, a model): the note
        then begins by saying to replace it.
    """

    value: Any
    note: str = ""
    placeholder: bool = False


class Spec(BaseModel):
    """Base of every manifest section and plugin spec.

    Unknown keys are rejected, aliases and field names are both accepted, and a validated spec
    is frozen (``model_copy(update=...)`` makes a changed copy). Every field must carry a
    ``description`` (it feeds ``agile schema`` and the docs).

    Types are strict: a boolean is not a number, and a string is neither a number nor a
    boolean. What YAML, JSON and Python callers cannot write otherwise is accepted: an integral
    float (``1e6``) for an integer, an integer for a float, numpy numbers, a list for a tuple
    (and a tuple for a list), an enum's value for the enum, and a string for a path.

    ``starter_values`` maps fields of the spec's own section to what ``agile init`` writes for
    them instead of their defaults (a placeholder data file, a first run's budget).
    """

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        # A validated section is a value: a run, a member or a checkpoint holding one cannot
        # change it under the others (``model_copy(update=...)`` makes a changed copy).
        frozen=True,
        strict=True,
        # No field of a manifest means infinity or "not a number": ``lr: .inf`` or
        # ``target_score: .nan`` is a mistake that would otherwise surface deep in training.
        allow_inf_nan=False,
        use_attribute_docstrings=False,
        # Build validators on first use: `agile validate` loads every plugin's specs but
        # validates against only a few of them.
        defer_build=True,
    )

    starter_values: ClassVar[Mapping[str, StarterValue]] = {}

    @field_validator("*", mode="before")
    @classmethod
    def _plain_values(cls, value: Any, info: ValidationInfo) -> Any:
        """Give strict validation the value it wants where the input could not write it so."""
        field = cls.model_fields.get(info.field_name or "")
        return value if field is None else _loosen(value, field.annotation)

    def algorithm_errors(
        self, section: str, algorithm: str, spec: type[Any], installed: Callable[[], dict[str, Any]]
    ) -> list[Any]:
        """For a section an algorithm's paradigm declared (``network``, ``replay_buffer``):
        what this section asks of the algorithm ``algorithm`` (whose spec class is ``spec``)
        that it cannot give, as :class:`~agile_cli.FieldError` s with paths from the manifest's
        root (``section`` is this one's name); ``installed()`` gives every installed
        algorithm's spec class by name, for a hint. None by default."""
        return []

    @classmethod
    def known_keys(cls) -> list[str]:
        """Every key this spec accepts: field names and their aliases."""
        keys: list[str] = []
        for name, field in cls.model_fields.items():
            keys.append(name)
            keys.extend(alias_names(field.validation_alias))
        return keys


def numeric_type(annotation: Any) -> type | None:
    """``int`` or ``float`` for a field of that type, or of that type or None (a mutable
    hyperparameter that may be switched off, like recurrent PPO's ``max_seq_len``); None for
    any other field."""
    for kind in (int, float):
        if annotation is kind or annotation == kind | None:
            return kind
    return None


def _loosen(value: Any, annotation: Any) -> Any:
    """``value`` as strict validation of ``annotation`` takes it, where a caller could not
    write it so (see :class:`Spec`); anything else is left for validation to refuse."""
    if typing.get_origin(annotation) is not None:
        return _loosen_generic(value, typing.get_origin(annotation), typing.get_args(annotation))
    if isinstance(value, bool) or not isinstance(annotation, type):
        return value
    if annotation is int:
        return _as_int(value)
    if annotation is float:
        return _as_float(value)
    if issubclass(annotation, enum.Enum) and not isinstance(value, annotation):
        try:
            return annotation(value)
        except (ValueError, TypeError):
            return value
    if issubclass(annotation, PurePath) and isinstance(value, str):
        return annotation(value)
    return value


def _loosen_generic(value: Any, origin: Any, args: tuple[Any, ...]) -> Any:
    if origin is typing.Annotated:
        return _loosen(value, args[0])
    if origin in (Union, types.UnionType):
        return _loosen_union(value, args)
    if origin is list and args and isinstance(value, list | tuple):
        return [_loosen(item, args[0]) for item in value]
    if origin is tuple and isinstance(value, list | tuple):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_loosen(item, args[0]) for item in value)
        if len(args) == len(value):
            return tuple(_loosen(item, arg) for item, arg in zip(value, args, strict=True))
        return tuple(value)
    if origin is dict and len(args) == 2 and isinstance(value, dict):
        return {key: _loosen(item, args[1]) for key, item in value.items()}
    return value


def _loosen_union(value: Any, args: tuple[Any, ...]) -> Any:
    """The first member's loosening that changes ``value``, unless a member takes it as is."""
    members = [arg for arg in args if arg is not type(None)]
    if value is None or any(type(value) is member for member in members):
        return value
    for member in members:
        loosened = _loosen(value, member)
        if loosened is not value:
            return loosened
    return value


def _as_int(value: Any) -> Any:
    if type(value) is int:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)  # numpy integers
    if isinstance(value, numbers.Real) and float(value).is_integer():
        real: Any = value  # typeshed's numbers.Real has neither abs() < int nor int()
        if abs(real) < 2**63:
            return int(real)  # 1e6, 4.0: YAML and JSON write large integers so
    return value


def _as_float(value: Any) -> Any:
    if type(value) in (int, float):
        return value
    if isinstance(value, numbers.Real):
        return float(value)  # numpy numbers
    return value


def alias_names(alias: Any) -> list[str]:
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
    """Turn a Pydantic error on ``model`` into field errors with paths relative to it; the
    members of a union that all refused a value become one error."""
    errors: list[FieldError] = []
    for detail in error.errors(include_url=False):
        _add_merged(errors, _one_error(detail, model))
    return errors


def _add_merged(errors: list[FieldError], new: FieldError) -> None:
    """Append ``new``, or fold it into an error of the same path: ``expected a string or a
    list, got an integer``."""
    for index, old in enumerate(errors):
        if old.path != new.path:
            continue
        if old.message == new.message:
            return
        ours, _, got = old.message.rpartition(", got ")
        theirs, _, also = new.message.rpartition(", got ")
        if ours.startswith("expected ") and theirs.startswith("expected ") and got == also:
            merged = f"{ours} or {theirs.removeprefix('expected ')}, got {got}"
            errors[index] = FieldError(old.path, merged, old.hint)
            return
    errors.append(new)


def _one_error(detail: Mapping[str, Any], model: type[BaseModel]) -> FieldError:
    loc = _without_union_tags(detail["loc"], model)
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
    wanted = _wanted(kind, model, loc)
    if wanted is not None:
        return FieldError(dotted(loc), f"expected {wanted}, got {_kind_of(value)}", _got(value))
    message = _clean_message(str(detail["msg"]))
    hint = None if isinstance(value, Mapping | list) else f"got {value!r}"
    return FieldError(dotted(loc), message, hint)


#: What the errors of strict validation expected, in words.
_EXPECTED = {
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def _wanted(kind: str, model: type[BaseModel], loc: list[str | int]) -> str | None:
    if kind in _EXPECTED:
        return _EXPECTED[kind]
    if kind not in ("is_instance_of", "enum"):
        return None
    annotation: Any = model
    for part in loc:
        annotation = _descend(annotation, part)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(repr(member.value) for member in annotation)
    if isinstance(annotation, type) and issubclass(annotation, PurePath):
        return "a path"
    return None


def _kind_of(value: Any) -> str:
    """What ``value`` is, in the manifest's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number" if value.is_integer() else "a number with a fractional part"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return f"a value of type {type(value).__name__}"


_BOOLEAN_WORDS = ("true", "false", "yes", "no", "on", "off")


def _got(value: Any) -> str | None:
    if value is None or isinstance(value, Mapping | list | tuple):
        return None
    if isinstance(value, str) and value.strip().lower() in _BOOLEAN_WORDS:
        return f"got {value!r}; write true or false without quotes"
    if isinstance(value, str) and _is_number(value):
        return f"got {value!r}; write the number without quotes"
    return f"got {value!r}"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _without_union_tags(loc: Iterable[str | int], model: type[BaseModel]) -> list[str | int]:
    """``loc`` without the names Pydantic gives union members: ``<mlp>`` for our tagged
    unions, and the member's type (``str``, ``tuple[...]``) after a field of a plain union."""
    kept: list[str | int] = []
    annotation: Any = model
    tag_next = False
    for part in loc:
        if tag_next and isinstance(part, str):
            annotation, tag_next = None, False  # the member tried; which one, not worth finding
            continue
        if _is_union_tag(part):
            continue
        kept.append(part)
        annotation = None if annotation is None else _descend(annotation, part)
        tag_next = _is_plain_union(annotation)
    return kept


def _is_plain_union(annotation: Any) -> bool:
    if typing.get_origin(annotation) not in (Union, types.UnionType):
        return False
    return len([arg for arg in typing.get_args(annotation) if arg is not type(None)]) > 1


def _is_union_tag(part: str | int) -> bool:
    # Pydantic puts the chosen member of a tagged union into the location; our tags are "<...>".
    return isinstance(part, str) and part.startswith("<")


def _clean_message(message: str) -> str:
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    return message[:1].lower() + message[1:] if message else message


#: Keys other RL libraries and papers use for what agile calls otherwise (Stable-Baselines3
#: writes ``learning_rate``, ``buffer_size``, ``n_epochs``, ``clip_range``, ``total_timesteps``;
#: ``discount`` is the textbook word for gamma). An unknown key's hint names those of the
#: spellings its section has, before the closest-looking key (``learning_rate`` looks most like
#: ``learn_step``, which is not what it means).
SYNONYMS: dict[str, tuple[str, ...]] = {
    "learning_rate": ("lr", "lr_actor", "lr_critic"),
    "discount": ("gamma",),
    "discount_factor": ("gamma",),
    "buffer_size": ("max_size",),
    "n_epochs": ("update_epochs",),
    "clip_range": ("clip_coef",),
    "total_timesteps": ("max_steps",),
}


def synonyms(key: str, known: Iterable[str]) -> list[str]:
    """The keys of ``known`` that mean what ``key`` means elsewhere (see :data:`SYNONYMS`)."""
    present = set(known)
    return [name for name in SYNONYMS.get(key.lower(), ()) if name in present]


def _unknown_key(loc: list[str | int], model: type[BaseModel]) -> FieldError:
    key = str(loc[-1])
    known = _keys_at(model, loc[:-1])
    meant = synonyms(key, known)
    close = suggest(key, known) if known else None
    if close == key:  # a key of another choice of the section (another encoder's field, say)
        message = "not a field of this choice (another choice of the section has it)"
        return FieldError(dotted(loc), message, "fix the choice, e.g. the arch, or remove it")
    if meant:
        hint = "did you mean " + " or ".join(f"'{name}'" for name in meant) + "?"
    elif close:
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
