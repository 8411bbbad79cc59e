"""The plugin host: discovery, failures, conflicts, and what plugins add to the CLI."""

from __future__ import annotations

import json
import sys
import types
from importlib.metadata import EntryPoint
from typing import ClassVar

import click
import pytest
from pydantic import ConfigDict, Field

from agile_cli import (
    AlgorithmSpec,
    EnvironmentSpec,
    PluginError,
    TrainingManifest,
    hookimpl,
)
from agile_cli.host.plugins import LoadingControls, build_host
from agile_rl import RLOptions

from .conftest import MINIMAL


class FooSpec(AlgorithmSpec):
    """A made-up algorithm for these tests."""

    alpha: float = Field(0.5, ge=0, description="Step size.")
    learn_step: int = Field(4, ge=1, description="Steps between updates.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    mutable_hyperparameters: ClassVar[tuple[str, ...]] = ("alpha",)


class FooPlugin:
    @hookimpl
    def agile_register_algorithms(self, register) -> None:
        register(name="Foo", spec=FooSpec, family="on_policy", implementation="x:Foo")

    @hookimpl
    def agile_register_commands(self, register) -> None:
        @click.command(name="foo-hello")
        def hello() -> None:
            """Say hello."""
            click.echo("hello from foo")

        register(hello)


FOO_MANIFEST = "algorithm:\n  name: Foo\n  alpha: 0.1\nenvironment:\n  name: CartPole-v1\n"


def test_plugin_registered_for_one_test_is_known_to_validate_and_schema(
    make_host, run, write
) -> None:
    host = make_host(("foo", FooPlugin()))
    path = write("foo.yaml", FOO_MANIFEST)
    result = run("validate", str(path), host=host)
    assert result.exit_code == 0, result.output
    assert "ok (Foo on CartPole-v1" in result.output
    schema = json.loads(run("schema", host=host).output)
    assert "FooAlgorithm" in schema["$defs"]
    assert run("foo-hello", host=host).output == "hello from foo\n"
    # ...and only for that test: the installed plugins do not know it.
    assert run("validate", str(path)).exit_code == 2


def test_plugin_mutable_hyperparameters_drive_rl_hp_selection(make_host, write) -> None:
    registry = make_host(("foo", FooPlugin())).registry
    data = {
        "algorithm": {"name": "Foo"},
        "environment": {"name": "CartPole-v1"},
        "mutation": {"rl_hp_selection": {"alpha": {"min": 0.1, "max": 0.9}}},
    }
    manifest = TrainingManifest.get_validated(data, registry=registry)
    assert manifest.mutation.rl_hp_selection["alpha"].max == 0.9


@pytest.fixture
def broken_module(monkeypatch, tmp_path):
    (tmp_path / "agile_test_broken.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "agile_test_broken"
    sys.modules.pop("agile_test_broken", None)


def _installed_plus(*extra: EntryPoint) -> list[EntryPoint]:
    from importlib.metadata import entry_points

    return [*entry_points(group="agile"), *extra]


def test_broken_plugin_is_a_warning_and_a_row(broken_module, run, write) -> None:
    broken = EntryPoint("broken", broken_module, "agile")
    host = build_host(discovered=_installed_plus(broken))
    info = next(info for info in host.plugins if info.name == "broken")
    assert info.status == "failed" and info.error == "RuntimeError: boom at import"
    listing = run("plugins", host=host)
    assert listing.exit_code == 0
    assert "broken" in listing.output and "RuntimeError: boom at import" in listing.output
    assert run("validate", str(write("m.yaml", MINIMAL)), host=host)
    rows = json.loads(run("plugins", "--json", host=host).output)
    assert {row["name"]: row["status"] for row in rows}["dqn"] == "loaded"


def test_broken_plugin_warning_reaches_the_user(broken_module, monkeypatch) -> None:
    from click.testing import CliRunner

    import agile_cli.cli as cli_module

    broken = EntryPoint("broken", broken_module, "agile")
    monkeypatch.setattr(
        cli_module, "build_host", lambda **kw: build_host(discovered=_installed_plus(broken), **kw)
    )
    result = CliRunner().invoke(cli_module.cli, ["plugins"])
    assert result.exit_code == 0
    assert "warning: plugin 'broken' failed to load: RuntimeError: boom" in result.output


def test_hook_that_raises_drops_only_that_plugin(make_host) -> None:
    class Faulty:
        @hookimpl
        def agile_register_algorithms(self, register) -> None:
            register(name="Half", spec=FooSpec, family="on_policy", implementation="x:Y")
            raise KeyError("oops")

    host = make_host(("faulty", Faulty()))
    assert "Half" not in host.registry.algorithms
    assert "DQN" in host.registry.algorithms
    info = next(info for info in host.plugins if info.name == "faulty")
    assert info.status == "failed" and "KeyError" in info.error


class Impostor:
    """Registers a name a first-party plugin already has."""

    @hookimpl
    def agile_register_algorithms(self, register) -> None:
        register(name="DQN", spec=FooSpec, family="off_policy", implementation="x:Y")
        register(name="Extra", spec=FooSpec, family="off_policy", implementation="x:Y")


class LooseSpec(AlgorithmSpec):
    model_config = ConfigDict(extra="allow")


class Malformed:
    """Registers a spec that would accept unknown keys."""

    @hookimpl
    def agile_register_algorithms(self, register) -> None:
        register(name="Loose", spec=LooseSpec, family="off_policy", implementation="x:Y")


def test_first_party_keeps_a_name_and_the_impostor_is_dropped_whole(make_host) -> None:
    host = make_host(("impostor", Impostor()))
    assert host.registry.algorithms["DQN"].plugin == "dqn"
    assert "Extra" not in host.registry.algorithms  # nothing of a dropped plugin remains
    info = next(info for info in host.plugins if info.name == "impostor")
    assert info.status == "failed"
    assert info.error == "algorithm 'DQN' is registered by both 'dqn' and 'impostor'"


def test_strict_loading_collects_every_failure_then_refuses_the_registry(make_host) -> None:
    host = make_host(
        ("impostor", Impostor()), ("malformed", Malformed()), controls=LoadingControls(strict=True)
    )
    assert [info.name for info in host.plugins if info.status == "failed"] == [
        "impostor",
        "malformed",
    ]
    with pytest.raises(PluginError) as excinfo:
        host.check()
    assert excinfo.value.exit_code == 2
    lines = excinfo.value.lines()
    assert lines[0] == "2 plugins failed to load and AGILE_STRICT_PLUGINS is set:"
    assert lines[1] == (
        "  plugin 'impostor' failed to load: "
        "algorithm 'DQN' is registered by both 'dqn' and 'impostor'"
    )
    assert lines[2].startswith("  plugin 'malformed' failed to load: ") and len(lines) == 4
    make_host(("impostor", Impostor())).check()  # without strict, nothing to refuse


@pytest.fixture
def broken_plugins(broken_module, monkeypatch):
    """Make the CLI's host load a plugin that raises, an impostor, and a malformed one."""
    import agile_cli.cli as cli_module

    broken = EntryPoint("broken", broken_module, "agile")
    extra = [("impostor", Impostor()), ("malformed", Malformed()), ("foo", FooPlugin())]

    def host(**kwargs):
        return build_host(discovered=_installed_plus(broken), extra_plugins=extra, **kwargs)

    monkeypatch.setattr(cli_module, "build_host", host)
    return cli_module.cli


@pytest.mark.parametrize("args", [["--help"], ["plugins"], ["validate", "{manifest}"]])
def test_broken_plugins_leave_the_cli_working(broken_plugins, write, args) -> None:
    from click.testing import CliRunner

    manifest = str(write("m.yaml", MINIMAL))
    result = CliRunner().invoke(broken_plugins, [a.format(manifest=manifest) for a in args])
    assert result.exit_code == 0, result.output
    for name in ("broken", "impostor", "malformed"):
        assert f"warning: plugin '{name}' failed to load: " in result.output
    assert "Traceback" not in result.output


BROKEN_LINES = (
    "  plugin 'broken' failed to load: RuntimeError: boom at import",
    "  plugin 'impostor' failed to load: algorithm 'DQN' is registered by both 'dqn'",
    "  plugin 'malformed' failed to load: ",
)


@pytest.mark.parametrize(
    "args", [["validate", "{manifest}"], ["schema"], ["train", "{manifest}"], ["foo-hello"]]
)
def test_strict_env_var_makes_registry_commands_fail_naming_every_plugin(
    broken_plugins, write, monkeypatch, args
) -> None:
    from click.testing import CliRunner

    monkeypatch.setenv("AGILE_STRICT_PLUGINS", "1")
    manifest = str(write("m.yaml", MINIMAL))
    argv = [a.format(manifest=manifest) for a in args]
    result = CliRunner().invoke(broken_plugins, argv, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == "error: 3 plugins failed to load and AGILE_STRICT_PLUGINS is set:"
    for line, expected in zip(lines[1:4], BROKEN_LINES, strict=True):
        assert line.startswith(expected)
    assert "unset AGILE_STRICT_PLUGINS" in lines[4] and len(lines) == 5
    assert result.stdout == ""


def test_strict_loading_leaves_help_working_and_lists_every_plugin(broken_plugins, monkeypatch):
    from click.testing import CliRunner

    monkeypatch.setenv("AGILE_STRICT_PLUGINS", "1")
    result = CliRunner().invoke(broken_plugins, ["--help"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "validate" in result.stdout and "foo-hello" in result.stdout
    for name in ("broken", "impostor", "malformed"):
        assert f"warning: plugin '{name}' failed to load: " in result.stderr


@pytest.mark.parametrize("as_json", [False, True])
def test_strict_agile_plugins_lists_every_failure_then_exits_two(
    broken_plugins, monkeypatch, as_json
) -> None:
    from click.testing import CliRunner

    monkeypatch.setenv("AGILE_STRICT_PLUGINS", "1")
    args = ["plugins", "--json"] if as_json else ["plugins"]
    result = CliRunner().invoke(broken_plugins, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    if as_json:
        failed = {row["name"] for row in json.loads(result.stdout) if row["status"] == "failed"}
        assert failed == {"broken", "impostor", "malformed"}
    else:
        assert "RuntimeError: boom at import" in result.stdout
        assert "accepts unknown keys" in result.stdout
    assert result.stderr.startswith("error: 3 plugins failed to load and AGILE_STRICT_PLUGINS")


def test_malformed_spec_is_named(make_host) -> None:
    info = next(i for i in make_host(("malformed", Malformed())).plugins if i.name == "malformed")
    assert info.status == "failed" and "accepts unknown keys" in info.error


def test_only_and_disabled_plugins(monkeypatch, run) -> None:
    controls = LoadingControls.from_environment({"AGILE_PLUGINS": "rl, gymnasium, ppo"})
    host = build_host(controls=controls)
    assert sorted(host.registry.algorithms) == ["PPO"]
    rows = {info.name: info for info in host.plugins}
    assert rows["dqn"].status == "disabled" and rows["dqn"].error == "not named in AGILE_PLUGINS"
    monkeypatch.setenv("AGILE_DISABLE_PLUGINS", "dqn")
    listing = run("--disable-plugin", "ppo", "plugins", "--json")
    states = {row["name"]: row["status"] for row in json.loads(listing.output)}
    assert states["dqn"] == states["ppo"] == "disabled" and states["gymnasium"] == "loaded"


def test_registrations_are_type_checked(make_host) -> None:
    class Wrong:
        @hookimpl
        def agile_register_algorithms(self, register) -> None:
            register(name="W", spec=dict, family="off_policy", implementation="x:Y")

    info = next(i for i in make_host(("wrong", Wrong())).plugins if i.name == "wrong")
    assert "not a subclass of agile_cli.AlgorithmSpec" in info.error


def test_mutable_hyperparameters_must_be_numeric_fields(make_host) -> None:
    class BadSpec(AlgorithmSpec):
        mutable_hyperparameters: ClassVar[tuple[str, ...]] = ("nope",)

    class Bad:
        @hookimpl
        def agile_register_algorithms(self, register) -> None:
            register(name="Bad", spec=BadSpec, family="off_policy", implementation="x:Y")

    info = next(i for i in make_host(("bad", Bad())).plugins if i.name == "bad")
    assert "lists 'nope' as mutable" in info.error


def test_plugin_may_not_take_a_core_command(make_host) -> None:
    class Squatter:
        @hookimpl
        def agile_register_commands(self, register) -> None:
            register(click.Command("validate"))

    info = next(i for i in make_host(("squatter", Squatter())).plugins if i.name == "squatter")
    assert info.error == "command 'validate' is a core command; choose another name"


def test_hook_may_declare_only_the_arguments_it_uses(make_host) -> None:
    module = types.ModuleType("agile_test_noargs")
    calls = []

    @hookimpl
    def agile_register_backends() -> None:
        calls.append("called")

    module.agile_register_backends = agile_register_backends
    make_host(("noargs", module))
    assert calls == ["called"]


def test_agile_plugins_lists_first_party_plugins_with_distribution(run) -> None:
    result = run("plugins")
    assert result.exit_code == 0
    for expected in ("dqn", "ppo", "gymnasium", "agile-cli", "algorithm:DQN"):
        assert expected in result.output


def test_replay_options_the_algorithm_cannot_use_are_refused(make_host, write, run) -> None:
    class Plain:
        @hookimpl
        def agile_register_algorithms(self, register) -> None:
            register(name="Plain", spec=FooSpec, family="off_policy", implementation="x:Y")

    host = make_host(("plain", Plain()))
    text = FOO_MANIFEST.replace("Foo", "Plain") + "replay_buffer:\n  per_buffer: true\n"
    result = run("validate", str(write("p.yaml", text)), host=host)
    assert result.exit_code == 2
    # Whichever installed algorithms support prioritised replay are listed, DQN among them.
    able = [
        name
        for name, entry in host.registry.algorithms.items()
        if RLOptions.has(entry.spec, "supports_per")
    ]
    assert "DQN" in able and "Plain" not in able
    assert (
        "replay_buffer.per_buffer: Plain cannot learn from prioritised replay "
        f"(supported by: {', '.join(able)})" in result.output
    )


class LabSpec(EnvironmentSpec):
    """A made-up environment family."""

    name: str = Field(description="Lab name.")
    rooms: int = Field(3, ge=1, description="Rooms in the lab.")


class LabPlugin:
    @hookimpl
    def agile_register_environments(self, register) -> None:
        register(name="lab", spec=LabSpec, families=["on_policy", "off_policy"],
                 implementation="x:LabBuilder")  # fmt: skip


def test_agile_register_environments_adds_a_selectable_builder(make_host, write, run) -> None:
    host = make_host(("lab", LabPlugin()))
    builders = host.registry.builders_for("on_policy")
    assert builders[0] == "gymnasium" and "lab" in builders  # first-party is the default
    good = write("lab.yaml", "algorithm: {name: PPO}\nenvironment: {builder: lab, name: a}\n")
    result = run("validate", "--json", str(good), host=host)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["environment"] == {"builder": "lab", "name": "a", "rooms": 3}
    wrong = write(
        "l2.yaml", "algorithm: {name: PPO}\nenvironment: {builder: lab, name: a, room: 2}\n"
    )
    assert (
        "environment.room: unknown field (did you mean 'rooms'?)"
        in run("validate", str(wrong), host=host).output
    )
    typo = write("l3.yaml", "algorithm: {name: PPO}\nenvironment: {builder: labs, name: a}\n")
    assert (
        "environment.builder: no builder 'labs' for PPO (did you mean 'lab'?)"
        in run("validate", str(typo), host=host).output
    )
    default = run("validate", "--json", str(write("l4.yaml", MINIMAL)), host=host)
    assert "builder" not in json.loads(default.output)["environment"]  # gymnasium, unsaid


def test_misspelled_hook_fails_the_plugin_loudly(make_host) -> None:
    class Typo:
        @hookimpl
        def agile_register_algorithm(self, register) -> None:  # missing the final "s"
            raise AssertionError("never called")

    info = next(i for i in make_host(("typo", Typo())).plugins if i.name == "typo")
    assert info.status == "failed"
    assert "unknown hook 'agile_register_algorithm'" in info.error
    assert "did you mean 'agile_register_algorithms'?" in info.error
