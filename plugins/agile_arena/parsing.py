"""What Arena's replies say: error bodies, the NDJSON events of a streamed reply, and checks that
a reply has the shape its endpoint documents (§2.7 of the reference).

Nothing here sends a request. Messages that would show an internal service URL are replaced
by :data:`GENERIC_FAILURE`. A reply of the wrong shape raises :class:`ReplyShapeError`, whose
message says what was wrong without quoting values. JSON is read with :func:`load_json`, which
refuses what nests deeper than :data:`MAX_JSON_DEPTH` (:class:`TooDeep`) instead of letting it
reach code that recurses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

GENERIC_FAILURE = "Something went wrong. Please try again later."
MAX_JSON_DEPTH = 64  # levels of arrays and objects; Arena's replies use fewer than ten

_INTERNAL_URL = re.compile(r"https?://[^\s/.:]+(?::\d+)?/api/v\d+/", re.IGNORECASE)
_TEXT_KEYS = ("description", "message", "detail", "error")
_NOT_FOUND_KEYS = ("error", "message", "detail", "description")
_NOT_EXTRAS = frozenset({*_TEXT_KEYS, "error_code", "status", "status_code"})


@dataclass(frozen=True)
class StreamEvent:
    """One line of a streamed progress reply (validation, submission).

    :param kind: ``status``, ``warning``, ``check``, or ``log`` for lines that are not events.
    :param stage: e.g. ``upload``, ``validation``, ``submission``.
    :param status: ``started``, ``running``, ``completed``, ``failed``, ...
    :param message: the human-readable line (the raw text for ``log`` lines).
    :param level: ``info``, ``secondary-info`` or ``error``, when given.
    :param detail: the structured payload, when given.
    :param error: True for a ``failed`` status or warning: the call will raise.
    """

    kind: str
    stage: str
    status: str
    message: str
    level: str | None = None
    detail: dict[str, Any] | None = None
    error: bool = False

    @property
    def extras(self) -> dict[str, Any]:
        """The detail fields worth showing with an error."""
        return {k: v for k, v in (self.detail or {}).items() if k != "error_code" and v}


@dataclass(frozen=True)
class ErrorBody:
    detail: str
    extras: dict[str, Any]
    hint: str | None = None
    environment_missing: bool = False


class TooDeep(Exception):
    """JSON text whose arrays and objects nest deeper than :data:`MAX_JSON_DEPTH` levels."""

    def __init__(self) -> None:
        super().__init__(f"nests too deeply (more than {MAX_JSON_DEPTH} levels)")


def load_json(text: str | bytes) -> Any:
    """``json.loads`` for what a server sent: ValueError when it is not JSON, TooDeep when it
    nests too deeply (Python's decoder would raise RecursionError, and so would code that
    walks the value)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise TooDeep() from None
    if _deeper_than(value, MAX_JSON_DEPTH):
        raise TooDeep()
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` has more than ``limit`` levels of lists and dicts (walked without
    recursion)."""
    pending = [(value, 0)] if isinstance(value, dict | list) else []
    while pending:
        item, depth = pending.pop()
        if depth >= limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def parse_error_body(text: str) -> ErrorBody:
    """What an error reply says (§5.3 of the reference): detail, extras, hint."""
    if not text.strip():
        return ErrorBody("No error details", {})
    try:
        body = _error_object(text)
    except TooDeep as error:
        return ErrorBody(f"Arena's reply {error}", {})
    if body is None:
        return ErrorBody(scrub_internal_urls(text[:500]), {})
    body = _unnest(body)
    detail = _first_text(body, _TEXT_KEYS)
    extras = {key: value for key, value in body.items() if key not in _NOT_EXTRAS and value}
    return ErrorBody(
        scrub_internal_urls(detail or text[:500]),
        extras,
        _entrypoint_hint(body),
        _mentions_missing_environment(_first_text(body, _NOT_FOUND_KEYS)),
    )


def parse_event(line: str) -> StreamEvent:
    """One NDJSON line as an event; anything that is not an event object is a ``log`` line.

    :raises TooDeep: the line is JSON that nests too deeply.
    """
    try:
        value = load_json(line)
    except ValueError:
        value = None
    if not isinstance(value, dict) or value.get("kind") not in ("status", "warning", "check"):
        return StreamEvent(kind="log", stage="", status="", message=line)
    kind = str(value["kind"])
    status = _text(value.get("status"))
    failed = kind != "check" and status == "failed"
    message = _text(value.get("message"))
    detail = value.get("detail")
    level = value.get("level")
    return StreamEvent(
        kind=kind,
        stage=_text(value.get("stage")),
        status=status,
        message=scrub_internal_urls(message) if failed else message,
        level=level if isinstance(level, str) else None,
        detail=detail if isinstance(detail, dict) else None,
        error=failed,
    )


def scrub_internal_urls(message: str) -> str:
    """A generic message instead of one that shows an internal service URL."""
    return GENERIC_FAILURE if _INTERNAL_URL.search(message) else message


def events(raw_lines: Iterable[str], seen: list[str], keep: int) -> Iterable[StreamEvent]:
    """The events of a stream's lines (blank lines skipped).

    :param seen: receives the raw lines, while together they hold at most ``keep`` characters.
    """
    kept = 0
    for raw in raw_lines:
        kept += len(raw) + 1
        if kept <= keep:
            seen.append(raw)
        line = raw.strip()
        if line:
            yield parse_event(line)


def whole_body(lines: list[str]) -> dict[str, Any]:
    """The result of a stream without a completed event: the body, if it is one JSON object.

    :raises TooDeep: the body is JSON that nests too deeply.
    """
    try:
        value = load_json("\n".join(lines))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def failure_body(event: StreamEvent) -> ErrorBody:
    """What a failed event of a stream says, as an error reply would say it."""
    return ErrorBody(
        event.message or "Arena reported a failure",
        event.extras,
        _entrypoint_hint(event.detail or {}),
        _mentions_missing_environment(event.message),
    )


def _error_object(text: str) -> dict[str, Any] | None:
    for candidate in (text, text.replace("\n", " ")):
        value = _json_value(candidate)
        if isinstance(value, dict):
            return value
    for line in text.splitlines():
        value = _json_value(line)
        if isinstance(value, dict) and "error" in value:
            return value
    return None


def _unnest(body: dict[str, Any]) -> dict[str, Any]:
    """The inner object when a message field holds a JSON-encoded error (one level)."""
    for key in _TEXT_KEYS:
        value = body.get(key)
        inner = _json_value(value) if isinstance(value, str) else None
        if isinstance(inner, dict) and any(k in inner for k in _TEXT_KEYS):
            return inner
    return body


def _first_text(body: dict[str, Any], keys: Iterable[str]) -> str:
    return next((body[k] for k in keys if isinstance(body.get(k), str) and body[k].strip()), "")


def _entrypoint_hint(body: dict[str, Any]) -> str | None:
    if body.get("error_code") != "AMBIGUOUS_ENTRYPOINT":
        return None
    choices = body.get("available_entrypoints")
    first = choices[0] if isinstance(choices, list) and choices else "MODULE:CLASS"
    return f"retry with --entrypoint {first}"


def _mentions_missing_environment(text: str) -> bool:
    lowered = text.lower()
    return "not found" in lowered and "environment" in lowered


def _json_value(text: str) -> Any:
    try:
        return load_json(text)
    except ValueError:
        return None


def _text(value: Any) -> str:
    return "" if value is None else str(value)


# -- the shapes of replies ---------------------------------------------------------------------


class ReplyShapeError(ValueError):
    """A reply that does not have the shape its endpoint documents."""


def an_object(value: Any, what: str = "the reply") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ReplyShapeError(f"{what} should be an object, not {_kind(value)}")
    return value


def object_rows(value: Any, what: str = "item") -> list[dict[str, Any]]:
    """A list of objects (``[]`` for an empty reply)."""
    value = [] if value in (None, "") else value
    if not isinstance(value, list):
        raise ReplyShapeError(f"the reply should be a list of objects, not {_kind(value)}")
    for index, row in enumerate(value):
        an_object(row, f"{what} {index}")
    return value


def project_rows(value: Any) -> list[dict[str, Any]]:
    """``GET …/projects``: objects, each with a string ``name``."""
    rows = object_rows(value, "project")
    for index, row in enumerate(rows):
        if not isinstance(row.get("name"), str):
            raise ReplyShapeError(
                f"the name of project {index} should be a string, not {_kind(row.get('name'))}"
            )
    return rows


def resource_tiers(value: Any) -> dict[str, Any]:
    """``GET …/resources/list``: ``{"tiers": {key: {..., "price_per_node_hour": number}}}``."""
    tiers = an_object(an_object(value).get("tiers", {}), "'tiers'")
    for key, tier in tiers.items():
        price = an_object(tier, f"tier {key!r}").get("price_per_node_hour")
        if price is not None and not _is_number(price):
            raise ReplyShapeError(
                f"the price_per_node_hour of tier {key!r} should be a number, not {_kind(price)}"
            )
    return value


def environment_catalogue(value: Any) -> dict[str, Any]:
    """``GET …/environments``: ``{environment: {version: {"validated", "profiled"}}}``."""
    for name, versions in an_object(value).items():
        for version, state in an_object(versions, f"environment {name!r}").items():
            an_object(state, f"version {version!r} of environment {name!r}")
    return value


def metric_names(value: Any) -> list[str]:
    """``GET …/experiments/metrics`` in JSON mode: a list of names, or ``{"metrics": [...]}``."""
    names = value.get("metrics") if isinstance(value, dict) else value
    names = [] if names in (None, "") else names
    if not isinstance(names, list):
        raise ReplyShapeError(f"the metric names should be a list, not {_kind(names)}")
    return [str(name) for name in names]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if _is_number(value):
        return "a number"
    kinds = {dict: "an object", list: "a list", str: "a string"}
    return next((name for kind, name in kinds.items() if isinstance(value, kind)), "a value")
