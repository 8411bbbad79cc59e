"""Every plugin hook is documented and tested, and the public API resolves.

Adding a hook to ``agile_cli/hookspecs.py`` without a docstring, without a section in
``docs/plugins.md`` or without a test that uses it makes these tests fail.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import agile_cli
from agile_cli import hookspecs

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "plugins.md"
TESTS = ROOT / "tests"
HOOK_PREFIX = "agile_register_"


def _hook_names() -> list[str]:
    return sorted(
        name
        for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
        if name.startswith(HOOK_PREFIX) and function.__module__ == hookspecs.__name__
    )


HOOKS = _hook_names()


def _guide_headings() -> list[str]:
    """The Markdown headings of the plugin guide, skipping lines inside fenced code blocks."""
    headings = []
    fenced = False
    for line in GUIDE.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6}\s", line):
            headings.append(line)
    return headings


def _test_sources() -> dict[Path, str]:
    """Every test module under tests/ except this one, as text."""
    this = Path(__file__).resolve()
    return {
        path: path.read_text(encoding="utf-8")
        for path in sorted(TESTS.rglob("*.py"))
        if path.resolve() != this and (path.name.startswith("test_") or path.stem.endswith("_test"))
    }


def test_hooks_are_found() -> None:
    assert HOOKS, f"no {HOOK_PREFIX}* functions in {hookspecs.__name__}"


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_has_a_docstring(hook: str) -> None:
    doc = inspect.getdoc(getattr(hookspecs, hook))
    assert doc and doc.strip(), f"{hook} in agile_cli/hookspecs.py has no docstring"


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_has_a_section_in_the_plugin_guide(hook: str) -> None:
    assert GUIDE.is_file(), f"{GUIDE.relative_to(ROOT)} is missing"
    headings = _guide_headings()
    assert any(f"`{hook}`" in heading for heading in headings), (
        f"docs/plugins.md has no heading naming `{hook}`; headings: {headings}"
    )


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_is_used_by_a_test(hook: str) -> None:
    users = [path for path, text in _test_sources().items() if hook in text]
    assert users, f"no test module under tests/ mentions {hook}"


@pytest.mark.parametrize("name", agile_cli.__all__)
def test_public_name_resolves(name: str) -> None:
    getattr(agile_cli, name)  # lazy names import their module here (torch, gymnasium)
