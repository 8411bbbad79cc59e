"""Chat templates, rendered in a Jinja sandbox bounded in time and in size.

A model folder's chat template is Jinja code from whoever made the folder. transformers renders
it in Jinja's immutable sandbox, which keeps it away from Python's internals but lets it loop
for hours (nested ``range`` loops) or fill memory (``'x' * 10**9``). agile compiles the template
itself, with the globals and filters transformers gives templates, in a subclass of that sandbox
that also bounds every render:

- in time, :data:`SECONDS` of wall clock, checked at each loop iteration, call, attribute or
  item lookup, intercepted operator and filter;
- in size, all a render makes (what operators, ``~``, filters and calls build, and the text it
  writes) adds up to at most :data:`FLOOR` characters plus :data:`PER_CHARACTER` for each
  character of the turns it renders. Where the size of a result can be told from its operands
  (``*``, ``**``, ``+``, ``%``, ``~``, ``join``, ``replace``, ``indent``, ``format``, ``tojson``,
  an integer argument) it is refused before it is built, so memory stays within a few times
  the bound.

Breaking a bound raises :class:`OverBound`; whatever else a template raises passes through.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jinja2 import nodes, pass_environment, pass_eval_context
from jinja2.environment import Environment
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.filters import make_attrgetter, sync_do_join
from jinja2.nodes import EvalContext
from jinja2.parser import Parser
from jinja2.runtime import Context, markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace
from jinja2.visitor import NodeTransformer

#: Seconds of wall clock one render may take (templates render turns in milliseconds).
SECONDS = 2.0
#: Characters every render may make, whatever the turns ...
FLOOR = 2_000_000
#: ... and the characters it may make for each character of the turns it renders.
PER_CHARACTER = 16
#: The longest template agile compiles, in characters (compiling takes ~5 us a character).
SOURCE_LIMIT = 200_000
#: Bits an integer a template computes may have (~3,000 decimal digits).
INT_BITS = 10_000
_TOO_LONG = f"more than the {INT_BITS:,} a number may have"
#: Appended to the content of a final assistant turn, to find where the model continues it.
CONTINUE_MARK = "AGILE_CONTINUES_HERE"
#: Filters and string methods whose integer arguments are values written, not widths.
_FORMATS = ("format", "format_map")
_LOOP = "agile_bounded_loop"
_CONCAT = "agile_bounded_concat"
#: Filters no chat template needs whose output grows past what their arguments tell.
_DROPPED_FILTERS = ("pprint", "urlize")


class OverBound(Exception):
    """A render went past one of its bounds; the message says which, as a clause that
    follows the template's name ("ran for more than 2 s")."""


@dataclass
class _Budget:
    """One render's bounds and what it has spent of them."""

    allowance: int
    seconds: float
    deadline: float
    made: int = 0

    @classmethod
    def start(cls, turns: int) -> _Budget:
        """The bounds of a render of turns holding ``turns`` characters."""
        allowance = FLOOR + PER_CHARACTER * turns
        return cls(allowance, SECONDS, time.monotonic() + SECONDS)

    @property
    def left(self) -> int:
        return self.allowance - self.made

    def tick(self) -> None:
        """Stop a render that has run past its time."""
        if time.monotonic() > self.deadline:
            raise OverBound(f"ran for more than {self.seconds:g} s")

    def fits(self, size: int, what: str) -> None:
        """Refuse ``what`` when ``size`` more characters would exceed the allowance."""
        if size > self.left:
            raise OverBound(
                f"made more than the {self.allowance:,} characters one render may make "
                f"({FLOOR:,} plus {PER_CHARACTER} for each character of the turns), at {what}"
            )

    def charge(self, size: int, what: str) -> None:
        """Count ``size`` characters made by ``what``."""
        self.fits(size, what)
        self.made += size


_ACTIVE: ContextVar[_Budget | None] = ContextVar("agile_template_budget", default=None)


def _budget() -> _Budget:
    """The running render's budget; a fresh one where Jinja folds constants while compiling."""
    return _ACTIVE.get() or _Budget.start(0)


# -- sizes ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Extent:
    """About how large a value is written out: ``chars`` (its ``str``, with room for quotes
    and separators), ``items`` (values in it, itself included) and ``depth`` (of nesting)."""

    chars: int
    items: int
    depth: int


def extent(value: Any, limit: int) -> Extent:
    """The :class:`Extent` of ``value``, walked without recursion (a value nested a million
    deep costs no stack).

    :param limit: characters past which counting stops (what is counted then exceeds it).
    """
    chars = items = depth = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack and chars <= limit:
        item, level = stack.pop()
        items, depth = items + 1, max(depth, level)
        chars += 2 + _own_size(item)
        if isinstance(item, dict):
            stack.extend((part, level + 1) for pair in item.items() for part in pair)
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend((part, level + 1) for part in item)
    return Extent(chars, items, depth)


def _own_size(item: Any) -> int:
    if isinstance(item, str | bytes | bytearray):
        return len(item) + 3
    if isinstance(item, bool) or item is None:
        return 5
    if isinstance(item, int):
        return item.bit_length() // 3 + 2  # at least its decimal digits and sign
    if isinstance(item, dict | list | tuple | set | frozenset):
        return 2
    return 24  # a float, a namespace, a macro, an iterator: small, or counted when listed


def size(value: Any, limit: int) -> int:
    """``extent(value, limit).chars``."""
    return extent(value, limit).chars


def _number(value: int) -> str:
    """An integer for a message, however large."""
    if value.bit_length() <= 64:
        return f"{value:,}"
    return f"a number of about {int(value.bit_length() * math.log10(2)):,} digits"


def _check_integers(budget: _Budget, values: Iterable[Any], what: str) -> None:
    """Refuse an integer argument larger than the allowance: a width, a count or a size that
    would build more than a render may make."""
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and value > budget.allowance:
            raise OverBound(
                f"passed {_number(value)} to {what}, more than the {budget.allowance:,} "
                "characters one render may make"
            )


# -- what operations will make -------------------------------------------------------------------


def _binop_size(operator: str, left: Any, right: Any, limit: int) -> int:
    """The characters ``left operator right`` will make (0 where it makes nothing large)."""
    if operator == "*":
        return _product_size(left, right, limit)
    if operator == "**":
        return _power_size(left, right)
    if operator == "+" and _sequences(left, right):
        return size(left, limit) + size(right, limit)
    if operator == "%" and isinstance(left, str):
        return _format_size(left, [right], {}, limit)
    return 0


def _sequences(*values: Any) -> bool:
    return all(isinstance(value, str | bytes | list | tuple) for value in values)


def _product_size(left: Any, right: Any, limit: int) -> int:
    if isinstance(left, int) and isinstance(right, int):
        bits = left.bit_length() + right.bit_length()
        if bits > INT_BITS:
            raise OverBound(f"multiplied integers into one of ~{bits:,} bits, {_TOO_LONG}")
        return bits // 3 + 2
    sequence, count = (left, right) if isinstance(right, int) else (right, left)
    if isinstance(count, int) and _sequences(sequence):
        return size(sequence, limit) * max(int(count), 0)
    return 0


def _power_size(base: Any, exponent: Any) -> int:
    if not (isinstance(base, int) and isinstance(exponent, int)) or exponent <= 0 or abs(base) < 2:
        return 0
    bits = math.log2(abs(base)) * exponent
    if bits > INT_BITS:
        raise OverBound(f"computed a power of ~{int(bits):,} bits, {_TOO_LONG}")
    return int(bits) // 3 + 2


_DIGITS = re.compile(r"\d+")
#: A width an argument gives: ``%*d``, ``{:{w}}``.
_WIDTH_ARGUMENT = re.compile(r"%[^a-zA-Z%]*\*|\{[^{}]*\{")


def _format_size(text: str, args: list[Any], kwargs: dict[str, Any], limit: int) -> int:
    """A bound on what formatting ``text`` with ``args`` makes: its widths, and its fields,
    each as wide as all the arguments together (and their largest integer, where an argument
    gives a width)."""
    widths = sum(int(run) if len(run) < 12 else limit + 1 for run in _DIGITS.findall(text))
    values = [*args, *kwargs.values()]
    named = [v for mapping in values if isinstance(mapping, dict) for v in mapping.values()]
    numbers = [v for v in [*values, *named] if isinstance(v, int) and not isinstance(v, bool)]
    widest = max(numbers, default=0) if _WIDTH_ARGUMENT.search(text) else 0
    fields = text.count("{") + text.count("%") + 1
    return len(text) + widths + fields * (size(values, limit) + max(widest, 0))


def _replace_size(text: Any, old: Any = "", new: Any = "", count: Any = -1, *_: Any) -> int:
    if not (isinstance(old, type(text)) and isinstance(new, type(text))):
        return len(text)  # the call raises
    found = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    return len(text) + found * max(len(new) - len(old), 0)


def _join_size(separator: str | bytes, parts: list[Any], limit: int) -> int:
    return size(parts, limit) + len(separator) * len(parts)


def _method_size(owner: str | bytes, method: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                 limit: int) -> int:  # fmt: skip
    """What calling ``owner.method(*args, **kwargs)`` of a string (or bytes) makes, where it
    can grow past its arguments' size (the widths of ``center`` and the like are integer
    arguments)."""
    if method == "replace":
        return _replace_size(owner, *args, **kwargs)
    if method in ("format", "format_map") and isinstance(owner, str):
        return _format_size(owner, list(args), kwargs, limit)
    if method == "expandtabs":
        tab = args[0] if args else kwargs.get("tabsize", 8)
        tabs = owner.count("\t") if isinstance(owner, str) else owner.count(b"\t")
        return len(owner) + tabs * (tab if isinstance(tab, int) else 8)
    if method == "translate" and args and isinstance(args[0], dict):
        longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
        return len(owner) * max(longest, 1)
    return 0


# -- the sandbox ---------------------------------------------------------------------------------


class _Bounded(NodeTransformer):
    """Rewrites a parsed template so that its loops and ``~`` concatenations go through the
    bounded filters :data:`_LOOP` and :data:`_CONCAT` (Jinja has no hook for either)."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = _filter(node.iter, _LOOP)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return _filter(nodes.List(list(node.nodes), lineno=node.lineno), _CONCAT)


def _filter(node: nodes.Node, name: str) -> nodes.Filter:
    return nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)


class _Generation(Extension):
    """``{% generation %}...{% endgeneration %}``, with which some templates mark the
    assistant's text for training masks: rendered as its body."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, set up as transformers sets up chat templates', that
    bounds each render in time and size (see the module's description)."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, finalize=_finalize,
                         extensions=[loopcontrols, _Generation])  # fmt: skip
        self.globals.pop("lipsum", None)  # paragraphs of filler by the thousand: no template's
        self.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now,
                            dict=_Dict(), namespace=_Namespace)  # fmt: skip
        for name in _DROPPED_FILTERS:
            self.filters.pop(name, None)
        self.filters.update(tojson=_tojson, join=_join, sum=_sum)
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}
        self.filters.update({_LOOP: _loop, _CONCAT: _concat})

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = _Bounded().visit(super()._parse(source, name, filename))
        tree.set_environment(self)
        return tree

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        budget = _budget()
        budget.tick()
        budget.charge(_binop_size(operator, left, right, budget.left), f"the operator {operator}")
        return super().call_binop(context, operator, left, right)

    def getattr(self, obj: Any, attribute: str) -> Any:
        _budget().tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _budget().tick()
        return super().getitem(obj, argument)

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.tick()
        target = getattr(obj, "__wrapped__", obj)  # str.format comes wrapped by the sandbox
        what = f"the call of {getattr(target, '__name__', type(target).__name__)}()"
        owner = getattr(target, "__self__", None)
        if isinstance(owner, str | bytes):
            if target.__name__ not in _FORMATS:  # center(n) and the like: widths are integers
                _check_integers(budget, itertools.chain(args, kwargs.values()), what)
            if target.__name__ == "join" and args:
                args = (list(args[0]), *args[1:])
                budget.fits(_join_size(owner, args[0], budget.left), what)
            budget.fits(_method_size(owner, target.__name__, args, kwargs, budget.left), what)
        result = super().call(context, obj, *args, **kwargs)
        budget.charge(size(result, budget.left), what)
        return result


def _bounded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` (a filter), refused when an integer argument (a width, a count) or, for
    the filters that can grow past their input, the size of what it would make exceed the
    budget, and charged with what it made."""
    estimate = _ESTIMATES.get(name)
    what = f"the filter {name}"

    @functools.wraps(function)  # keeps Jinja's pass_context & co. markers
    def bounded(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.tick()
        values = [a for a in args if not isinstance(a, Context | EvalContext | Environment)]
        if name not in _FORMATS:  # a width or a count; not the input, not a value to format
            _check_integers(budget, itertools.chain(values[1:], kwargs.values()), what)
        if estimate is not None and values:
            budget.fits(estimate(*values, **kwargs), what)
        result = function(*args, **kwargs)
        budget.charge(size(result, budget.left), what)
        return result

    return bounded


def _indent_size(s: Any = "", width: Any = 4, *_: Any, **__: Any) -> int:
    text = str(s)
    pad = len(width) if isinstance(width, str) else width if isinstance(width, int) else 4
    return len(text) + (text.count("\n") + 1) * max(pad, 0)


def _wordwrap_size(s: Any = "", width: Any = 79, _long: Any = True, wrapstring: Any = None,
                   *_: Any, **kwargs: Any) -> int:  # fmt: skip
    text, wrap = str(s), kwargs.get("wrapstring", wrapstring)
    lines = len(text) // max(width if isinstance(width, int) else 79, 1) + 1
    return len(text) + lines * len(wrap if isinstance(wrap, str) else "\n")


def _format_filter_size(value: Any = "", *args: Any, **kwargs: Any) -> int:
    return _format_size(str(value), list(args), kwargs, _budget().left)


def _replace_filter_size(s: Any = "", *args: Any, **kwargs: Any) -> int:
    return _replace_size(str(s), *args, **kwargs)


_ESTIMATES: dict[str, Callable[..., int]] = {
    "indent": _indent_size,
    "wordwrap": _wordwrap_size,
    "format": _format_filter_size,
    "replace": _replace_filter_size,
}


def _loop(iterable: Any) -> Iterator[Any]:
    """A ``for`` loop's items, the clock checked at each."""
    budget = _budget()
    for item in iterable:
        budget.tick()
        yield item


@pass_eval_context
def _concat(eval_ctx: EvalContext, parts: list[Any]) -> Any:
    """``a ~ b``: the parts' strings joined as Jinja joins them (escaping where it
    autoescapes), refused before joining when too large."""
    budget = _budget()
    budget.tick()
    budget.charge(size(parts, budget.left), "the operator ~")
    escaping = eval_ctx.autoescape or eval_ctx.volatile
    return (markup_join if escaping else str_join)(parts)  # Markup stays Markup


def _finalize(value: Any) -> Any:
    """Refuse to write a value whose text would be too large (``{{ [s] * 1000 }}``) before
    ``str`` makes it."""
    if not isinstance(value, str):
        budget = _budget()
        budget.fits(size(value, budget.left), "writing a value")
    return value


@pass_eval_context
def _join(eval_ctx: EvalContext, value: Iterable[Any], d: str = "", attribute: Any = None) -> str:
    """Jinja's ``join``, its items listed first so that its size is known before joining."""
    parts = list(value)
    budget = _budget()
    budget.fits(_join_size(str(d), parts, budget.left), "the filter join")
    return sync_do_join(eval_ctx, parts, d, attribute)


@pass_environment
def _sum(environment: Environment, iterable: Iterable[Any], attribute: Any = None,
         start: Any = 0) -> Any:  # fmt: skip
    """Jinja's ``sum``; lists and tuples are joined once rather than copied at each step."""
    if attribute is not None:
        iterable = map(make_attrgetter(environment, attribute), iterable)
    if not isinstance(start, list | tuple):
        return sum(iterable, start)
    parts = [start, *iterable]
    budget = _budget()
    budget.fits(size(parts, budget.left), "the filter sum")
    return type(start)(itertools.chain.from_iterable(parts))


def _tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:  # fmt: skip
    """``json.dumps`` (transformers' ``tojson``, which templates use to write tools), refused
    before it runs when its text would be too large."""
    budget = _budget()
    found = extent(value, budget.left)
    width = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
    gaps = sum(len(str(s)) for s in separators) if isinstance(separators, list | tuple) else 4
    chars = found.chars * (12 if ensure_ascii else 1)
    budget.fits(chars + found.items * (gaps + 1 + max(width, 0) * found.depth), "the filter tojson")
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)  # fmt: skip


def _raise_exception(message: Any) -> None:
    """What templates call to refuse a conversation, e.g. one with a system turn."""
    raise TemplateError(str(message))


def _strftime_now(pattern: str) -> str:
    """Today's date or time, as a template writes it into a system prompt."""
    return datetime.now().strftime(pattern)


class _Dict:
    """``dict(...)`` and ``dict.fromkeys(...)`` for templates, without the ``dict`` type."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, keys: Iterable[Any], value: Any = None) -> dict[Any, Any]:
        return dict.fromkeys(keys, value)


class _Namespace(Namespace):
    """Jinja's ``namespace()``, refusing names with a leading underscore."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for name in dict(*args, **kwargs):
            _plain_name(name)
        Namespace.__init__(self, *args, **kwargs)

    def __setitem__(self, name: str, value: Any) -> None:
        _plain_name(name)
        Namespace.__setitem__(self, name, value)


def _plain_name(name: Any) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise SecurityError(f"a template may not set {name!r} on a namespace (a leading _)")


# -- rendering -----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def sandbox() -> BoundedSandbox:
    """The bounded sandbox every template is compiled in, made once."""
    return BoundedSandbox()


@functools.lru_cache(maxsize=8)
def compiled(source: str) -> Any:
    """``source`` compiled in the bounded sandbox.

    :raises OverBound: it is longer than :data:`SOURCE_LIMIT`.
    """
    if len(source) > SOURCE_LIMIT:
        raise OverBound(
            f"is {len(source):,} characters long, more than the {SOURCE_LIMIT:,} agile compiles"
        )
    return sandbox().from_string(source)


#: Variables each tokenizer's template is rendered with besides the turns
#: (``environment.chat_template_kwargs``), by tokenizer.
_VARIABLES: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def configure(tokenizer: Any, template: str | None, variables: dict[str, Any]) -> None:
    """Render ``tokenizer``'s turns with ``template`` (when given, in place of its own) and
    with ``variables`` (``enable_thinking: false``, say) beside the turns."""
    if template is not None:
        tokenizer.chat_template = template
    _VARIABLES[tokenizer] = dict(variables)


def render(tokenizer: Any, messages: list[dict[str, str]], tools: list[Any] | None = None) -> str:
    """``messages`` as the tokenizer's chat template writes them, bounded: continuing a
    final assistant turn (the text ends where the model goes on with its content), else
    opening the assistant's turn (``add_generation_prompt``).

    :param tokenizer: a transformers tokenizer with a chat template; the template sees its
        special tokens (``bos_token``...) as transformers passes them.
    :param messages: the turns, ``{"role", "content"}`` (a tool's result: role ``tool``).
    :param tools: the tools the model may call, as the template's ``tools`` (JSON schemas).
    :raises OverBound: the render broke a bound.
    :raises Exception: whatever the template raises (a syntax error, ``raise_exception``, an
        error of the sandbox, a final turn it does not write).
    """
    template = compiled(str(tokenizer.get_chat_template()))
    prefilled = bool(messages) and messages[-1].get("role") == "assistant"
    turns = [{key: value for key, value in m.items() if value is not None} for m in messages]
    if prefilled:
        turns[-1] = {**turns[-1], "content": str(turns[-1].get("content", "")) + CONTINUE_MARK}
    variables = {**dict(getattr(tokenizer, "special_tokens_map", None) or {}),
                 **_VARIABLES.get(tokenizer, {}), "messages": turns}  # fmt: skip
    variables.update(tools=tools or None, documents=None, add_generation_prompt=not prefilled)
    text = _render_bounded(template, variables, _Budget.start(_characters(turns)))
    if not prefilled:
        return text
    end = text.rfind(CONTINUE_MARK)
    if end < 0:
        raise ValueError("it does not write the content of the final assistant turn, which the "
                         "model continues")  # fmt: skip
    return text[:end].replace(CONTINUE_MARK, "")  # where the template wrote the turn twice


def _characters(turns: list[dict[str, Any]]) -> int:
    """The characters of the turns' texts."""
    return sum(len(value) for turn in turns for value in turn.values() if isinstance(value, str))


def _render_bounded(template: Any, variables: dict[str, Any], budget: _Budget) -> str:
    """The template's text, written piece by piece within ``budget``."""
    token = _ACTIVE.set(budget)
    try:
        pieces = []
        for piece in template.generate(**variables):
            budget.tick()
            budget.charge(len(piece), "the text it writes")
            pieces.append(piece)
        return "".join(pieces)
    finally:
        _ACTIVE.reset(token)
