"""First-party plugins are ordinary plugins: they use only ``agile_cli``'s public names (those of
the package and of its public submodule ``agile_cli.helpers``)
and, for the RL ones, the public names of the RL library plugin ``agile_rl``, never another
plugin; the
core imports no plugin; and any one of them can be removed without breaking the others (those
built on the RL library need it)."""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml

import agile_cli
import agile_cli.helpers
import agile_rl
from agile_cli.host.plugins import (
    BUILTIN_DISTRIBUTION,
    ENTRY_POINT_GROUP,
    LoadingControls,
    build_host,
)
from agile_cli.validation import validate_mapping

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "plugins"
#: Plugins whose public API other plugins may build on, with the names they offer.
LIBRARIES = {"agile_rl": set(agile_rl.__all__)}
#: The core's public modules, with the names each offers.
PUBLIC = {
    "agile_cli": set(agile_cli.__all__),
    "agile_cli.helpers": set(agile_cli.helpers.__all__),
}
CONFIGS = sorted((ROOT / "configs" / "training").glob("*/*.yaml"))


def _first_party_packages() -> list[Path]:
    return sorted(path.parent for path in PLUGINS.glob("agile_*/__init__.py"))


def _plugin_packages() -> set[str]:
    """Every plugin's top-level package: registered under the entry-point group, or on disk."""
    registered = {ep.value.split(".")[0].split(":")[0] for ep in entry_points(group="agile")}
    on_disk = {path.parent.name for path in PLUGINS.glob("*/__init__.py")}
    nested = {path.parent.name for path in PLUGINS.glob("*/*/__init__.py")}
    return registered | on_disk | nested


def _imports(tree: ast.AST) -> Iterator[tuple[int, str, list[str]]]:
    """``(line, module, names)`` for each absolute import (``names`` empty for ``import x``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module, [alias.name for alias in node.names]


def _problems(module: str, names: list[str], own: str, plugins: set[str]) -> list[str]:
    top = module.split(".")[0]
    if module in PUBLIC:
        private = [name for name in names if name not in PUBLIC[module]]
        return [f"imports {name!r}, not in {module}.__all__" for name in private]
    if module.startswith("agile_cli."):
        return [f"imports the private module {module}"]
    if top in LIBRARIES and top != own:
        if module != top:
            return [f"imports the private module {module}"]
        return [
            f"imports {name!r}, not in {top}.__all__"
            for name in names
            if name not in LIBRARIES[top]
        ]
    if top in plugins and top != own:
        return [f"imports another plugin, {module}"]
    return []


def _violations(package: Path, plugins: set[str]) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, module, names in _imports(tree):
            for problem in _problems(module, names, package.name, plugins):
                found.append(f"{path.relative_to(ROOT)}:{line}: {problem}")
    return found


def test_first_party_plugins_import_only_the_public_api() -> None:
    plugins = _plugin_packages()
    packages = _first_party_packages()
    assert len(packages) >= 10, "the first-party plugins were not found"
    violations = [line for package in packages for line in _violations(package, plugins)]
    assert not violations, "\n".join(["first-party plugins bypass the public API:", *violations])


def test_the_core_imports_no_plugin() -> None:
    plugins = _plugin_packages()
    found = []
    for path in sorted((ROOT / "agile_cli").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += [
            f"{path.relative_to(ROOT)}:{line}: imports {module}"
            for line, module, _ in _imports(tree)
            if module.split(".")[0] in plugins
        ]
    assert not found, "\n".join(["the core imports plugins:", *found])


def test_the_check_catches_private_and_cross_plugin_imports() -> None:
    plugins = {"agile_ddpg", "agile_td3", "agile_rl"}
    assert _problems("agile_rl.runtime.buffers", ["Transitions"], "agile_td3", plugins)
    assert _problems("agile_rl", ["not_public"], "agile_td3", plugins)
    assert not _problems("agile_rl", ["ReplayBuffer"], "agile_td3", plugins)
    assert not _problems("agile_rl.runtime.buffers", ["Transitions"], "agile_rl", plugins)
    assert _problems("agile_cli", ["limits", "not_public"], "agile_td3", plugins) == [
        "imports 'not_public', not in agile_cli.__all__"
    ]
    assert not _problems("agile_cli.helpers", ["printable"], "agile_td3", plugins)
    assert _problems("agile_cli.helpers", ["limits"], "agile_td3", plugins)
    assert _problems("agile_cli.models", ["limits"], "agile_td3", plugins)
    assert _problems("agile_ddpg.spec", ["DDPGSpec"], "agile_td3", plugins)
    assert not _problems("agile_td3.spec", ["TD3Spec"], "agile_td3", plugins)
    assert not _problems("torch", [], "agile_td3", plugins)


@pytest.mark.parametrize(
    "package",
    [agile_cli, agile_cli.helpers, agile_rl],
    ids=["agile_cli", "agile_cli.helpers", "agile_rl"],
)
def test_every_public_name_resolves(package: object) -> None:
    names: list[str] = package.__all__  # type: ignore[attr-defined]
    assert not [name for name in names if not hasattr(package, name)]
    assert len(names) == len(set(names))
    assert set(getattr(package, "_LAZY", {})) <= set(names)


def test_the_public_modules_share_no_name() -> None:
    seen = [name for names in PUBLIC.values() for name in names]
    assert len(seen) == len(set(seen))


def test_a_name_that_moved_says_where() -> None:
    with pytest.raises(AttributeError, match="agile_rl"):
        agile_cli.Algorithm  # noqa: B018
    with pytest.raises(AttributeError, match=r"agile_cli\.helpers\.printable"):
        agile_cli.printable  # noqa: B018
    with pytest.raises(AttributeError, match="agile_rl"):
        agile_cli.NetworkSpec  # noqa: B018
    with pytest.raises(AttributeError, match="family='off_policy'"):
        agile_cli.Family  # noqa: B018
    with pytest.raises(ImportError, match="from agile_rl import NetworkSpec"):
        importlib.import_module("agile_cli.sections")


# -- removing one first-party plugin ---------------------------------------------------------


def _first_party_entry_points() -> list[tuple[str, str]]:
    """``(entry-point name, top-level package)`` of each first-party plugin."""
    found = [
        (ep.name, ep.value.split(".")[0])
        for ep in entry_points(group=ENTRY_POINT_GROUP)
        if ep.dist is not None and ep.dist.name == BUILTIN_DISTRIBUTION
    ]
    return sorted(found)


FIRST_PARTY = _first_party_entry_points()


def _built_on(library: str) -> set[str]:
    """The entry-point names of the first-party plugins that import ``library``."""
    found = set()
    for name, top in FIRST_PARTY:
        for path in (PLUGINS / top).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if top != library and any(m.split(".")[0] == library for _, m, _ in _imports(tree)):
                found.add(name)
    return found


@pytest.fixture(scope="module")
def owners() -> dict[Path, set[str]]:
    """The plugins each example manifest needs (its algorithm's, its paradigm's and its
    environment builder's), found with every plugin loaded."""
    registry = build_host(controls=LoadingControls()).registry
    found = {}
    for path in CONFIGS:
        resolution = validate_mapping(yaml.safe_load(path.read_text()), registry, str(path))
        builder = registry.environments[str(resolution.environment_builder)]
        algorithm = registry.algorithms[resolution.algorithm_name]
        paradigm = registry.paradigm(algorithm.family)
        found[path] = {algorithm.plugin, paradigm.plugin, builder.plugin}
    return found


@pytest.fixture
def fresh_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every module the test imported afresh is dropped after it, and the first-party ones it
    removed come back (monkeypatch, undone after this): later tests see the classes they
    imported, not copies made here (an example plugin first imported during the test binds
    to that test's copy of agile_rl, so it goes too)."""
    before = set(sys.modules)
    yield
    for name in [name for name in sys.modules if name not in before]:
        del sys.modules[name]


def _block(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """Make ``package`` unimportable, and every first-party plugin module import afresh."""
    packages = {top for _, top in FIRST_PARTY}
    for name in [name for name in sys.modules if name.split(".")[0] in packages]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, package, None)


@pytest.mark.parametrize(("removed", "package"), FIRST_PARTY, ids=[n for n, _ in FIRST_PARTY])
@pytest.mark.usefixtures("fresh_plugins")
def test_removing_one_first_party_plugin_leaves_the_others_working(
    removed: str, package: str, owners: dict[Path, set[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _block(monkeypatch, package)
    host = build_host(controls=LoadingControls(disabled=frozenset({removed})))
    dependents = _built_on(package)  # they need what they build on, and only they fail
    assert {info.name for info in host.failed} <= dependents, host.warnings
    registry = host.registry
    tables = (registry.algorithms, registry.environments, registry.backends)
    first_party = {name for name, _ in FIRST_PARTY}
    for entry in [entry for table in tables for entry in table.values()]:
        if entry.plugin in first_party - dependents:
            entry.load()  # its implementation imports without the removed plugin
    gone = {removed, *dependents}
    kept = [path for path, needed in owners.items() if not needed & gone]
    assert kept
    for path in kept:
        validate_mapping(yaml.safe_load(path.read_text()), registry, str(path))
