"""Fixtures: a stand-in Arena server per test, and a process environment pointing at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .server import ArenaServer


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "arena(**settings): ArenaSettings overrides for the arena_server fixture"
    )


@pytest.fixture
def arena_server(request: pytest.FixtureRequest) -> Iterator[ArenaServer]:
    """A running stand-in on 127.0.0.1 (ephemeral port), stopped after the test.

    Settings can be given with ``@pytest.mark.arena(envelope=False, ...)`` or changed on
    ``arena_server.settings`` during the test.
    """
    marker = request.node.get_closest_marker("arena")
    server = ArenaServer(**(marker.kwargs if marker else {})).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def arena_env(
    arena_server: ArenaServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> ArenaServer:
    """Point the Arena client at the stand-in: a fresh ``HOME``, both base URLs, no API key."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USERPROFILE", str(home))
    monkeypatch.setenv("ARENA_BASE_URL", arena_server.url)
    monkeypatch.setenv("ARENA_KEYCLOAK_URL", arena_server.url)
    monkeypatch.delenv("ARENA_API_KEY", raising=False)
    monkeypatch.setenv("AGILE_NO_BROWSER", "1")
    return arena_server
