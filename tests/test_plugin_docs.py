"""Every plugin hook is documented and tested, and the public API resolves.

Adding a hook to ``agile_cli/host/hookspecs.py`` without a docstring, without a section in
``docs/plugins.md`` or without a test that uses it makes these tests fail.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agile_cli
from agile_cli.host import hookspecs

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
    assert doc and doc.strip(), f"{hook} in agile_cli/host/hookspecs.py has no docstring"


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


def test_the_guides_python_blocks_compile() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    blocks = re.findall(r"^( *)```python\n(.*?)^\1```", text, re.M | re.S)
    assert len(blocks) > 5
    for _indent, block in blocks:
        compile(textwrap.dedent(block), str(GUIDE), "exec")


def _guide_python_blocks() -> dict[str, str]:
    """The guide's Python code blocks whose docstring begins with a file name, by that name
    (a block starting ``\"\"\"agile_vpg/plugin.py: ...`` is ``agile_vpg/plugin.py``)."""
    blocks = re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(encoding="utf-8"), re.M | re.S)
    named = {}
    for block in blocks:
        first = re.match(r'"""([\w/.-]+\.py)', block)
        if first:
            named[first.group(1)] = block
    return named


GUIDE_MODULES = ("agile_vpg", "agile_vpg.plugin", "agile_vpg.algorithm", "guide_variant_test")


@pytest.fixture
def guide_vpg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The guide's ``agile_vpg`` package and ``tests/test_variant.py``, importable (as
    ``guide_variant_test``) from the folder returned."""
    blocks = _guide_python_blocks()
    folder = tmp_path / "guide"
    package = folder / "agile_vpg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name in ("plugin.py", "algorithm.py"):
        (package / name).write_text(blocks[f"agile_vpg/{name}"])
    (folder / "guide_variant_test.py").write_text(blocks["tests/test_variant.py"])
    monkeypatch.syspath_prepend(str(folder))
    for name in GUIDE_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield folder
    for name in GUIDE_MODULES:
        sys.modules.pop(name, None)


def test_the_guides_variant_example_works(guide_vpg: Path, agile_host: Any) -> None:
    """Section 5's example, varying the guide's own VPG."""
    module = importlib.import_module("guide_variant_test")
    module.test_the_variant_conforms(agile_host, guide_vpg / "work")


def test_the_guides_vpg_refuses_box_actions_at_validate(
    guide_vpg: Path, agile_host: Any, agile_cli: Any
) -> None:
    """Section 3: an unsupported space is reported by ``validate --check-env``."""
    host = agile_host(("vpg", importlib.import_module("agile_vpg.plugin")))
    manifest = guide_vpg / "vpg.yaml"
    manifest.write_text("algorithm: {name: VPG}\nenvironment: Pendulum-v1\n")
    result = agile_cli("validate", "--check-env", str(manifest), host=host)
    assert result.exit_code == 2, result.output
    assert (
        "algorithm: VPG does not support Box action spaces (it needs Discrete actions; use PPO)"
        in result.output
    )
