"""A command loads only the plugins' parts it needs: specs named by reference
(``spec="module:Class"``) are imported when something first asks for them, a broken one is a
failed row and a sentence, and plugins that pass classes work as they always did."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from pydantic import Field

import agile_cli.cli as cli_module
from agile_cli import AlgorithmSpec, hookimpl
from agile_cli.host.deferred import UnloadableError
from agile_cli.host.plugins import LoadingControls, build_host

from .conftest import MINIMAL

PROBE = """
import sys
from agile_cli.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    assert not exit.code, exit.code
print("MODULES:", ",".join(sorted(sys.modules)))
"""


def imported_by(*args: str) -> set[str]:
    """The modules a fresh ``agile ARGS`` process has imported when it ends."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True
    )
    line = done.stdout.strip().splitlines()[-1]
    return set(line.removeprefix("MODULES: ").split(","))


def _referenced_modules(table: str) -> dict[str, set[str]]:
    """Entry name -> the modules the installed plugins name by reference for it, for the
    entries of one registry table."""
    registry = build_host(lazy=True).registry
    return {
        name: {
            part.target.partition(":")[0]
            for part in vars(entry).values()
            if getattr(part, "by_reference", False)
        }
        for name, entry in getattr(registry, table).items()
    }


def _others(modules: dict[str, set[str]], own: str) -> set[str]:
    """The modules named for entries other than ``own``, less those ``own`` names too."""
    return set().union(*(m for name, m in modules.items() if name != own)) - modules[own]


def test_validating_a_dqn_manifest_imports_no_other_algorithm_s_spec(write) -> None:
    algorithms = _referenced_modules("algorithms")
    others = _others(algorithms, "DQN")
    assert algorithms["DQN"] and len(others) >= 5, "first-party algorithms no longer load lazily"
    builders = _others(_referenced_modules("environments"), "gymnasium")
    loaded = imported_by("validate", str(write("dqn.yaml", MINIMAL)))
    assert algorithms["DQN"] <= loaded
    assert not loaded & others, sorted(loaded & others)
    assert not loaded & builders, sorted(loaded & builders)


def test_help_imports_no_spec_a_plugin_names_by_reference() -> None:
    tables = (_referenced_modules("algorithms"), _referenced_modules("environments"))
    specs = set().union(*(m for modules in tables for m in modules.values()))
    assert specs and not imported_by("--help") & specs


# -- a plugin whose spec module is broken -------------------------------------------------------

LAZY_SPEC = """\
from typing import ClassVar
from pydantic import Field
from agile_cli import AlgorithmSpec

class LazySpec(AlgorithmSpec):
    lr: float = Field(0.1, gt=0, description="Step size.")
    learn_step: int = Field(4, ge=1, description="Steps between updates.")
    mutable_hyperparameters: ClassVar[tuple[str, ...]] = ("lr",)

class NotASpec:
    pass
"""


class LazyPlugin:
    """Registers algorithms whose specs are named by reference, in modules of a tmp folder."""

    def __init__(self, algorithms: dict[str, str]) -> None:
        self.algorithms = algorithms

    @hookimpl
    def agile_register_algorithms(self, register) -> None:
        for name, spec in self.algorithms.items():
            register(name=name, spec=spec, family="on_policy", implementation="x:Y")


@pytest.fixture
def spec_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``agile_test_lazy_good`` (a spec, and a class that is not one) and
    ``agile_test_lazy_broken`` (raises at import), importable for one test."""
    (tmp_path / "agile_test_lazy_good.py").write_text(LAZY_SPEC)
    (tmp_path / "agile_test_lazy_broken.py").write_text("raise RuntimeError('boom in spec')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("agile_test_lazy_good", "agile_test_lazy_broken"):
        sys.modules.pop(name, None)


@pytest.fixture
def cli_with(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Callable[..., Result]]:
    """``cli_with(*plugins)``: run ``agile ARGS`` whose host (built as the CLI builds it, lazy)
    also loads ``(name, plugin)`` pairs."""

    def make(*plugins: tuple[str, object]) -> Callable[..., Result]:
        def host(**kwargs: object) -> object:
            return build_host(extra_plugins=plugins, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(cli_module, "build_host", host)
        return lambda *args: CliRunner().invoke(cli_module.cli, list(args))

    return make


BROKEN = ("lazy", LazyPlugin({"Broken": "agile_test_lazy_broken:LazySpec"}))
CANNOT_LOAD = (
    "algorithm 'Broken': cannot load 'agile_test_lazy_broken:LazySpec': RuntimeError: boom"
)


def test_a_broken_spec_module_is_a_failed_row_in_agile_plugins(spec_modules, cli_with) -> None:
    agile = cli_with(BROKEN)
    rows = {row["name"]: row for row in json.loads(agile("plugins", "--json").stdout)}
    assert rows["lazy"]["status"] == "failed"
    assert rows["lazy"]["error"].startswith(CANNOT_LOAD)
    assert rows["dqn"]["status"] == "loaded" and "algorithm:DQN" in rows["dqn"]["contributes"]
    listing = agile("plugins")
    assert listing.exit_code == 0
    assert CANNOT_LOAD in listing.stdout
    assert f"warning: plugin 'lazy' failed to load: {CANNOT_LOAD}" in listing.stderr
    assert "Traceback" not in listing.output


def test_a_command_that_needs_a_broken_spec_says_so_in_a_sentence(
    spec_modules, cli_with, write
) -> None:
    agile = cli_with(BROKEN)
    broken = write("broken.yaml", "algorithm: {name: Broken}\nenvironment: {name: CartPole-v1}\n")
    result = agile("validate", str(broken))
    assert result.exit_code == 2, result.output
    assert f"algorithm.name: plugin 'lazy' failed to load: {CANNOT_LOAD}" in result.stdout
    assert "fix or reinstall plugin 'lazy'" in result.stdout
    assert "Traceback" not in result.output
    # a manifest that does not need it validates, and the schema leaves the plugin out
    assert agile("validate", str(write("dqn.yaml", MINIMAL))).exit_code == 0
    schema = agile("schema")
    assert schema.exit_code == 0, schema.output
    assert "BrokenAlgorithm" not in json.loads(schema.stdout)["$defs"]
    assert "warning: plugin 'lazy' failed to load" in schema.stderr


def test_a_spec_named_by_reference_is_checked_when_it_loads(spec_modules, make_host) -> None:
    plugin = LazyPlugin(
        {"Good": "agile_test_lazy_good:LazySpec", "Odd": "agile_test_lazy_good:NotASpec"}
    )
    host = build_host(extra_plugins=[("lazy", plugin)], lazy=True)
    assert "agile_test_lazy_good" not in sys.modules  # registering imported nothing
    assert host.registry.algorithms["Good"].spec.__name__ == "LazySpec"
    with pytest.raises(UnloadableError) as refused:
        _ = host.registry.algorithms["Odd"].spec
    assert refused.value.plugin == "lazy" and refused.value.exit_code == 2
    assert "not a subclass of agile_cli.AlgorithmSpec" in refused.value.message
    eager = make_host(("lazy", plugin))  # as the library builds it: everything loaded
    row = next(info for info in eager.plugins if info.name == "lazy")
    assert row.status == "failed" and "NotASpec" in row.error
    assert "Good" not in eager.registry.algorithms  # a failed plugin is dropped whole


def test_strict_loading_refuses_a_broken_spec_even_where_it_is_not_needed(
    spec_modules, cli_with, write, monkeypatch
) -> None:
    monkeypatch.setenv("AGILE_STRICT_PLUGINS", "1")
    result = cli_with(BROKEN)("validate", str(write("dqn.yaml", MINIMAL)))
    assert result.exit_code == 2
    assert f"plugin 'lazy' failed to load: {CANNOT_LOAD}" in result.stderr


class BrokenBackend:
    @hookimpl
    def agile_register_backends(self, register) -> None:
        register(
            name="faraway",
            options="agile_test_lazy_broken:Options",
            implementation="x:Y",
            training="agile_test_lazy_broken:Training",
        )


def test_a_backend_whose_specs_are_broken_leaves_validate_and_train_working(
    spec_modules, cli_with, write
) -> None:
    agile = cli_with(("faraway", BrokenBackend()))
    result = agile("validate", str(write("dqn.yaml", MINIMAL)))
    assert result.exit_code == 0, result.output
    assert "training: plugin 'faraway' failed to load: backend 'faraway': cannot load" in (
        result.stdout
    )
    helped = agile("train", "--help")
    assert helped.exit_code == 0, helped.output
    assert "warning: plugin 'faraway' failed to load" in helped.stderr


# -- plugins that pass classes ------------------------------------------------------------------


class EagerSpec(AlgorithmSpec):
    """A made-up algorithm registered the way plugins always did, as a class."""

    learn_step: int = Field(4, ge=1, description="Steps between updates.")


class Eager:
    @hookimpl
    def agile_register_algorithms(self, register) -> None:
        register(name="Eager", spec=EagerSpec, family="on_policy", implementation="x:Y")


class Wrong:
    @hookimpl
    def agile_register_algorithms(self, register) -> None:
        register(name="Wrong", spec=dict, family="on_policy", implementation="x:Y")


def test_specs_registered_as_classes_still_work_in_a_lazy_host(cli_with, write) -> None:
    agile = cli_with(("eager", Eager()), ("wrong", Wrong()))
    manifest = write("eager.yaml", "algorithm: {name: Eager}\nenvironment: {name: CartPole-v1}\n")
    result = agile("validate", str(manifest))
    assert result.exit_code == 0, result.output
    assert "ok (Eager on CartPole-v1" in result.stdout
    # a wrong class is still refused when it is registered, before anything asks for it
    assert "plugin 'wrong' failed to load: 'Wrong' comes with" in result.stderr
    controls = LoadingControls(only=frozenset())
    host = build_host(extra_plugins=[("eager", Eager())], controls=controls, lazy=True)
    assert host.registry.algorithms["Eager"].spec is EagerSpec


def test_a_reference_that_is_not_module_colon_class_is_refused_at_registration(make_host):
    host = make_host(("lazy", LazyPlugin({"NoColon": "agile_test_lazy_good"})))
    info = next(info for info in host.plugins if info.name == "lazy")
    assert info.status == "failed"
    assert info.error == (
        "algorithm 'NoColon': 'agile_test_lazy_good' is not a 'module:Class' reference"
    )
