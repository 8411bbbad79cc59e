"""Environments behind a URL (``environment.env_url``): :mod:`agile_llm.remote` against the
loopback OpenEnv server of :mod:`tests.llm_openenv_server`, well-behaved and hostile."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agile_cli import TrainingError
from agile_llm.remote import (
    DEFAULT_REQUEST_TIMEOUT_S,
    RemoteEnvironment,
    observation_text,
    replica_factory,
    shown_url,
)

from .llm_openenv_server import GUESSES, OPENING, GameServer, closed_url

Serve = Callable[..., GameServer]
FAST = {"request_timeout_s": 2.0, "connect_timeout_s": 2.0, "backoff_s": 0.01}


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start loopback servers (``serve(**behaviour)``), all stopped after the test."""
    started: list[GameServer] = []

    def start(**behaviour: Any) -> GameServer:
        started.append(GameServer(**behaviour).start())
        return started[-1]

    yield start
    for server in started:
        server.stop()


def remote(url: str, **options: Any) -> RemoteEnvironment:
    return RemoteEnvironment(url, max_turns=GUESSES, **{**FAST, **options})


def solve(env: RemoteEnvironment) -> list[tuple[str, float, bool, bool, dict[str, Any]]]:
    """Play the guessing game by halving the range on each hint, to the episode's end."""
    low, high, turns = 0, 9, []
    while True:
        guess = (low + high + 1) // 2
        turns.append(env.step(str(guess)))
        said, _, terminated, truncated, _ = turns[-1]
        if terminated or truncated:
            return turns
        low, high = (guess + 1, high) if said == "Higher." else (low, guess - 1)


def refused(env: RemoteEnvironment, call: str = "reset", *args: Any) -> TrainingError:
    with pytest.raises(TrainingError) as caught:
        getattr(env, call)(*args)
    return caught.value


# -- playing -------------------------------------------------------------------------------------


def test_an_episode_is_played_over_one_session(serve: Serve) -> None:
    server = serve()
    env = remote(server.url)
    assert env.reset(seed=5) == (OPENING, {})
    turns = solve(env)
    assert turns[-1][1:4] == (1.0, True, False)  # rewarded, terminated
    assert all(turn[1] == 0.0 and not turn[2] for turn in turns[:-1])
    env.close()
    deadline = time.monotonic() + 2
    while server.log.messages[-1][1] != {"type": "close"} and time.monotonic() < deadline:
        time.sleep(0.01)
    sent = [message for _, message in server.log.messages]
    assert sent[0] == {"type": "reset", "data": {"seed": 5}}
    assert all(set(m["data"]) == {"message"} for m in sent[1:-1])
    assert sent[-1] == {"type": "close"}
    assert {number for number, _ in server.log.messages} == {1}  # one session throughout


def test_running_out_of_guesses_is_a_truncation(serve: Serve) -> None:
    env = remote(serve().url)
    env.reset(seed=1)
    turns = [env.step("x") for _ in range(GUESSES)]
    assert turns[-1][1:4] == (0.0, False, True)
    assert not any(turn[2] or turn[3] for turn in turns[:-1])


def test_seeds_are_sent_when_usable_and_episodes_repeat(serve: Serve) -> None:
    server = serve()
    env = remote(server.url)
    for seed in (None, -1, 7, 7):
        env.reset(seed=seed)
    resets = [m["data"] for _, m in server.log.messages if m["type"] == "reset"]
    assert resets == [{}, {}, {"seed": 7}, {"seed": 7}]
    env.reset(seed=7)
    first = solve(env)
    env.reset(seed=7)
    assert solve(env) == first


def test_replicas_are_dealt_round_robin(serve: Serve) -> None:
    first, second = serve(), serve()
    make = replica_factory([first.url, second.url], max_turns=GUESSES, **FAST)
    envs = [make() for _ in range(5)]
    assert [env.url for env in envs] == [first.url, second.url] * 2 + [first.url]
    for env in envs:
        env.reset(seed=0)
        env.close()
    assert (first.log.sessions, second.log.sessions) == (3, 2)
    assert replica_factory(first.url)().url == first.url
    with pytest.raises(TrainingError, match="empty list"):
        replica_factory([])


def test_pings_and_fragmented_replies_are_read(serve: Serve) -> None:
    env = remote(serve(ping=True, fragment=7).url)
    assert env.reset(seed=2)[0] == OPENING
    assert solve(env)[-1][1] == 1.0


def test_action_field(serve: Serve) -> None:
    url = serve(action_field="code").url
    env = remote(url)
    env.reset()
    error = refused(env, "step", "3")
    assert "VALIDATION_ERROR" in str(error) and "action_field" in (error.hint or "")
    env = remote(url, action_field="code")
    env.reset()
    assert env.step("3")[0] in {"Higher.", "Lower.", "Right!"}
    assert remote(url, action_field=None).action_field == "message"


def test_observation_field(serve: Serve) -> None:
    url = serve(fields=("board", "status")).url  # two text fields: ambiguous
    error = refused(remote(url))
    assert "board, status" in str(error) and "observation_field" in (error.hint or "")
    env = remote(url, observation_field="board")
    assert env.reset()[0] == OPENING
    assert remote(serve(fields=("text",)).url).reset()[0] == OPENING  # its one text field


def test_observation_text_shapes() -> None:
    assert observation_text("plain") == "plain"
    assert observation_text({"prompt": "p", "other": "o"}) == "p"
    assert observation_text({"prompt": "p", "mine": "m"}, "mine") == "m"
    assert observation_text({"prompt": "p"}, "missing") == "p"  # as 2.58: the shapes next
    blocks = {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert observation_text({"result": blocks}) == "a\nb"
    assert observation_text({"result": {"data": "d"}, "x": "y"}) == "d"
    assert observation_text({"error": {"message": "bad"}}) == "Error: bad"
    assert observation_text({"error": "worse", "a": "1"}) == "Error: worse"
    assert observation_text({"n": 1, "done": True}) is None
    assert observation_text({"a": "1", "b": "2"}) is None


# -- timeouts and bounds -------------------------------------------------------------------------


def test_a_slow_reply_times_out(serve: Serve) -> None:
    env = remote(serve(delay_s=0.5).url, request_timeout_s=0.1)
    started = time.monotonic()
    error = refused(env)
    assert time.monotonic() - started < 0.45
    assert "no reply within 0.1 s" in str(error) and "request_timeout_s" in (error.hint or "")


def test_a_dripping_reply_is_bounded_as_a_whole(serve: Serve) -> None:
    env = remote(serve(drip_s=0.02).url, request_timeout_s=0.2)  # each read is quick
    started = time.monotonic()
    assert "no reply within 0.2 s" in str(refused(env))
    assert time.monotonic() - started < 0.6


def test_request_timeout_s_maps_as_the_manifest_says(serve: Serve) -> None:
    url = serve(delay_s=0.05).url
    assert RemoteEnvironment(url).message_timeout_s == DEFAULT_REQUEST_TIMEOUT_S
    unbounded = remote(url, request_timeout_s=0)
    assert unbounded.message_timeout_s is None
    assert unbounded.reset()[0] == OPENING
    with pytest.raises(TrainingError, match="request_timeout_s"):
        RemoteEnvironment(url, request_timeout_s=-1)


@pytest.mark.parametrize("fragment", [0, 1000])
def test_a_huge_reply_is_refused(serve: Serve, fragment: int) -> None:
    env = remote(serve(pad=100_000, fragment=fragment).url, max_reply_bytes=4096)
    error = refused(env)
    assert "more than 4,096 bytes" in str(error)
    assert str(error).startswith(env.url)


# -- hostile replies -----------------------------------------------------------------------------

HOSTILE = [
    ({"malformed": True}, "not JSON"),
    ({"raw": "[" * 100_000}, "not JSON"),  # too deep for the parser
    ({"raw": "[1, 2]"}, "a JSON list, not an object"),
    ({"wrong_shape": True}, 'not {"type": "observation"'),
    ({"raw": '{"type": "observation", "data": [1]}'}, 'not {"type": "observation"'),
    ({"raw": '{"type": "observation", "data": {"observation": 3}}'}, "int as the observation"),
    ({"raw": '{"type": "observation", "data": {"done": "no"}}'}, '"no" as done'),
    ({"raw": '{"type": "error"}'}, "error (no code): no message"),
    ({"raw": '{"type": "error", "data": {"message": "\\u001b[2Jboom"}}'}, "\\x1b[2Jboom"),
]


@pytest.mark.parametrize(("behaviour", "said"), HOSTILE)
def test_a_hostile_reset_reply_is_a_training_error(
    serve: Serve, behaviour: dict[str, Any], said: str
) -> None:
    env = remote(serve(**behaviour).url)
    error = refused(env)
    assert str(error).startswith(f"{env.url}: reset() failed: ")
    assert said in str(error)


@pytest.mark.parametrize(
    ("behaviour", "said"),
    [
        ({"nan_reward": True}, "reward nan, not a finite number"),
        ({"reward": "1"}, 'reward "1", not a finite number'),
        ({"reward": [1]}, "reward [1], not a finite number"),
        ({"error": "EXECUTION_ERROR"}, "(EXECUTION_ERROR): the environment failed"),
    ],
)
def test_a_hostile_step_reply_is_a_training_error(
    serve: Serve, behaviour: dict[str, Any], said: str
) -> None:
    env = remote(serve(**behaviour).url)
    env.reset(seed=3)
    error = refused(env, "step", "0")
    assert str(error).startswith(f"{env.url}: step() failed: ")
    assert said in str(error)


def test_a_boolean_reward_counts_as_a_number(serve: Serve) -> None:
    env = remote(serve(reward=True).url)
    env.reset(seed=3)
    assert solve(env)[-1][1] == 1.0


def test_credentials_are_sent_but_never_shown(serve: Serve) -> None:
    server = serve(credentials=("agent", "s3cret-pw"))
    port = server.url.rsplit(":", 1)[1]
    secret_url = f"http://agent:s3cret-pw@127.0.0.1:{port}/?token=tok-123"
    env = remote(secret_url)
    assert env.url == f"http://127.0.0.1:{port}/" and "s3cret" not in repr(env)
    assert env.reset()[0] == OPENING
    assert server.log.authorization[-1] == "Basic YWdlbnQ6czNjcmV0LXB3"
    error = refused(remote(f"http://agent:wrong-pw@127.0.0.1:{port}"))
    assert "HTTP 401" in str(error) and "wrong-pw" not in str(error)
    port = closed_url().rsplit(":", 1)[1]
    error = refused(remote(f"http://agent:s3cret-pw@127.0.0.1:{port}?token=tok-123"))
    for secret in ("s3cret", "agent", "tok-123"):
        assert secret not in f"{error} {error.hint}"
    assert shown_url("https://u:p@h:8443/env?k=v#f") == "https://h:8443/env"


@pytest.mark.parametrize("url", ["ftp://host", "http://", "http://host:port", "127.0.0.1:8000"])
def test_an_unusable_url_is_refused_at_once(url: str) -> None:
    with pytest.raises(TrainingError, match="cannot be used"):
        RemoteEnvironment(url)
    with pytest.raises(TrainingError, match="cannot be used"):
        replica_factory(["http://127.0.0.1:1", url])


# -- retries -------------------------------------------------------------------------------------


def test_a_reset_is_retried_while_the_server_is_unavailable(serve: Serve) -> None:
    server = serve(refuse=2)
    assert remote(server.url).reset()[0] == OPENING
    assert server.log.handshakes == 3


def test_a_reset_is_retried_while_the_server_is_full(serve: Serve) -> None:
    server = serve(full=1)
    assert remote(server.url).reset()[0] == OPENING
    assert server.log.sessions == 2


def test_retries_are_bounded(serve: Serve) -> None:
    server = serve(refuse=100)
    error = refused(remote(server.url, reset_attempts=3))
    assert "(after 3 tries)" in str(error) and "HTTP 503" in str(error)
    assert server.log.handshakes == 3
    error = refused(remote(closed_url(), reset_attempts=2))
    assert "(after 2 tries)" in str(error) and "cannot connect" in str(error)


def test_other_statuses_are_not_retried(serve: Serve) -> None:
    server = serve(refuse=1, refuse_status=500)
    assert "HTTP 500" in str(refused(remote(server.url)))
    assert server.log.handshakes == 1
    error = refused(remote(server.url + "/elsewhere"))
    assert "HTTP 404" in str(error) and "root URL" in (error.hint or "")


def test_a_step_is_never_sent_again(serve: Serve) -> None:
    server = serve(drop_on_step=True)
    env = remote(server.url)
    env.reset()
    assert "closed the connection" in str(refused(env, "step", "4"))
    assert "no session" in str(refused(env, "step", "4"))  # the episode is over
    assert server.log.sessions == 1
    assert [m["type"] for _, m in server.log.messages] == ["reset", "step"]


def test_a_step_before_any_reset_is_refused(serve: Serve) -> None:
    assert "call reset() first" in (refused(remote(serve().url), "step", "1").hint or "")


def test_the_client_imports_neither_torch_nor_transformers() -> None:
    code = (
        "import sys, agile_llm.remote; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# -- an MCP environment's tools ------------------------------------------------------------------


def test_an_mcp_environment_lists_its_tools_and_runs_them(serve: Serve) -> None:
    """As 2.58 speaks to one: ListToolsAction and CallToolAction sent as steps over the
    session, the tools read as function schemas, a tool's result read from its content."""
    server = serve(mcp=True, action_field="answer")
    env = remote(server.url, answer_tool="submit_answer", action_field="answer")
    assert env.tools is None  # no session yet
    env.reset(seed=5)
    tools = env.tools
    assert tools is not None and [t["function"]["name"] for t in tools] == ["submit_answer", "hint"]
    assert tools[0] == {"type": "function", "function": {
        "name": "submit_answer", "description": "Guess the digit.",
        "parameters": {"type": "object", "properties": {"answer": {"type": "string"}},
                       "required": ["answer"]}}}  # fmt: skip
    assert env.tools is tools  # listed once a session
    hint = env.call_tool("hint", {})
    assert hint[0] in ("even", "odd") and hint[1:4] == (0.0, False, False)
    secret = next(d for d in range(10) if env.call_tool("submit_answer", {"answer": str(d)})[2])
    sent = [message["data"] for _, message in server.log.messages if message["type"] == "step"]
    assert sent[0] == {"type": "list_tools", "metadata": {}}
    assert sent[1] == {"type": "call_tool", "tool_name": "hint", "arguments": {}, "metadata": {}}
    assert (hint[0] == "even") == (secret % 2 == 0)


def test_a_text_server_refusing_the_listing_keeps_its_session(serve: Serve) -> None:
    server = serve()
    env = remote(server.url, answer_tool="guess")
    env.reset(seed=5)
    assert env.tools == []  # VALIDATION_ERROR: a text environment
    assert solve(env)[-1][1:4] == (1.0, True, False)  # played on in the same session
    assert {number for number, _ in server.log.messages} == {1}


def test_an_unknown_tool_is_answered_with_the_servers_error_text(serve: Serve) -> None:
    env = remote(serve(mcp=True).url, answer_tool="submit_answer")
    env.reset(seed=1)
    said, reward, terminated, truncated, _ = env.call_tool("nope", {})
    assert said == "Error: no tool nope" and (reward, terminated, truncated) == (0.0, False, False)
