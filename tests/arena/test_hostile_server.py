"""The Arena client against a hostile server: drip-fed, silent, redirecting, huge and malformed
replies, and waits it asks for.

The hostile faults are in :mod:`tests.arena.hostile`. A second stand-in on another port plays the
foreign origin of a redirect: it must never receive a request.
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agile_arena import client as client_module
from agile_arena.client import ArenaClient
from agile_arena.errors import ArenaNetworkError

from ..conftest import CONFIGS, ROOT
from .server import DEVICE_AUTH_PATH, LOGOUT_PATH, SUBMIT_PATH, TOKEN_PATH, ArenaServer

KEY = "arena_pat_test_key"
ECHOED = "arena_pat_9f8e-ECHOED-SECRET-7d6c"
CLI = "/api/cli/v1"
USER = "/api/users/current"
CREDITS = "/api/users/credits"
PROJECTS = f"{CLI}/projects"
RESOURCES = f"{CLI}/resources/list"
ENVIRONMENTS = f"{CLI}/environments"
VALIDATE = f"{CLI}/environments/validate"
EXPERIMENTS = f"{CLI}/experiments/list"
CHECKPOINTS = f"{CLI}/experiments/jobs/checkpoints"
DQN = next(path for path in CONFIGS if path.parts[-2:] == ("dqn", "cartpole.yaml"))
SMALL_CAP = 64 * 1024


@pytest.fixture
def keyed(arena_env: ArenaServer, monkeypatch: pytest.MonkeyPatch) -> ArenaServer:
    monkeypatch.setenv("ARENA_API_KEY", KEY)
    return arena_env


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module.random, "random", lambda: 0.0)


@pytest.fixture
def foreign() -> Iterator[ArenaServer]:
    """Another origin (same host, another port) that records whatever reaches it."""
    server = ArenaServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def small_cap(monkeypatch: pytest.MonkeyPatch) -> int:
    """Read at most 64 KiB per reply (the real cap is tens of MiB)."""
    wire = importlib.import_module("agile_arena.wire")
    monkeypatch.setattr(wire, "MAX_REPLY_BYTES", SMALL_CAP)
    return SMALL_CAP


def failed_cleanly(result: Any) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    return result.output


def timed(run: Any, *args: str) -> tuple[Any, float]:
    started = time.monotonic()
    result = run(*args)
    return result, time.monotonic() - started


# -- an overall deadline per attempt, and one per call ----------------------------------------

SLOW_JSON = json.dumps({"ok": True, "data": []}).ljust(80).encode()  # 80 bytes: 20 s of drip
RUNNING = b'{"kind": "status", "stage": "submission", "status": "running", "message": "queued"}\n'
SUBMIT_ARGS = ("train", str(DQN), "--backend", "arena", "--project", "demo")


def test_a_drip_fed_reply_is_cut_off_at_the_request_timeout(run, keyed, no_backoff) -> None:
    keyed.inject("drip", path=PROJECTS, times=10, seconds=0.25, body=SLOW_JSON)
    result, elapsed = timed(run, "arena", "--request-timeout", "0.5", "projects", "list")
    output = failed_cleanly(result)
    assert "did not answer within 0.5 s" in output and "--request-timeout" in output
    # a GET is retried after a deadline like after any timeout, while its budget lasts:
    # all attempts of a call end within 3 timeouts
    assert keyed.count("GET", PROJECTS) == 3
    assert elapsed < 3 * 0.5 + 1


def test_a_post_cut_off_by_its_deadline_is_not_resent(run, keyed) -> None:
    create = f"{CLI}/projects/create"
    keyed.inject("drip", path=create, times=10, seconds=0.25, body=SLOW_JSON)
    result, elapsed = timed(run, "arena", "--request-timeout", "1", "projects", "create", "p")
    assert "did not answer within 1 s" in failed_cleanly(result)
    assert keyed.count("POST", create) == 1 and elapsed < 3


@pytest.mark.parametrize("kind", ["drip", "drip_headers"])
def test_each_attempt_has_one_deadline_for_headers_and_body(keyed, kind) -> None:
    keyed.inject(kind, path=USER, seconds=0.05, body=b" " * 400 + b"{}")  # 10-20 s of drip
    client = ArenaClient(api_key=KEY, base_url=keyed.url, request_timeout=0.5, max_retries=0)
    started = time.monotonic()
    with client, pytest.raises(ArenaNetworkError, match=r"did not answer within 0\.5 s"):
        client.get_current_user()
    assert time.monotonic() - started < 1.5


def test_a_streamed_request_gets_its_headers_within_the_upload_timeout(run, keyed) -> None:
    keyed.inject("drip_headers", path=VALIDATE, seconds=0.05, body=b"{}")
    result, elapsed = timed(
        run, "arena", "--upload-timeout", "1", "environments", "validate", "GridWorld"
    )
    assert "did not answer within 1 s" in failed_cleanly(result)
    assert elapsed < 3


STALLED_STREAMS = [
    ("drip", {"seconds": 0.2, "body": RUNNING * 4}),  # one byte every 0.2 s: a minute of events
    ("silent", {"status": 200, "body": RUNNING}),  # one event, then nothing
]


@pytest.mark.parametrize(("kind", "options"), STALLED_STREAMS, ids=["drip", "silent"])
def test_a_progress_stream_ends_by_the_upload_timeout(run, keyed, kind, options) -> None:
    keyed.inject(kind, path=SUBMIT_PATH, **options)
    args = (*SUBMIT_ARGS, "--upload-timeout", "1", "--request-timeout", "1")
    result, elapsed = timed(run, *args)
    output = failed_cleanly(result)
    assert "did not finish replying to POST /api/cli/v1/experiments/jobs/submit within 1 s" in (
        output
    )
    assert "may still have processed" in output and "--upload-timeout" in output
    assert elapsed < 2.5
    assert keyed.count("POST", SUBMIT_PATH) == 1  # a stream that started is never resent


def test_the_attempts_of_a_submission_share_one_budget(run, keyed, no_backoff) -> None:
    """The probe's case: headers dripped on every attempt took 172.9 s and 30 requests for
    limits of 5 s; all attempts, and the checks before resending, now end within 3 timeouts."""
    keyed.inject("drip_headers", path=SUBMIT_PATH, times=50, seconds=0.05, body=b"{}")
    args = (*SUBMIT_ARGS, "--experiment-name", "slow", "--upload-timeout", "0.5")
    result, elapsed = timed(run, *args)
    assert "did not answer within 0.5 s" in failed_cleanly(result)
    assert elapsed < 3 * 0.5 + 1.5
    assert keyed.count("POST", SUBMIT_PATH) <= 3
    assert [e.name for e in keyed.state.experiments].count("slow") == 0


def test_a_retry_after_longer_than_the_budget_is_refused_at_once(run, keyed) -> None:
    keyed.inject("429", path=PROJECTS, retry_after=119)
    result, elapsed = timed(run, "arena", "--request-timeout", "5", "projects", "list")
    output = failed_cleanly(result)
    assert "(429)" in output and "asked to wait 119 s before retrying" in output
    assert "this request has left" in output and "--request-timeout" in output
    assert elapsed < 2 and keyed.count("GET", PROJECTS) == 1


def test_a_retry_after_within_the_budget_is_waited_for_and_announced(
    run, keyed, monkeypatch
) -> None:
    monkeypatch.setattr(client_module, "NOTICE_AFTER_S", 0.1)  # announce waits over 0.1 s
    keyed.inject("429", path=PROJECTS, retry_after=0.3)
    result, elapsed = timed(run, "arena", "--request-timeout", "1", "projects", "list")
    assert result.exit_code == 0, result.output
    assert "waiting 0.3 s: Arena asked to retry GET /api/cli/v1/projects later (HTTP 429)" in (
        result.stderr
    )
    assert 0.3 <= elapsed < 2 and keyed.count("GET", PROJECTS) == 2


def test_login_never_waits_longer_than_its_timeout(run, arena_env) -> None:
    arena_env.settings.device_interval = 100_000  # the server asks to poll once a day
    arena_env.settings.auto_approve_after = None
    result, elapsed = timed(run, "login", "--timeout", "0.5")
    assert "Login timed out after 0.5 s" in failed_cleanly(result)
    assert elapsed < 2


def test_a_login_poll_is_cut_off_at_the_login_timeout(run, arena_env) -> None:
    arena_env.settings.auto_approve_after = None
    arena_env.inject("drip_headers", path=TOKEN_PATH, times=50, seconds=0.05, body=b"{}")
    result, elapsed = timed(run, "login", "--timeout", "0.7", "--request-timeout", "10")
    assert "Login timed out after 0.7 s" in failed_cleanly(result)
    assert elapsed < 2


# -- redirects stay on the configured origin ---------------------------------------------------


def _metrics_args(tmp_path: Any) -> tuple[str, ...]:
    target = str(tmp_path / "m.csv")
    return ("arena", "experiments", "metrics", "cartpole-dqn", "--output-file", target)


API_CASES = [
    ("GET", USER, ("arena", "user", "profile")),
    ("GET", CREDITS, ("arena", "user", "credits")),
    ("GET", RESOURCES, ("arena", "resources", "list")),
    ("GET", PROJECTS, ("arena", "projects", "list")),
    ("GET", PROJECTS, ("arena", "projects", "set-default", "demo")),
    ("POST", f"{CLI}/projects/create", ("arena", "projects", "create", "p")),
    ("GET", ENVIRONMENTS, ("arena", "environments", "list")),
    ("POST", VALIDATE, ("arena", "environments", "validate", "GridWorld")),
    (
        "POST",
        f"{CLI}/environments/create-and-validate",
        ("arena", "environments", "upload", "R", "--source", str(ROOT / "tests" / "envs")),
    ),
    ("GET", EXPERIMENTS, ("arena", "experiments", "list", "--project", "demo")),
    ("POST", f"{CLI}/experiments/jobs/stop", ("arena", "experiments", "stop", "lunar-ppo")),
    (
        "POST",
        f"{CLI}/experiments/jobs/resume",
        ("arena", "experiments", "resume", "cartpole-dqn", "--max-steps", "9"),
    ),
    ("GET", CHECKPOINTS, ("arena", "experiments", "checkpoints", "cartpole-dqn")),
    ("GET", f"{CLI}/experiments/metrics", "metrics"),
    (
        "POST",
        f"{CLI}/experiments/jobs/submit",
        ("train", str(DQN), "--backend", "arena", "--project", "demo"),
    ),
]


STATUSES = (307, 308, 302, 303, 301)  # each endpoint gets one of them


@pytest.mark.parametrize(
    ("method", "path", "args", "status"),
    [(*case, STATUSES[index % len(STATUSES)]) for index, case in enumerate(API_CASES)],
    ids=lambda c: str(c)[:40],
)
def test_a_cross_origin_redirect_of_an_api_request_is_refused(
    run, keyed, foreign, tmp_path, method, path, args, status
) -> None:
    args = _metrics_args(tmp_path) if args == "metrics" else args
    keyed.inject("redirect", path=path, method=method, status=status, location=foreign.url)
    output = failed_cleanly(run(*args))
    assert f"127.0.0.1:{foreign.url.rsplit(':', 1)[1]}" in output
    assert "redirect" in output.lower()
    assert foreign.requests == []


@pytest.mark.parametrize("path", [DEVICE_AUTH_PATH, TOKEN_PATH])
def test_the_device_login_never_follows_a_foreign_redirect(run, arena_env, foreign, path) -> None:
    arena_env.inject("redirect", path=path, status=307, location=foreign.url)
    output = failed_cleanly(run("login"))
    assert foreign.url.removeprefix("http://") in output
    assert foreign.requests == []


def test_a_refresh_token_is_never_sent_to_a_foreign_origin(run, arena_env, foreign) -> None:
    assert run("login").exit_code == 0
    arena_env.expire_access_tokens()
    arena_env.inject("redirect", path=TOKEN_PATH, status=307, location=foreign.url)
    output = failed_cleanly(run("arena", "projects", "list"))
    assert foreign.url.removeprefix("http://") in output
    arena_env.inject("redirect", path=LOGOUT_PATH, status=307, location=foreign.url)
    assert run("logout").exit_code == 0  # ending the session on the server is best effort
    assert foreign.requests == []


def test_a_same_origin_redirect_is_followed(run, keyed) -> None:
    keyed.inject("redirect", path=PROJECTS, status=307, location=keyed.url)
    result = run("arena", "projects", "list")
    assert result.exit_code == 0, result.output
    assert "demo" in result.output and keyed.count("GET", PROJECTS) == 2


# -- what is read, and what is shown, is capped ------------------------------------------------


def test_a_huge_reply_is_abandoned_at_the_cap(run, keyed, small_cap) -> None:
    fault = keyed.inject("huge", path=PROJECTS, size=64 * 2**20)
    output = failed_cleanly(run("arena", "projects", "list"))
    assert "too large" in output and "64 KiB" in output
    assert fault.sent < fault.size // 2
    assert keyed.count("GET", PROJECTS) == 1  # not worth a retry


def test_a_declared_content_length_over_the_cap_is_refused_before_reading(
    run, keyed, small_cap
) -> None:
    fault = keyed.inject("huge", path=USER, size=2**30, chunked=False)
    output = failed_cleanly(run("arena", "user", "profile"))
    assert "too large" in output and "1073741824 bytes" in output
    assert fault.sent < 32 * 2**20


def test_a_progress_stream_line_has_its_own_cap(run, keyed, small_cap) -> None:
    fault = keyed.inject(
        "huge", path=VALIDATE, size=64 * 2**20, content_type="application/x-ndjson"
    )
    output = failed_cleanly(run("arena", "environments", "validate", "GridWorld"))
    assert "line" in output and "64 KiB" in output
    assert fault.sent < fault.size // 2


@pytest.mark.parametrize(
    "body",
    ["E" * 5_000_000, {"message": "M" * 100_000, "details": "D" * 100_000, "more": ["x"] * 9999}],
    ids=["text", "json"],
)
def test_an_error_body_is_shown_cut_short_on_one_line(run, keyed, body) -> None:
    keyed.inject("status", path=f"{CLI}/projects/create", status=400, body=body)
    output = failed_cleanly(run("arena", "projects", "create", "p"))
    assert len(output) < 2000, output[:3000]
    assert all(len(line) < 600 for line in output.splitlines())
    assert "cut" in output


# -- replies of the wrong shape ----------------------------------------------------------------

SHAPES = [
    (RESOURCES, ("resources", "list"), {"tiers": [1, 2]}),
    (RESOURCES, ("resources", "list", "--json"), {"tiers": {"a": 1}}),
    (RESOURCES, ("resources", "list"), {"tiers": {"a": {"price_per_node_hour": "x"}, "b": {}}}),
    (RESOURCES, ("resources", "list"), [1]),
    (ENVIRONMENTS, ("environments", "list"), {"GridWorld": [1]}),
    (ENVIRONMENTS, ("environments", "list"), {"GridWorld": {"v1": 3}}),
    (ENVIRONMENTS, ("environments", "list", "--json"), ["GridWorld"]),
    (EXPERIMENTS, ("experiments", "list", "--project", "demo"), [1, 2]),
    (EXPERIMENTS, ("experiments", "list", "--project", "demo"), {"a": 1}),
    (CHECKPOINTS, ("experiments", "checkpoints", "cartpole-dqn"), [1]),
    (CHECKPOINTS, ("experiments", "checkpoints", "cartpole-dqn"), [{"steps": 1}, "x"]),
    (PROJECTS, ("projects", "list"), [1]),
    (PROJECTS, ("projects", "list"), [{"name": ["x"], "type": "t", "description": ""}]),
    (PROJECTS, ("projects", "set-default", "demo"), {"name": "demo"}),
    (USER, ("user", "profile"), [1]),
    (USER, ("user", "profile", "--json"), "someone"),
]


@pytest.mark.parametrize(("path", "args", "body"), SHAPES, ids=lambda c: str(c)[:30])
def test_a_reply_of_the_wrong_shape_is_a_clean_error(run, keyed, path, args, body) -> None:
    keyed.inject("status", path=path, status=200, body=body)
    output = failed_cleanly(run("arena", *args))
    assert f"Arena sent an unexpected reply to GET {path}: " in output


def test_metric_names_of_the_wrong_shape_are_a_clean_error(keyed) -> None:
    keyed.inject("status", path=f"{CLI}/experiments/metrics", status=200, body={"metrics": "abc"})
    client = ArenaClient(api_key=KEY, base_url=keyed.url)
    with client, pytest.raises(client_module.ArenaAPIError, match="unexpected reply to GET"):
        client.list_metric_names("cartpole-dqn")


# -- credentials the server echoes are never shown ---------------------------------------------


def _echoing(server: ArenaServer) -> None:
    server.state.user.update(api_key=ECHOED, note=f"your key is {KEY}")
    server.state.projects[0]["access_token"] = ECHOED
    server.state.tiers["arena-small"]["client_secret"] = ECHOED
    server.state.experiments[0].checkpoints[0]["downloadToken"] = ECHOED
    rows = [{"name": "x", "api_key": ECHOED, "spec": {"apiKey": ECHOED, "password": ECHOED}}]
    server.inject("status", path=EXPERIMENTS, status=200, body=rows, times=2)
    credits = {"credits": 5, "refresh_token": ECHOED, "note": KEY}
    server.inject("status", path=CREDITS, status=200, body=credits, times=2)
    catalogue = {"GridWorld": {"v1": {"validated": True, "secret": ECHOED}}}
    server.inject("status", path=ENVIRONMENTS, status=200, body=catalogue)


ECHOING_COMMANDS = [
    ("user", "profile", "--json"),
    ("projects", "list", "--json"),
    ("resources", "list", "--json"),
    ("experiments", "checkpoints", "cartpole-dqn", "--json"),
    ("experiments", "checkpoints", "cartpole-dqn"),
    ("experiments", "list", "--project", "demo"),
    ("experiments", "list", "--project", "demo", "--json"),
    ("user", "credits"),
    ("user", "credits", "--json"),
    ("environments", "list", "--json"),
]


def test_echoed_credentials_are_masked_in_tables_and_json(run, keyed) -> None:
    _echoing(keyed)
    for args in ECHOING_COMMANDS:
        result = run("arena", *args)
        assert result.exit_code == 0, result.output
        assert ECHOED not in result.output and KEY not in result.output, (args, result.output)
    masked = run("arena", "user", "profile", "--json").output
    assert json.loads(masked)["api_key"] == f"{ECHOED[:4]}…"
    assert "[redacted]" in json.loads(masked)["note"]


def test_echoed_credentials_are_masked_in_errors_and_progress_events(run, keyed) -> None:
    body = {"message": f"bad key {KEY}", "api_key": ECHOED, "token": ECHOED}
    keyed.inject("status", path=f"{CLI}/projects/create", status=400, body=body)
    output = failed_cleanly(run("arena", "projects", "create", "p"))
    assert ECHOED not in output and KEY not in output
    events = [
        {"kind": "status", "stage": "validation", "status": "running", "message": f"key {KEY}"},
        {"kind": "status", "stage": "validation", "status": "completed", "message": "ok"},
    ]
    stream = "".join(json.dumps(event) + "\n" for event in events)
    keyed.inject("status", path=VALIDATE, status=200, body=stream)
    result = run("arena", "environments", "validate", "GridWorld")
    assert result.exit_code == 0, result.output
    assert KEY not in result.output and "[redacted]" in result.output
