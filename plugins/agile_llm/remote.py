"""Environments hosted behind a URL (``environment.env_url``), played over OpenEnv's session
protocol.

An OpenEnv server keeps an environment per *session*: a WebSocket opened at ``<url>/ws``
(``http`` becomes ``ws``, ``https`` becomes ``wss``). The server makes a fresh environment when
the session opens and discards it when the session closes. Its plain ``POST /reset`` and
``POST /step`` make a new environment for each request, so an episode of several turns can only
be played over a session. Each message is one JSON text:

- ``{"type": "reset", "data": {"seed": 7}}`` (no ``seed`` without one) opens an episode;
- ``{"type": "step", "data": {"message": "the model's text"}}`` plays a turn (the field is
  ``environment.action_field``);
- ``{"type": "close"}`` ends the session;

and the server answers each reset and step with
``{"type": "observation", "data": {"observation": {...}, "reward": 1.0, "done": false}}``, or
``{"type": "error", "data": {"message": "...", "code": "..."}}``. An observation that carries
``"truncated": true`` ended by truncation rather than termination; a ``null`` reward is 0.

:class:`RemoteEnvironment` presents such a server as a text environment (``reset(seed)``,
``step(text)``, ``close()``, ``max_turns``), one session per instance; :func:`replica_factory`
deals a list of replica URLs round-robin, one per environment made.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import itertools
import json
import math
import os
import random
import ssl
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import httpcore
import httpx

from agile_cli import TrainingError
from agile_cli.helpers import printable

#: Seconds one message may take when ``environment.request_timeout_s`` is not given.
DEFAULT_REQUEST_TIMEOUT_S = 300.0
#: Seconds to open a session: connect, and have the server accept the upgrade.
CONNECT_TIMEOUT_S = 30.0
#: The most bytes one reply of the server may hold.
MAX_REPLY_BYTES = 8 * 1024 * 1024
#: Tries a reset makes to reach the server before it gives up.
RESET_ATTEMPTS = 4
#: Seconds before the first retry of a reset; each later one waits twice as long (with jitter).
RESET_BACKOFF_S = 0.25
#: Statuses of a server that may answer later (a proxy before it, or it is starting).
RETRIED_STATUS = frozenset({502, 503, 504})

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455's fixed handshake suffix
_TEXT, _BINARY, _CLOSE, _PING, _PONG = 0x1, 0x2, 0x8, 0x9, 0xA
_CHUNK = 1 << 16
_SHOWN = 200
_SCHEMES = {"http": "http", "ws": "http", "https": "https", "wss": "https"}
_TIMEOUT_HINT = (
    "raise environment.request_timeout_s (0: no bound), or make the environment answer sooner"
)
_SERVER_HINT = "check that env_url is an OpenEnv server and that it is healthy"


class _Stream(Protocol):
    """The connection a server handed over when it accepted the upgrade."""

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes: ...

    def write(self, buffer: bytes, timeout: float | None = None) -> None: ...

    def close(self) -> None: ...


class _Failure(Exception):
    """A failed exchange with the server: why, whether a fresh session may succeed where this
    one failed (worth a retry at a reset), and how to fix it."""

    def __init__(self, reason: str, *, retry: bool = False, hint: str = _SERVER_HINT) -> None:
        super().__init__(reason)
        self.reason, self.retry, self.hint = reason, retry, hint


def shown_url(url: str) -> str:
    """``url`` as messages may show it: without ``user:password@``, query or fragment, which
    may hold credentials."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "<an unreadable URL>"
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    return printable(urlunsplit((parts.scheme, netloc, parts.path, "", "")))


def _endpoint(url: str) -> str:
    """The ``http(s)`` address of the session endpoint of the server at ``url``."""
    parts = urlsplit(url.strip())
    scheme = _SCHEMES.get(parts.scheme.lower())
    if scheme is None or not parts.hostname:
        raise ValueError("it is not an http:// or https:// URL with a host")
    _ = parts.port  # a port that is not a number is refused here
    path = parts.path.rstrip("/") + "/ws"
    endpoint = urlunsplit((scheme, parts.netloc, path, parts.query, ""))
    httpx.URL(endpoint)  # what httpx cannot send is refused now, not at the first reset
    return endpoint


def _secrets(url: str) -> list[str]:
    """The parts of ``url`` no message may show: its userinfo and its query."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    found = [url, userinfo, parts.password or "", parts.query]
    return sorted((s for s in found if len(s) >= 3), key=len, reverse=True)


def message_timeout(request_timeout_s: float | None) -> float | None:
    """Seconds a message may take: ``None`` is the default bound, ``0`` is no bound."""
    if request_timeout_s is None:
        return DEFAULT_REQUEST_TIMEOUT_S
    if not math.isfinite(request_timeout_s) or request_timeout_s < 0:
        raise TrainingError(
            f"environment.request_timeout_s is {request_timeout_s!r}",
            "give seconds (a number of 0 or more; 0: no bound)",
        )
    return float(request_timeout_s) or None


def _cut(text: str) -> str:
    """``text`` from a server, printable, on one line and short."""
    text = printable(" ".join(text.split()))
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


# -- the session: WebSocket frames over the upgraded connection ---------------------------------


def _left(deadline: float | None, timeout: float | None) -> float | None:
    """Seconds left before ``deadline`` (None: no bound), or a timeout failure if none are."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Failure(f"no reply within {timeout:g} s", hint=_TIMEOUT_HINT)
    return left


def _masked(payload: bytes, mask: bytes) -> bytes:
    """``payload`` XOR-ed with the repeated 4-byte ``mask`` (RFC 6455, 5.3)."""
    if not payload:
        return b""
    key = (mask * (len(payload) // 4 + 1))[: len(payload)]
    mixed = int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")
    return mixed.to_bytes(len(payload), "big")


def client_frame(opcode: int, payload: bytes) -> bytes:
    """One final, masked frame, as a client sends it."""
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | size)
    elif size < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, size)
    mask = os.urandom(4)
    return head + mask + _masked(payload, mask)


class _Session:
    """One open session, the environment the server made for it: JSON messages sent, text
    replies read, at most ``limit`` bytes each, each exchange within ``timeout`` seconds."""

    def __init__(
        self,
        client: httpx.Client,
        response: httpx.Response,
        stream: _Stream,
        limit: int,
        timeout: float | None,
    ) -> None:
        self.client, self.response, self.stream = client, response, stream
        self.limit, self.timeout = limit, timeout
        self.buffer = b""

    def send(self, message: dict[str, Any], deadline: float | None) -> None:
        """Send ``message`` as one JSON text frame."""
        self._write(client_frame(_TEXT, json.dumps(message).encode("utf-8")), deadline)

    def receive(self, deadline: float | None) -> str:
        """The next whole text message, answering pings on the way."""
        parts: list[bytes] = []
        kind: int | None = None
        while True:
            final, opcode, payload = self._frame(deadline, self.limit - sum(map(len, parts)))
            if opcode >= _CLOSE:
                self._control(opcode, payload, deadline)
                continue
            if (opcode == 0) != (kind is not None) or opcode not in (0, _TEXT, _BINARY):
                raise _Failure(f"sent a WebSocket frame out of order (opcode {opcode})")
            kind = kind or opcode
            parts.append(payload)
            if final:
                break
        if kind != _TEXT:
            raise _Failure("sent a binary message where JSON text was expected")
        try:
            return b"".join(parts).decode("utf-8")
        except UnicodeDecodeError:
            raise _Failure("sent a message that is not UTF-8 text") from None

    def _frame(self, deadline: float | None, room: int) -> tuple[bool, int, bytes]:
        """One frame: whether it ends its message, its opcode and its payload, which is refused
        unread when a data frame's would take the message past ``room`` bytes."""
        first, second = self._exact(2, deadline)
        final, opcode, size = bool(first & 0x80), first & 0x0F, second & 0x7F
        if first & 0x70 or second & 0x80:
            raise _Failure("sent a WebSocket frame with reserved bits or a mask set")
        if size == 126:
            (size,) = struct.unpack("!H", self._exact(2, deadline))
        elif size == 127:
            (size,) = struct.unpack("!Q", self._exact(8, deadline))
        if opcode >= _CLOSE and (size > 125 or not final):
            raise _Failure("sent a WebSocket control frame that is too long or fragmented")
        if opcode < _CLOSE and size > room:
            raise _Failure(
                f"sent a reply of more than {self.limit:,} bytes; it was refused unread",
                hint="make the environment's observations smaller",
            )
        return final, opcode, self._exact(size, deadline)

    def _control(self, opcode: int, payload: bytes, deadline: float | None) -> None:
        """Answer a ping, skip a pong; a close ends the session."""
        if opcode == _PING:
            self._write(client_frame(_PONG, payload), deadline)
        elif opcode == _CLOSE:
            code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
            why = _cut(payload[2:].decode("utf-8", "replace"))
            said = f" (code {code}{': ' + why if why else ''})" if code is not None else ""
            raise _Failure(f"the server closed the session{said}", retry=True)
        elif opcode != _PONG:
            raise _Failure(f"sent an unknown WebSocket control frame (opcode {opcode})")

    def _exact(self, size: int, deadline: float | None) -> bytes:
        """The next ``size`` bytes, read no further than they go."""
        while len(self.buffer) < size:
            want = min(size - len(self.buffer), _CHUNK)
            try:
                chunk = self.stream.read(want, timeout=_left(deadline, self.timeout))
            except httpcore.TimeoutException:
                raise _Failure(f"no reply within {self.timeout:g} s", hint=_TIMEOUT_HINT) from None
            except (httpcore.NetworkError, OSError) as error:
                raise _Failure(f"the connection broke ({_cut(str(error))})", retry=True) from None
            if not chunk:
                raise _Failure("the server closed the connection", retry=True)
            self.buffer += chunk
        taken, self.buffer = self.buffer[:size], self.buffer[size:]
        return taken

    def _write(self, data: bytes, deadline: float | None) -> None:
        """Send ``data`` whole before ``deadline``."""
        try:
            self.stream.write(data, timeout=_left(deadline, self.timeout))
        except httpcore.TimeoutException:
            raise _Failure(
                f"could not send within {self.timeout:g} s", hint=_TIMEOUT_HINT
            ) from None
        except (httpcore.NetworkError, OSError) as error:
            raise _Failure(f"the connection broke ({_cut(str(error))})", retry=True) from None

    def close(self, polite: bool = True) -> None:
        """End the session: ``polite``, as OpenEnv's clients do (a ``close`` message, then a
        close frame, without waiting long on a server that does not read), else at once (as
        after an exchange stopped half way, when the connection is in no state to say more)."""
        deadline = time.monotonic() + 1.0
        try:
            with contextlib.suppress(_Failure):
                if not polite:
                    return
                self.send({"type": "close"}, deadline)
                self._write(client_frame(_CLOSE, struct.pack("!H", 1000)), deadline)
        finally:
            for closing in (self.response.close, self.stream.close, self.client.close):
                with contextlib.suppress(httpx.HTTPError, httpcore.NetworkError, OSError):
                    closing()


@functools.cache
def _tls() -> ssl.SSLContext:
    """The TLS settings of every session (made once: making them takes tens of milliseconds)."""
    return httpx.create_ssl_context()


def _accept_key(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` a server that accepts the handshake key ``key`` answers."""
    return base64.b64encode(hashlib.sha1((key + _GUID).encode("ascii")).digest()).decode("ascii")


def _accepted(response: httpx.Response, key: str) -> _Stream:
    """The connection of a response that accepted the session, or why it did not."""
    status = response.status_code
    if status != 101:
        hint = (
            "env_url must be an OpenEnv server's root URL (its sessions open at <url>/ws); "
            "one that needs credentials takes them as https://user:password@host"
            if status in (401, 403, 404, 405)
            else _SERVER_HINT
        )
        phrase = _cut(response.reason_phrase or "")
        raise _Failure(
            f"the server answered HTTP {status} {phrase}".rstrip() + " to opening a session",
            retry=status in RETRIED_STATUS,
            hint=hint,
        )
    upgrade = response.headers.get("upgrade", "").lower()
    if upgrade != "websocket" or response.headers.get("sec-websocket-accept") != _accept_key(key):
        raise _Failure("the server did not accept the WebSocket session properly")
    stream = response.extensions.get("network_stream")
    if stream is None:
        raise _Failure("the session's connection could not be taken over from httpx")
    return stream


# -- replies -------------------------------------------------------------------------------------


def _reply(text: str) -> dict[str, Any]:
    """The ``data`` of an ``observation`` reply, or why the reply is not one."""
    try:
        reply = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise _Failure(f"sent a reply that is not JSON ({_cut(str(error))})") from None
    if not isinstance(reply, dict):
        raise _Failure(f"sent a JSON {type(reply).__name__}, not an object, as its reply")
    data = reply.get("data")
    if reply.get("type") == "error":
        raise _server_error(data)
    if reply.get("type") != "observation" or not isinstance(data, dict):
        keys = _cut(", ".join(map(str, list(reply)[:10])))
        raise _Failure(
            f'sent a reply that is not {{"type": "observation", "data": {{...}}}} (it has: '
            f"{keys or 'nothing'})"
        )
    return data


def _server_error(data: Any) -> _Failure:
    """The failure an ``error`` reply reports; a full server is worth a retry at a reset."""
    details = data if isinstance(data, dict) else {}
    message, code = details.get("message"), details.get("code")
    said = _cut(message) if isinstance(message, str) and message else "no message"
    code = _cut(code) if isinstance(code, str) else "no code"
    hint = (
        "the server refused the action: check environment.action_field, the action field "
        "the model's text is sent in"
        if code == "VALIDATION_ERROR"
        else "raise the server's max_concurrent_envs, or add replicas to env_url"
        if code == "CAPACITY_REACHED"
        else "the error is the environment's: see the server's log"
    )
    return _Failure(
        f"the server answered with an error ({code}): {said}",
        retry=code == "CAPACITY_REACHED",
        hint=hint,
    )


def _reward(value: Any) -> float:
    """A reply's reward: a finite number (a boolean is 0 or 1), or 0 when it has none."""
    if value is None:
        return 0.0
    if not isinstance(value, int | float) or not math.isfinite(value):
        shown = _cut(json.dumps(value) if not isinstance(value, float) else repr(value))
        raise _Failure(
            f"sent the reward {shown}, not a finite number",
            hint="the environment's rewards must be finite numbers (or null)",
        )
    return float(value)


def _outcome(data: dict[str, Any]) -> tuple[dict[str, Any] | str, float, bool]:
    """A reply's observation, reward and ``done`` flag."""
    observation = data.get("observation", {})
    if not isinstance(observation, dict | str):
        raise _Failure(f"sent a {type(observation).__name__} as the observation, not a JSON object")
    done = data.get("done", False)
    if not isinstance(done, bool):
        raise _Failure(f"sent {_cut(json.dumps(done))} as done, not true or false")
    return observation, _reward(data.get("reward")), done


def _tool_text(result: Any) -> str | None:
    """The text of an MCP tool result: its text content blocks, else its ``data`` text."""
    if not isinstance(result, dict):
        return None
    blocks = result.get("content")
    texts = [
        block["text"]
        for block in (blocks if isinstance(blocks, list) else [])
        if isinstance(block, dict) and isinstance(block.get("text"), str)
    ]
    if texts:
        return "\n".join(texts)
    data = result.get("data")
    return data if isinstance(data, str) else None


def observation_text(observation: dict[str, Any] | str, field: str | None = None) -> str | None:
    """The text of an observation: ``field`` when given and it holds text, else the standard
    shapes (an MCP tool ``result``, a ``prompt``, an ``error``), else its one text field;
    None when it has none of them."""
    if isinstance(observation, str):
        return observation
    if field is not None and isinstance(observation.get(field), str):
        return str(observation[field])
    found = _tool_text(observation.get("result"))
    if found is not None:
        return found
    if isinstance(observation.get("prompt"), str):
        return str(observation["prompt"])
    error = observation.get("error")
    if error:
        message = error.get("message") if isinstance(error, dict) else None
        said = message or error
        return "Error: " + (said if isinstance(said, str) else json.dumps(said))
    texts = [value for value in observation.values() if isinstance(value, str)]
    return texts[0] if len(texts) == 1 else None


def _info(observation: dict[str, Any] | str) -> dict[str, Any]:
    """What an observation says besides its text: its ``metadata`` and ``rubric_scores``."""
    if not isinstance(observation, dict):
        return {}
    metadata = observation.get("metadata")
    info = dict(metadata) if isinstance(metadata, dict) else {}
    if "rubric_scores" in observation:
        info.setdefault("rubric_scores", observation["rubric_scores"])
    return info


# -- the environment -----------------------------------------------------------------------------


class RemoteEnvironment:
    """The environment an OpenEnv server at ``url`` hosts, as a text environment: each
    instance opens its own session (the server's environment) at its first reset.

    :param url: the server's root URL (``http://`` or ``https://``; ``user:password@`` is
        sent as Basic credentials and never shown).
    :param max_turns: turns an episode may take at most (``environment.max_turns``).
    :param request_timeout_s: seconds each message may take (sent and answered); None: 300 s;
        0: no bound.
    :param action_field: the action field the model's text is sent in (None: ``message``).
    :param observation_field: the observation field holding its text (None: the standard
        shapes, or its one text field).
    :param connect_timeout_s: seconds to open a session.
    :param max_reply_bytes: the most bytes one reply may hold; a longer one is refused unread.
    :param reset_attempts: tries a reset makes when the server cannot be reached, answers
        502, 503 or 504, is full, or drops the session; each waits twice as long as the last.
    :param backoff_s: seconds before the first retry.
    :param answer_tool: with it, the server may be an MCP environment: its tools are listed
        once a session (:attr:`tools`) and the model's calls run by :meth:`call_tool`, as
        2.58 speaks to one (a server that refuses the listing is a text environment).
    :raises TrainingError: ``url`` or ``request_timeout_s`` cannot be used.
    """

    def __init__(
        self,
        url: str,
        *,
        max_turns: int | None = None,
        request_timeout_s: float | None = None,
        action_field: str | None = "message",
        observation_field: str | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        reset_attempts: int = RESET_ATTEMPTS,
        backoff_s: float = RESET_BACKOFF_S,
        answer_tool: str | None = None,
    ) -> None:
        self.url = shown_url(url)
        self.answer_tool = answer_tool
        self._tools: list[dict[str, Any]] | None = None  # listed once a session
        try:
            self._endpoint = _endpoint(url)
        except (ValueError, httpx.InvalidURL) as error:
            reason = _cut(str(error).replace(url, self.url))
            raise TrainingError(
                f"environment.env_url: {self.url} cannot be used ({reason})",
                "give the server's URL, e.g. http://127.0.0.1:8000",
            ) from None
        self._secrets = _secrets(url)
        self.max_turns = max_turns
        self.system_prompt: str | None = None
        self.action_field = action_field or "message"
        self.observation_field = observation_field
        self.message_timeout_s = message_timeout(request_timeout_s)
        self._connect_timeout = connect_timeout_s
        self._limit = max_reply_bytes
        self._attempts = max(1, reset_attempts)
        self._backoff = backoff_s
        self._session: _Session | None = None

    def __repr__(self) -> str:
        """The environment, named by its URL without credentials."""
        return f"RemoteEnvironment({self.url!r})"

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Open an episode (and the session, if none is open): its opening text and info."""
        data = {} if seed is None or int(seed) < 0 else {"seed": int(seed)}
        reply = self._at_boundary({"type": "reset", "data": data})
        try:
            observation, _, _ = _outcome(reply)
            return self._text(observation, done=False), _info(observation)
        except _Failure as failure:
            self._drop()
            raise self._error("reset", failure) from None

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play one turn: the environment's answer, the reward, whether the episode ended
        (terminated, truncated), and the info. A failed step is never sent again: its
        environment may have taken it, and a new session would be a new environment."""
        return self._played({self.action_field: str(action)}, "step")

    def _played(
        self, action: dict[str, Any], method: str
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Send one action over the open session: the 5-tuple of its observation."""
        if self._session is None:
            raise TrainingError(
                f"{self.url}: {method}() has no session to play in",
                "call reset() first; after a failure the episode cannot go on, because a new "
                "session would be a new environment",
            )
        try:
            observation, reward, done = _outcome(self._exchange({"type": "step", "data": action}))
            text = self._text(observation, done=done)
        except _Failure as failure:
            self._drop()
            raise self._error(method, failure) from None
        truncated = isinstance(observation, dict) and observation.get("truncated") is True
        return text, reward, done and not truncated, truncated, _info(observation)

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """An MCP environment's tools as function schemas (listed once a session, after a
        reset); None without ``answer_tool`` or a session; empty for a text environment."""
        if self.answer_tool is None or self._session is None:
            return None
        if self._tools is None:
            self._tools = self._listed()
        return self._tools

    def call_tool(
        self, name: str, arguments: dict[str, Any]
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Run one tool of an MCP environment: its result's text, the reward, whether the
        episode ended (terminated, truncated), and the info; never sent twice, as a step."""
        action = {"type": "call_tool", "tool_name": name, "arguments": arguments, "metadata": {}}
        return self._played(action, "call_tool")

    def close(self) -> None:
        """End the session, which discards the server's environment."""
        self._drop()

    def _listed(self) -> list[dict[str, Any]]:
        """The session's MCP tools (2.58's ``ListToolsAction`` sent as a step), as OpenAI
        function schemas; none where the server refuses the action (a text environment)."""
        try:
            data = self._exchange({"type": "step", "data": {"type": "list_tools", "metadata": {}}})
        except _Failure as failure:
            if "VALIDATION_ERROR" in failure.reason:
                return []
            self._drop()
            raise self._error("list_tools", failure) from None
        observation = data.get("observation")
        listed = observation.get("tools") if isinstance(observation, dict) else None
        return (
            [_function(tool) for tool in listed if isinstance(tool, dict)]
            if isinstance(listed, list)
            else []
        )

    def _at_boundary(self, message: dict[str, Any]) -> dict[str, Any]:
        """``message``'s reply, retried on a fresh session while the server cannot be reached
        or is busy (it is an episode's start: a new environment is what is wanted anyway)."""
        attempt = 0
        while True:
            attempt += 1
            try:
                if self._session is None:
                    self._session = self._dial()
                return self._exchange(message)
            except _Failure as failure:
                self._drop()
                if not failure.retry or attempt >= self._attempts:
                    tries = f" (after {attempt} tries)" if attempt > 1 else ""
                    raise self._error("reset", failure, tries) from None
            time.sleep(self._backoff * 2 ** (attempt - 1) * random.uniform(0.5, 1.0))

    def _dial(self) -> _Session:
        """A new session: the upgrade asked over httpx, its connection kept."""
        key = base64.b64encode(os.urandom(16)).decode("ascii")
        headers = {
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": key,
        }
        client = httpx.Client(timeout=self._connect_timeout, verify=_tls())
        request = client.build_request("GET", self._endpoint, headers=headers)
        try:
            response = client.send(request, stream=True)
        except httpx.TimeoutException:
            client.close()
            raise _Failure(f"no answer within {self._connect_timeout:g} s", retry=True) from None
        except httpx.HTTPError as error:
            client.close()
            raise _Failure(f"cannot connect ({_cut(str(error))})", retry=True) from None
        try:
            stream = _accepted(response, key)
        except _Failure:
            response.close()
            client.close()
            raise
        return _Session(client, response, stream, self._limit, self.message_timeout_s)

    def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message`` and read its reply's data; the session is dropped if anything
        (an interrupt included) stops the exchange half way. A reply that is an error, or
        not an observation, leaves the session to the caller."""
        session = self._session
        assert session is not None
        timeout = self.message_timeout_s
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            session.send(message, deadline)
            said = session.receive(deadline)
        except BaseException:
            self._drop(polite=False)
            raise
        return _reply(said)

    def _text(self, observation: dict[str, Any] | str, *, done: bool) -> str:
        """The observation's text; at the end of an episode, which reads none, it may lack one."""
        text = observation_text(observation, self.observation_field)
        if text is not None or done:
            return text or ""
        assert isinstance(observation, dict)
        keys = _cut(", ".join(map(str, list(observation)[:20])))
        named = f"no {self.observation_field!r} text, " if self.observation_field else ""
        raise _Failure(
            f"sent an observation with {named}no 'prompt', MCP 'result' or 'error', and not "
            f"one text field (it has: {keys or 'nothing'})",
            hint="set environment.observation_field to the observation field holding its text",
        )

    def _error(self, method: str, failure: _Failure, tries: str = "") -> TrainingError:
        """The error a failure of ``method`` raises, the URL's credentials struck from it."""
        reason = failure.reason
        for secret in self._secrets:
            reason = reason.replace(secret, "***")
        return TrainingError(f"{self.url}: {method}() failed{tries}: {reason}", failure.hint)

    def _drop(self, polite: bool = True) -> None:
        """Close the session, if one is open (its tools are listed again on the next)."""
        session, self._session = self._session, None
        self._tools = None
        if session is not None:
            session.close(polite)


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    """An MCP tool (``name``, ``description``, ``input_schema``) as an OpenAI function schema,
    the form chat templates and agile's parsers read."""
    schema = tool.get("input_schema", tool.get("inputSchema"))
    function = {"name": str(tool.get("name") or ""), "description": str(tool.get("description")
                or ""), "parameters": schema if isinstance(schema, dict) else {}}  # fmt: skip
    return {"type": "function", "function": function}


def replica_factory(urls: str | Sequence[str], **options: Any) -> Callable[[], RemoteEnvironment]:
    """What makes one :class:`RemoteEnvironment` per call, on the replicas of ``urls`` in
    turn (round-robin); ``options`` are its keyword arguments.

    :raises TrainingError: no URL is given, or one (or an option) cannot be used.
    """
    replicas = [urls] if isinstance(urls, str) else list(urls)
    if not replicas:
        raise TrainingError(
            "environment.env_url is an empty list", "give at least one server's URL"
        )
    for url in replicas:
        RemoteEnvironment(url, **options)  # refuses a bad URL or option before any episode
    dealt = itertools.count()

    def make() -> RemoteEnvironment:
        """The next replica's environment."""
        return RemoteEnvironment(replicas[next(dealt) % len(replicas)], **options)

    return make
