"""Tool calls in a model's turn: find them in the turn's text, check them, and decide what a
tool-calling environment receives for the turn.

Each model family writes tool calls its own way. agilerl 2.58 reads four formats; this module reads
the same four, under the same names:

- ``tool_call`` (:class:`TagParser`): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
  blocks, as Qwen 2/3/3.5, Hermes, Granite 4 and Nemotron H write them (Nemotron puts an XML body
  in the block instead of JSON);
- ``granite3`` (:class:`Granite3Parser`): ``<|tool_call|>`` followed by a JSON list of calls that
  runs to the end of the turn (Granite 3);
- ``gemma4`` (:class:`Gemma4Parser`): ``<|tool_call>call:NAME{key:value,...}<tool_call|>`` blocks
  (Gemma 4);
- ``harmony`` (:class:`HarmonyParser`): messages addressed ``to=functions.NAME`` (gpt-oss).

The parsers read decoded text, not token ids. Decode a turn with ``skip_special_tokens=False``:
the delimiters are special tokens in most of these vocabularies and vanish otherwise. Reading text
costs one thing reading ids (as 2.58 does) does not: a tag the model spells out in its prose counts
as a tag.

A model writes anything during RL, so nothing here trusts it: ``parse`` never raises on a turn's
text. A turn comes back ``ok`` (its calls), ``none`` (no call: prose only) or ``malformed`` (an
error code and a reason the model can be told); a turn longer than :data:`MAX_TEXT_CHARS` is
malformed without being read. :func:`route` then says what the environment receives.

Nothing heavy is imported: no torch, no transformers.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

__all__ = [
    "FAMILY_PARSERS",
    "MAX_TEXT_CHARS",
    "NO_CALL",
    "PARSERS",
    "Feedback",
    "Gemma4Parser",
    "Granite3Parser",
    "HarmonyParser",
    "Parser",
    "TagParser",
    "ToolCall",
    "TurnCalls",
    "detect",
    "parser_for",
    "route",
    "tool_message",
]

#: The longest turn, in characters, that a parser reads (1 Mi characters, at most 4 MiB of
#: UTF-8); a longer one is ``malformed`` (``too_long``) without being scanned.
MAX_TEXT_CHARS = 1 << 20
#: How deeply Gemma arguments may nest objects and lists.
MAX_DEPTH = 64
#: :attr:`Feedback.error` of a turn with no call when no ``answer_tool`` takes prose.
NO_CALL = "no_call"
#: Model text quoted in a reason is cut to this many characters.
_QUOTED = 60

Status = Literal["ok", "none", "malformed"]
ErrorCode = Literal[
    "invalid_json", "unclosed_block", "missing_name", "malformed_structure", "too_long"
]
#: Per tool name, per argument name, that argument's JSON schema.
_Schemas = dict[str, dict[str, dict[str, Any]]]


@dataclass(frozen=True)
class ToolCall:
    """One well-formed call: the tool's name and its arguments (a JSON object)."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class TurnCalls:
    """What one turn holds.

    :param status: ``ok`` (``calls`` holds one call or more), ``none`` (no call; ``prose`` is
        the whole answer) or ``malformed`` (``error`` and ``reason`` say what is wrong).
    :param calls: the calls, in the order written; empty unless ``ok``. One bad call makes the
        whole turn ``malformed``, so a turn never runs half of its calls.
    :param prose: the text outside the calls, reasoning left out and ends stripped; empty when
        ``malformed``.
    :param error: a code for a ``malformed`` turn: ``invalid_json``, ``unclosed_block``,
        ``missing_name``, ``malformed_structure`` (2.58's codes) or ``too_long``.
    :param reason: one sentence for the model, naming the call when the turn has several.
    """

    status: Status
    calls: tuple[ToolCall, ...] = ()
    prose: str = ""
    error: ErrorCode | None = None
    reason: str = ""


@dataclass(frozen=True)
class _Bad:
    """A call block that does not make a call: an error code and a reason."""

    error: ErrorCode
    reason: str


def _malformed(error: ErrorCode, reason: str) -> TurnCalls:
    """A ``malformed`` turn."""
    return TurnCalls(status="malformed", error=error, reason=reason)


def _turn(attempts: Sequence[ToolCall | _Bad], prose: str) -> TurnCalls:
    """The turn made of these parse attempts: the first bad one makes it ``malformed``."""
    for number, attempt in enumerate(attempts, start=1):
        if isinstance(attempt, _Bad):
            where = f"Call {number}: " if len(attempts) > 1 else ""
            return _malformed(attempt.error, where + attempt.reason)
    calls = tuple(attempt for attempt in attempts if isinstance(attempt, ToolCall))
    return TurnCalls(status="ok" if calls else "none", calls=calls, prose=prose.strip())


def _quoted(text: str) -> str:
    """Model text, cut short, to quote in a reason."""
    return repr(text if len(text) <= _QUOTED else text[:_QUOTED] + "...")


class Parser(ABC):
    """Reads one family's tool-call format from a turn's decoded text.

    :cvar name: the parser's name, as 2.58 names it.
    :cvar markers: texts that all appear in a chat template of this family (the delimiters 2.58
        looks for in a tokenizer's vocabulary); :func:`detect` reads them.
    :cvar end_markers: end-of-turn tokens a decoded turn may end with; they are dropped first.
    """

    name: ClassVar[str]
    markers: ClassVar[tuple[str, ...]]
    end_markers: ClassVar[tuple[str, ...]] = ()

    def parse(self, text: str, tools: Sequence[Any] | None = None) -> TurnCalls:
        """The calls in one turn; never raises on the text.

        :param text: the turn as decoded with special tokens kept.
        :param tools: the environment's tool schemas (OpenAI style, as given to the chat
            template). Only Nemotron's XML bodies read them, to keep a string argument a string;
            without them an XML value is JSON when it reads as JSON, else text.
        """
        if not isinstance(text, str):
            return _malformed("malformed_structure", f"A turn is text, not {type(text).__name__}.")
        if len(text) > MAX_TEXT_CHARS:
            return _malformed(
                "too_long",
                f"The turn has {len(text)} characters; at most {MAX_TEXT_CHARS} are read.",
            )
        return self._read(_trim_end(text, self.end_markers), tools)

    @abstractmethod
    def _read(self, text: str, tools: Sequence[Any] | None) -> TurnCalls:
        """The calls in a turn already checked for type and length."""

    def render_results(self, messages: Sequence[Mapping[str, str]]) -> str | None:
        """Text to append for these tool results when the chat template cannot render them, or
        ``None``: give the template :func:`tool_message` dicts (every format but Gemma 4)."""
        return None


def _trim_end(text: str, markers: tuple[str, ...]) -> str:
    """``text`` without trailing whitespace and (a few of) the end-of-turn markers."""
    text = text.rstrip()
    for _ in range(4):
        marker = next((marker for marker in markers if text.endswith(marker)), None)
        if marker is None:
            break
        text = text[: -len(marker)].rstrip()
    return text


def _after_reasoning(text: str, reasoning_end: str) -> str:
    """The text after the first ``reasoning_end``, or all of it when there is none."""
    _reasoning, closed, answer = text.partition(reasoning_end)
    return answer if closed else text


def _split_blocks(text: str, opening: str, closing: str) -> tuple[list[str], str] | _Bad:
    """The bodies of the ``opening`` ... ``closing`` blocks in ``text`` and the prose around them,
    or why the tags do not pair up (a block never closed, opened twice, or a stray closing tag)."""
    bodies: list[str] = []
    prose: list[str] = []
    at = 0
    while True:
        start = text.find(opening, at)
        outside = text[at:] if start == -1 else text[at:start]
        if closing in outside:
            return _Bad("malformed_structure", f"{closing} closes a block never opened.")
        prose.append(outside)
        if start == -1:
            return bodies, "".join(prose)
        end = text.find(closing, start + len(opening))
        body = text[start + len(opening) : len(text) if end == -1 else end]
        if end == -1 or opening in body:
            return _Bad("unclosed_block", f"{opening} is not closed by {closing}.")
        bodies.append(body.strip())
        at = end + len(closing)


def _load_json(raw: str) -> tuple[Any, str | None]:
    """``raw`` decoded as JSON, or ``None`` and why it is not JSON."""
    try:
        return json.loads(raw), None
    except RecursionError:
        return None, "nested too deeply"
    except ValueError as error:
        return None, str(error)


def _json_kind(value: object) -> str:
    """What JSON calls ``value``'s type."""
    kinds = ((bool, "a boolean"), (int | float, "a number"), (str, "a string"), (list, "a list"))
    return next((kind for cls, kind in kinds if isinstance(value, cls)), "null or missing")


def _call_from_object(payload: object) -> ToolCall | _Bad:
    """A ``{"name": ..., "arguments": {...}}`` object as a call; ``arguments`` may also be a
    string holding that object's JSON, as some models write it."""
    if not isinstance(payload, dict):
        return _Bad("malformed_structure", f"A call is a JSON object, not {_json_kind(payload)}.")
    name = payload.get("name")
    if not isinstance(name, str) or not name.strip():
        return _Bad("missing_name", 'The call has no "name".')
    arguments = payload.get("arguments")
    if isinstance(arguments, str):
        arguments, problem = _load_json(arguments)
        if problem is not None:
            return _Bad("malformed_structure", f'"arguments" is a string but not JSON: {problem}.')
    if not isinstance(arguments, dict):
        kind = _json_kind(arguments)
        return _Bad(
            "malformed_structure", f'"arguments" must be a JSON object ({{}} for none), not {kind}.'
        )
    return ToolCall(name, arguments)


def _json_call(raw: str) -> ToolCall | _Bad:
    """One JSON call body."""
    payload, problem = _load_json(raw)
    if problem is not None:
        return _Bad("invalid_json", f"The call is not valid JSON: {problem}.")
    return _call_from_object(payload)


# -- Nemotron's XML body inside <tool_call> ----------------------------------------------------

_FUNCTION_OPEN, _FUNCTION_CLOSE = "<function=", "</function>"
_PARAMETER_OPEN, _PARAMETER_CLOSE = "<parameter=", "</parameter>"


def _xml_call(body: str, schemas: _Schemas | None) -> ToolCall | _Bad:
    """``<function=NAME><parameter=KEY>VALUE</parameter>...</function>`` as a call."""
    head_end = body.find(">")
    close = body.rfind(_FUNCTION_CLOSE)
    if head_end == -1 or close < head_end or body[close + len(_FUNCTION_CLOSE) :].strip():
        return _Bad("malformed_structure", "An XML call is <function=NAME> ... </function>.")
    name = body[len(_FUNCTION_OPEN) : head_end].strip()
    if not name:
        return _Bad("missing_name", "<function=> names no tool.")
    params = None if schemas is None else schemas.get(name, {})
    arguments = _xml_parameters(body[head_end + 1 : close], params)
    return arguments if isinstance(arguments, _Bad) else ToolCall(name, arguments)


def _xml_parameters(inner: str, params: dict[str, dict[str, Any]] | None) -> dict[str, Any] | _Bad:
    """The ``<parameter=KEY>VALUE</parameter>`` blocks of an XML call, nothing else between."""
    arguments: dict[str, Any] = {}
    at = 0
    while True:
        start = inner.find(_PARAMETER_OPEN, at)
        if (inner[at:] if start == -1 else inner[at:start]).strip():
            return _Bad("malformed_structure", "An XML call holds only <parameter=...> blocks.")
        if start == -1:
            return arguments
        head_end = inner.find(">", start)
        close = -1 if head_end == -1 else inner.find(_PARAMETER_CLOSE, head_end)
        if close == -1:
            return _Bad("unclosed_block", "<parameter=...> is not closed by </parameter>.")
        key = inner[start + len(_PARAMETER_OPEN) : head_end].strip()
        if not key:
            return _Bad("malformed_structure", "<parameter=> names no argument.")
        value = _xml_value(inner[head_end + 1 : close].strip(), key, params)
        if isinstance(value, _Bad):
            return value
        arguments[key] = value
        at = close + len(_PARAMETER_CLOSE)


def _xml_value(text: str, key: str, params: dict[str, dict[str, Any]] | None) -> Any:
    """One XML argument: verbatim when its schema types it a string, else JSON; text that is not
    JSON stays text when the schema allows a string or no schemas are known, else it is bad."""
    schema = None if params is None else params.get(key)
    if schema is not None and schema.get("type") in ("string", ["string"]):
        return text
    value, problem = _load_json(text)
    if problem is None:
        return value
    if params is None or (schema is not None and _allows_string(schema)):
        return text
    return _Bad("invalid_json", f"Argument {_quoted(key)} is not JSON and takes no string.")


def _allows_string(schema: Mapping[str, Any]) -> bool:
    """Whether a JSON schema lets a value be a string (a type list, ``anyOf`` or ``oneOf``)."""
    types = schema.get("type")
    if isinstance(types, list) and "string" in types:
        return True
    branches = schema.get("anyOf") or schema.get("oneOf") or []
    return isinstance(branches, list) and any(
        isinstance(branch, dict) and branch.get("type") == "string" for branch in branches
    )


def _tool_properties(tool: object) -> tuple[str, dict[str, dict[str, Any]]] | None:
    """A tool schema's name and argument schemas (``{"type": "function", "function": {...}}`` or
    the bare function), or ``None`` when it is not one."""
    spec = tool.get("function", tool) if isinstance(tool, dict) else None
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        return None
    parameters = spec.get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    if not isinstance(properties, dict):
        return spec["name"], {}
    return spec["name"], {k: v for k, v in properties.items() if isinstance(v, dict)}


def _param_schemas(tools: Sequence[Any] | None) -> _Schemas | None:
    """Argument schemas per tool name, or ``None`` when no tools are given."""
    if tools is None:
        return None
    found = (_tool_properties(tool) for tool in tools)
    return dict(entry for entry in found if entry is not None)


# -- the four formats ------------------------------------------------------------------------


class TagParser(Parser):
    """``tool_call``: ``<tool_call>`` ... ``</tool_call>`` blocks, each holding one call.

    The body is JSON, ``{"name": "get_weather", "arguments": {"city": "Paris"}}``
    (``arguments`` may be a string of that JSON), or Nemotron's XML,
    ``<function=get_weather><parameter=city>Paris</parameter></function>``. Blocks before the
    first ``</think>`` are reasoning and are not read, as in 2.58.
    """

    name = "tool_call"
    markers = ("<tool_call>",)
    end_markers = ("<|im_end|>", "<|endoftext|>", "<|end_of_text|>")
    OPENING, CLOSING = "<tool_call>", "</tool_call>"

    def _read(self, text: str, tools: Sequence[Any] | None) -> TurnCalls:
        """Every block after the reasoning."""
        split = _split_blocks(_after_reasoning(text, "</think>"), self.OPENING, self.CLOSING)
        if isinstance(split, _Bad):
            return _malformed(split.error, split.reason)
        bodies, prose = split
        schemas = _param_schemas(tools)
        attempts = [
            _xml_call(body, schemas) if body.startswith(_FUNCTION_OPEN) else _json_call(body)
            for body in bodies
        ]
        return _turn(attempts, prose)


class Granite3Parser(Parser):
    """``granite3``: one ``<|tool_call|>`` and then a JSON list of calls to the end of the turn.

    ``<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]``. Granite 3 writes
    no closing tag and no text before the tag (text there is ``malformed``, as in 2.58); an empty
    list is ``malformed`` too.
    """

    name = "granite3"
    markers = ("<|tool_call|>",)
    end_markers = ("<|end_of_text|>",)
    TAG = "<|tool_call|>"

    def _read(self, text: str, tools: Sequence[Any] | None) -> TurnCalls:
        """The list after the tag, or the whole turn as prose."""
        before, tagged, after = text.partition(self.TAG)
        if not tagged:
            return TurnCalls(status="none", prose=text.strip())
        if before.strip():
            return _malformed("malformed_structure", f"Text comes before {self.TAG}.")
        raw = after.strip()
        if not raw.startswith("["):
            return _malformed("malformed_structure", f"{self.TAG} is followed by a JSON list.")
        payload, problem = _load_json(raw)
        if problem is not None:
            return _malformed("invalid_json", f"The list of calls is not valid JSON: {problem}.")
        if not payload:
            return _malformed("malformed_structure", "The list of calls is empty.")
        return _turn([_call_from_object(item) for item in payload], "")


_GEMMA_STRING = '<|"|>'
_SPACE = re.compile(r"\s*")
_GEMMA_KEY = re.compile(r"[^:,{}\[\]]*")
_GEMMA_BARE = re.compile(r"[^,{}\[\]]*")


class _GemmaError(ValueError):
    """Why Gemma arguments do not parse."""


class _GemmaReader:
    """Reads Gemma's argument syntax: ``{key:value,...}`` where a value is a string between
    ``<|"|>`` delimiters, an object, a list ``[value,...]``, or bare text up to the next ``,``,
    ``}`` or ``]`` (kept as a string, as 2.58 keeps it, for the tool to convert). A trailing comma
    is allowed; anything else out of place is an error."""

    def __init__(self, text: str, at: int) -> None:
        self.text, self.at = text, at

    def _skip_space(self) -> None:
        match = _SPACE.match(self.text, self.at)
        self.at = match.end() if match else self.at

    def _take(self, token: str) -> bool:
        """Consume ``token`` when it comes next."""
        if self.text.startswith(token, self.at):
            self.at += len(token)
            return True
        return False

    def _items(self, closing: str, read_item: Callable[[], None], depth: int) -> None:
        """Read the items of an object or list, from its opening bracket to ``closing``."""
        if depth > MAX_DEPTH:
            raise _GemmaError(f"arguments nest deeper than {MAX_DEPTH}")
        self.at += 1
        self._skip_space()
        while not self._take(closing):
            read_item()
            self._skip_space()
            if self._take(","):
                self._skip_space()
            elif not self.text.startswith(closing, self.at):
                raise _GemmaError(f"expected ',' or {closing!r} at offset {self.at}")

    def object(self, depth: int = 1) -> dict[str, Any]:
        """The object whose ``{`` is next."""
        result: dict[str, Any] = {}

        def entry() -> None:
            key = self._key()
            result[key] = self.value(depth)

        self._items("}", entry, depth)
        return result

    def _list(self, depth: int) -> list[Any]:
        """The list whose ``[`` is next."""
        result: list[Any] = []
        self._items("]", lambda: result.append(self.value(depth)), depth)
        return result

    def _key(self) -> str:
        """A key and its colon."""
        match = _GEMMA_KEY.match(self.text, self.at)
        key = match.group().strip() if match else ""
        if not key or match is None:
            raise _GemmaError(f"expected a key at offset {self.at}")
        self.at = match.end()
        if not self._take(":"):
            raise _GemmaError(f"expected ':' after key {_quoted(key)}")
        return key

    def value(self, depth: int) -> Any:
        """The value that comes next, past any space."""
        self._skip_space()
        if self._take(_GEMMA_STRING):
            end = self.text.find(_GEMMA_STRING, self.at)
            if end == -1:
                raise _GemmaError(f"a {_GEMMA_STRING} string is not closed")
            start, self.at = self.at, end + len(_GEMMA_STRING)
            return self.text[start:end]
        if self.text.startswith("{", self.at):
            return self.object(depth + 1)
        if self.text.startswith("[", self.at):
            return self._list(depth + 1)
        match = _GEMMA_BARE.match(self.text, self.at)
        bare = match.group().strip() if match else ""
        if not bare or match is None:
            raise _GemmaError(f"expected a value at offset {self.at}")
        self.at = match.end()
        return bare


def _gemma_call(body: str) -> ToolCall | _Bad:
    """``call:NAME{key:value,...}`` as a call."""
    brace = body.find("{")
    if not body.startswith("call:") or brace == -1:
        return _Bad("malformed_structure", "A Gemma call is call:NAME{key:value,...}.")
    name = body[len("call:") : brace].strip()
    if not name:
        return _Bad("missing_name", "call: names no tool.")
    reader = _GemmaReader(body, brace)
    try:
        arguments = reader.object()
    except _GemmaError as error:
        return _Bad(
            "malformed_structure", f"The arguments of {_quoted(name)} do not parse: {error}."
        )
    if body[reader.at :].strip():
        return _Bad("malformed_structure", f"Text follows the arguments of {_quoted(name)}.")
    return ToolCall(name, arguments)


class Gemma4Parser(Parser):
    """``gemma4``: ``<|tool_call>call:NAME{key:value,...}<tool_call|>`` blocks.

    ``<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>`` is
    ``get_weather(city="Paris", days="3")``: strings sit between ``<|"|>`` delimiters, bare values
    stay strings as in 2.58, objects and lists nest. A thinking block (``<|channel>thought ...
    <channel|>``) is reasoning and is not read.

    Gemma 4's chat template does not render a ``tool`` message on its own, so 2.58 writes the
    results itself: :meth:`render_results`.
    """

    name = "gemma4"
    markers = ("<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>")
    end_markers = ("<turn|>", "<eos>")
    OPENING, CLOSING = "<|tool_call>", "<tool_call|>"

    def _read(self, text: str, tools: Sequence[Any] | None) -> TurnCalls:
        """Every block after the reasoning."""
        split = _split_blocks(_after_reasoning(text, "<channel|>"), self.OPENING, self.CLOSING)
        if isinstance(split, _Bad):
            return _malformed(split.error, split.reason)
        bodies, prose = split
        return _turn([_gemma_call(body) for body in bodies], prose)

    def render_results(self, messages: Sequence[Mapping[str, str]]) -> str | None:
        """``<|tool_response>response:NAME{value:<|"|>CONTENT<|"|>}<tool_response|>`` per result,
        when every message is a ``tool`` message (else ``None``, for the chat template)."""
        if not messages or any(message.get("role") != "tool" for message in messages):
            return None
        return "".join(
            f"<|tool_response>response:{message.get('name') or 'unknown'}"
            f"{{value:{_GEMMA_STRING}{message.get('content', '')}{_GEMMA_STRING}}}<tool_response|>"
            for message in messages
        )


_START, _MESSAGE, _CALL, _END, _RETURN = (
    "<|start|>",
    "<|message|>",
    "<|call|>",
    "<|end|>",
    "<|return|>",
)
_RECIPIENT = re.compile(r"to=([^\s<]+)")
_CHANNEL = re.compile(r"<\|channel\|>\s*([^\s<]+)")
_FUNCTIONS = "functions."


def _harmony_call(name: str, rest: str) -> ToolCall | _Bad:
    """A message addressed to ``functions.NAME``: its JSON arguments up to ``<|call|>`` (or
    ``<|end|>``, which 2.58 also takes)."""
    ends = [end for end in (rest.find(_CALL), rest.find(_END)) if end != -1]
    if not ends:
        return _Bad("unclosed_block", f"The call to {_quoted(name)} is not closed by {_CALL}.")
    if not name.strip():
        return _Bad("missing_name", f"to={_FUNCTIONS} names no function.")
    arguments, problem = _load_json(rest[: min(ends)].strip())
    if problem is not None:
        return _Bad(
            "invalid_json", f"The arguments of {_quoted(name)} are not valid JSON: {problem}."
        )
    if not isinstance(arguments, dict):
        kind = _json_kind(arguments)
        return _Bad("malformed_structure", f"Arguments must be a JSON object, not {kind}.")
    return ToolCall(name, arguments)


def _harmony_message(block: str, first: bool) -> ToolCall | _Bad | str | None:
    """One message of a Harmony turn: a call, a bad call, prose, or nothing (reasoning, a call
    to a built-in tool such as ``browser``, a header cut short). ``first`` is the text before
    the first ``<|start|>``: with no Harmony markup at all it is plain prose."""
    header, has_body, rest = block.partition(_MESSAGE)
    if first and not has_body and "<|channel|>" not in header:
        return header.strip()
    recipient = _RECIPIENT.search(header)
    if recipient is not None and recipient.group(1).startswith(_FUNCTIONS):
        name = recipient.group(1)[len(_FUNCTIONS) :]
        if not has_body:
            return _Bad("unclosed_block", f"The call to {_quoted(name)} has no {_MESSAGE}.")
        return _harmony_call(name, rest)
    if recipient is not None:
        return None
    if not has_body:
        return None
    channel = _CHANNEL.search(header)
    if channel is not None and channel.group(1) == "analysis":
        return None
    ends = [end for end in (rest.find(_CALL), rest.find(_END)) if end != -1]
    return rest[: min(ends, default=len(rest))].strip()


class HarmonyParser(Parser):
    """``harmony``: gpt-oss messages, a call being one addressed to ``functions.NAME``.

    ``<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary
    to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>``. A turn
    continues the ``<|start|>assistant`` the prompt ends with, so its text up to the first
    ``<|start|>`` is a message too; reading stops at ``<|return|>``. Prose is the text of the
    messages that are neither calls nor ``analysis`` (reasoning), or the whole turn when it has
    no Harmony markup. A function message never closed, or addressed with no ``<|message|>``, is
    ``unclosed_block``.
    """

    name = "harmony"
    markers = (_START, _MESSAGE, _CALL, _END)

    def _read(self, text: str, tools: Sequence[Any] | None) -> TurnCalls:
        """Every message up to ``<|return|>``."""
        blocks = text.partition(_RETURN)[0].split(_START)
        attempts: list[ToolCall | _Bad] = []
        prose: list[str] = []
        for index, block in enumerate(blocks):
            item = _harmony_message(block, first=index == 0)
            if isinstance(item, str):
                prose.append(item)
            elif item is not None:
                attempts.append(item)
        return _turn(attempts, "\n".join(part for part in prose if part))


#: The parsers by name, in the order 2.58 tries them when it detects one.
PARSERS: dict[str, Parser] = {
    parser.name: parser
    for parser in (TagParser(), Granite3Parser(), Gemma4Parser(), HarmonyParser())
}

#: The parser of each model family (a Hugging Face ``config.model_type``), from 2.58's catalog.
#: Gemma 3 is in 2.58's catalog with no parser, and so is absent here.
FAMILY_PARSERS: dict[str, str] = {
    **dict.fromkeys(("qwen2", "qwen3", "qwen3_moe", "qwen3_5", "qwen3_5_text"), "tool_call"),
    **dict.fromkeys(("qwen3_5_moe", "qwen3_5_moe_text", "granitemoehybrid"), "tool_call"),
    **dict.fromkeys(("nemotron_h", "nemotron_h_omni"), "tool_call"),
    "granitemoe": "granite3",
    "gemma4": "gemma4",
    "gemma4_text": "gemma4",
    "gpt_oss": "harmony",
}


def parser_for(name: str) -> Parser:
    """The parser named ``name``.

    :raises ValueError: for a name no parser has; the message lists the names.
    """
    parser = PARSERS.get(name) if isinstance(name, str) else None
    if parser is None:
        known = ", ".join(PARSERS)
        raise ValueError(f"No tool-call parser is named {name!r}; the parsers are: {known}.")
    return parser


def detect(chat_template: str | None, model_type: str | None) -> str | None:
    """The name of the parser for a model, or ``None`` when no parser fits.

    As 2.58 does, a family its catalog knows gets the catalog's parser: ``model_type`` (the
    model's ``config.model_type``) is looked up in :data:`FAMILY_PARSERS` first. Otherwise 2.58
    takes the first parser whose delimiter tokens are all in the tokenizer's vocabulary; here the
    first parser (in :data:`PARSERS` order) whose :attr:`Parser.markers` all appear in the chat
    template's text, since a template that writes tool calls spells out their delimiters.
    """
    if model_type is not None and model_type in FAMILY_PARSERS:
        return FAMILY_PARSERS[model_type]
    if not chat_template:
        return None
    return next(
        (
            name
            for name, parser in PARSERS.items()
            if all(m in chat_template for m in parser.markers)
        ),
        None,
    )


def action_text(said: str) -> str:
    """The action 2.58 takes from a reply's text (its special tokens left out): what follows
    the first ``</think>``, stripped, else the whole text as written."""
    _reasoning, closed, action = said.partition("</think>")
    return action.strip() if closed else said


def tool_message(name: str, content: str) -> dict[str, str]:
    """A tool's result as a chat message for the chat template, as 2.58 feeds results back (for
    Gemma 4 see :meth:`Gemma4Parser.render_results`)."""
    return {"role": "tool", "name": name, "content": content}


@dataclass(frozen=True)
class Feedback:
    """A turn that runs nothing: the environment is not stepped, the turn scores the
    environment's ``min_reward``, and the model is told :attr:`message` as a tool result.

    :param error: the turn's :attr:`TurnCalls.error`, or :data:`NO_CALL`.
    :param message: what to tell the model.
    """

    error: str
    message: str

    def as_message(self) -> dict[str, str]:
        """The feedback as the tool message 2.58 sends (a tool named ``unknown``)."""
        return tool_message("unknown", f"Error: {self.message}")


def route(
    turn: TurnCalls, answer_tool: str | None = None, action_field: str = "message",
    text: str | None = None,
) -> tuple[ToolCall, ...] | Feedback:  # fmt: skip
    """What a tool-calling environment receives for a turn, as 2.58 decides it.

    - ``ok``: the calls, one environment step each, in order;
    - ``none`` with ``answer_tool`` set: one call to that tool with the turn's ``text`` (else
      its prose) as its ``action_field`` argument, ``{action_field: text}`` (2.58's
      ``call_tool(answer_tool, {action_field: text})``, ``action_field`` defaulting to
      ``"message"``, the text being the reply without its special tokens, after any
      ``</think>``: :func:`action_text`);
    - ``none`` without ``answer_tool``: :class:`Feedback` asking for a tool call;
    - ``malformed``: :class:`Feedback` with the reason, whether or not ``answer_tool`` is set.

    Every :class:`Feedback` means the turn scores ``min_reward`` with no environment step.
    """
    if turn.status == "ok":
        return turn.calls
    if turn.status == "malformed":
        reason = turn.reason or "The tool call is malformed."
        return Feedback(
            turn.error or "malformed_structure", f"{reason} No call ran; write valid tool calls."
        )
    if answer_tool is not None:
        return (ToolCall(answer_tool, {action_field: turn.prose if text is None else text}),)
    return Feedback(NO_CALL, "No tool call found. Write a tool call.")
