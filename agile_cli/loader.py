"""Reading manifest files: YAML or JSON, strictly and safely.

- duplicate keys in a mapping are an error, not last-wins;
- files over :data:`MAX_BYTES` are refused before they are read;
- YAML anchors/aliases may not expand to more than :data:`MAX_NODES` nodes, nor to more than
  :data:`MAX_TEXT` characters of scalars (no alias bombs): what is read, and so what a run
  folder writes back from it, stays of the order of :data:`MAX_BYTES`;
- syntax errors name the line and column.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from agile_cli.errors import FieldError, ManifestError

MAX_BYTES = 1024 * 1024
MAX_NODES = 100_000
#: Characters of scalar text (keys and values) a document may hold once its aliases are
#: expanded. A document without aliases holds at most its own bytes, so only sharing
#: (one long string aliased many times) can pass it.
MAX_TEXT = MAX_BYTES


class _StrictLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no type hints
    """A safe loader that refuses duplicate keys and reads ``1e-4`` as a float."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                first = seen[key].start_mark.line + 1
                raise _YamlProblem(
                    f"duplicate key '{key}' (first at line {first})",
                    key_node.start_mark,
                    "keep only one",
                )
            seen[key] = key_node
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


# YAML 1.1 wants a dot in floats; people write 1e-4 and 3E5 and mean numbers.
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


class _YamlProblem(Exception):
    def __init__(self, message: str, mark: yaml.Mark | None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message, self.mark, self.hint = message, mark, hint


def load_file(path: str | Path) -> dict[str, Any]:
    """Read a manifest file into a mapping.

    :raises ManifestError: if the file is missing, too large, malformed, empty or not a mapping.
    """
    path = Path(path)
    source = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise _fail(source, f"file is {size:,} bytes; manifests are limited to {MAX_BYTES:,}")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _fail(source, "no such file", "check the path") from None
    except IsADirectoryError:
        raise _fail(source, "is a directory, not a manifest file") from None
    except UnicodeDecodeError:
        raise _fail(source, "is not UTF-8 text") from None
    except OSError as exc:
        raise _fail(source, f"cannot be read: {exc.strerror}") from None
    return load_text(text, source=source, as_json=path.suffix.lower() == ".json")


def load_text(text: str, *, source: str = "manifest", as_json: bool = False) -> dict[str, Any]:
    """Parse manifest text (YAML, or JSON when ``as_json``) into a mapping."""
    if len(text.encode("utf-8")) > MAX_BYTES:
        raise _fail(source, f"text is over {MAX_BYTES:,} bytes")
    data = _parse_json(text, source) if as_json else parse_yaml(text, source)
    if data is None:
        raise _fail(
            source, "file is empty", "write at least the algorithm and environment sections"
        )
    if not isinstance(data, Mapping):
        raise _fail(
            source,
            f"top level is a {_kind(data)}, not a mapping",
            "a manifest is a mapping of sections: algorithm, environment, training, ...",
        )
    return dict(data)


def parse_yaml(text: str, source: str) -> Any:
    """YAML text as the manifest loader reads it (numbers such as ``3e-4`` are numbers, no
    duplicate keys, no alias bombs).

    :raises ManifestError: naming ``source`` and where the text is wrong.
    """
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    except _YamlProblem as problem:
        raise _fail(source, _at(problem.mark) + problem.message, problem.hint) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = exc.problem or exc.context or "invalid YAML"
        raise _fail(source, f"{_at(mark)}invalid YAML: {message}") from None
    except yaml.YAMLError as exc:
        raise _fail(source, f"invalid YAML: {exc}") from None
    except RecursionError:
        raise _fail(source, "YAML nests too deeply") from None
    except (ValueError, TypeError) as exc:  # a value no constructor takes: 2020-13-45, ? [a]
        detail = " ".join(str(exc).split())[:200]
        raise _fail(source, f"invalid YAML value: {detail}", "quote it as a string") from None
    finally:
        loader.dispose()


def _check_expansion(root: yaml.Node) -> None:
    """Refuse documents whose aliases expand beyond MAX_NODES values or MAX_TEXT characters
    of scalar text (both counted without expanding: each node once, its size remembered)."""
    over = (MAX_NODES + 1, MAX_TEXT + 1)
    sizes: dict[int, tuple[int, int]] = {}

    def size(node: yaml.Node) -> tuple[int, int]:
        """Values and scalar characters ``node`` expands to, each capped just past its limit."""
        known = sizes.get(id(node))
        if known is not None:
            return known
        sizes[id(node)] = over  # a node reached again while counting: a cycle
        values, text = 1, len(node.value) if isinstance(node, yaml.ScalarNode) else 0
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        for child in children:
            child_values, child_text = size(child)
            values, text = values + child_values, text + child_text
        sizes[id(node)] = (min(values, over[0]), min(text, over[1]))
        return sizes[id(node)]

    values, text = size(root)
    hint = "write the values out, or share fewer of them"
    if values > MAX_NODES:
        message = f"anchors and aliases expand to more than {MAX_NODES:,} values"
        raise _YamlProblem(message, root.start_mark, hint)
    if text > MAX_TEXT:
        message = f"anchors and aliases expand to more than {MAX_TEXT:,} characters of text"
        raise _YamlProblem(message, root.start_mark, hint)


def _parse_json(text: str, source: str) -> Any:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                raise _fail(source, f"duplicate key '{key}'", "keep only one")
            result[key] = value
        return result

    if not text.strip():
        return None
    try:
        return json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as exc:
        raise _fail(
            source, f"line {exc.lineno}, column {exc.colno}: invalid JSON: {exc.msg}"
        ) from None
    except RecursionError:
        raise _fail(source, "JSON nests too deeply") from None


def _at(mark: yaml.Mark | None) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""


def _kind(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


def _fail(source: str, message: str, hint: str | None = None) -> ManifestError:
    return ManifestError([FieldError("", message, hint)], source=source)
