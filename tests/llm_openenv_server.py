"""A loopback OpenEnv server for tests: the ``/ws`` session protocol over the standard
library's HTTP server, hosting a tiny game, with switches that make it misbehave.

The game: guess a digit from 0 to 9 (drawn from the reset's seed) in at most
:data:`GUESSES` turns, told "higher" or "lower" after each wrong guess. A right guess ends the
episode with reward 1; running out of guesses truncates it with reward 0.

Each session (one WebSocket connection) is one environment, as on an OpenEnv server. Use
``with GameServer(...) as server:`` (``server.url``, ``server.log``) or ``serve(...)``, which
returns ``(url, stop)``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import random
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Wrong guesses an episode allows before it is truncated.
GUESSES = 4
OPENING = "Guess a digit from 0 to 9. Reply with the digit alone."
_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


@dataclass
class Behaviour:
    """How the server answers; the defaults are a well-behaved OpenEnv server.

    :param delay_s: seconds it waits before each reply.
    :param drip_s: seconds between the bytes of each reply, sent a few at a time.
    :param pad: characters of padding added to each observation (a huge reply).
    :param fragment: bytes per frame: each reply is sent in frames this long (0: one frame).
    :param ping: send a ping before each reply.
    :param raw: each reset and step is answered with this text, as it is.
    :param malformed: replies are not JSON.
    :param wrong_shape: replies are JSON of the wrong shape.
    :param nan_reward: step rewards are NaN.
    :param reward: a step reward sent as it is, in place of the game's.
    :param refuse: handshakes answered ``refuse_status`` before one is accepted.
    :param refuse_status: the status a refused handshake is answered with.
    :param full: sessions answered CAPACITY_REACHED (and closed) before one is served.
    :param error: answer each step with an error reply of this code.
    :param drop_on_step: close the connection, unanswered, at the first step.
    :param fields: the observation's text goes in each of these fields (``prompt``: the
        standard shape); more than one makes the text ambiguous without observation_field.
    :param action_field: the action field a guess is read from; a step without it is refused
        with VALIDATION_ERROR.
    :param credentials: ``(user, password)`` a handshake must carry as Basic credentials.
    :param mcp: an MCP environment: it lists its tools (``answer_tool``, whose
        ``action_field`` argument is the guess, and ``hint``) and runs them; a text action is
        refused with VALIDATION_ERROR.
    :param answer_tool: the name of the tool that takes a guess.
    """

    delay_s: float = 0.0
    drip_s: float = 0.0
    pad: int = 0
    fragment: int = 0
    ping: bool = False
    raw: str | None = None
    malformed: bool = False
    wrong_shape: bool = False
    nan_reward: bool = False
    reward: Any = None
    refuse: int = 0
    refuse_status: int = 503
    full: int = 0
    error: str | None = None
    drop_on_step: bool = False
    fields: tuple[str, ...] = ("prompt",)
    action_field: str = "message"
    credentials: tuple[str, str] | None = None
    mcp: bool = False
    answer_tool: str = "submit_answer"


@dataclass
class Game:
    """One session's environment."""

    secret: int = 0
    guesses: int = 0

    def reset(self, seed: int | None) -> tuple[str, float | None, bool, bool]:
        self.secret = random.Random(seed or 0).randrange(10)
        self.guesses = 0
        return OPENING, None, False, False

    def step(self, guess: str) -> tuple[str, float | None, bool, bool]:
        self.guesses += 1
        said = guess.strip()
        if said == str(self.secret):
            return "Right!", 1.0, True, False
        if self.guesses >= GUESSES:
            return f"Out of guesses; it was {self.secret}.", 0.0, True, True
        if not said.isdigit():
            return "That is not a digit. Guess again.", 0.0, False, False
        return ("Higher." if int(said) < self.secret else "Lower."), 0.0, False, False


@dataclass
class Log:
    """What the server saw: handshakes, sessions served, and every message, by session."""

    handshakes: int = 0
    sessions: int = 0
    messages: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    authorization: list[str | None] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


# -- frames, as a server sends and reads them ----------------------------------------------------


def server_frame(opcode: int, payload: bytes, final: bool = True) -> bytes:
    """One unmasked frame."""
    first = (0x80 if final else 0) | opcode
    size = len(payload)
    if size < 126:
        return struct.pack("!BB", first, size) + payload
    if size < 1 << 16:
        return struct.pack("!BBH", first, 126, size) + payload
    return struct.pack("!BBQ", first, 127, size) + payload


def read_frame(stream: io.BufferedIOBase) -> tuple[int, bytes] | None:
    """A client's next frame (its opcode and unmasked payload), or None at the end."""
    head = stream.read(2)
    if len(head) < 2:
        return None
    size = head[1] & 0x7F
    if size == 126:
        (size,) = struct.unpack("!H", stream.read(2))
    elif size == 127:
        (size,) = struct.unpack("!Q", stream.read(8))
    mask = stream.read(4) if head[1] & 0x80 else b"\0\0\0\0"
    payload = stream.read(size)
    return head[0] & 0x0F, bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def read_message(stream: io.BufferedIOBase) -> str | None:
    """A client's next text message (pongs skipped), or None when it closes."""
    while True:
        frame = read_frame(stream)
        if frame is None or frame[0] == 0x8:
            return None
        if frame[0] == 0x1:
            return frame[1].decode("utf-8")


# -- the server ----------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    """Serves ``GET /ws``: the upgrade, then one session."""

    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        behaviour, log = self.server.behaviour, self.server.log
        self.close_connection = True
        with log.lock:
            log.handshakes += 1
            log.authorization.append(self.headers.get("Authorization"))
            refused = log.handshakes <= behaviour.refuse
        if self.path.split("?")[0] != "/ws":
            return self._plain(404, "Not Found")
        if refused:
            return self._plain(behaviour.refuse_status, "Try later")
        if not self._authorised(behaviour):
            return self._plain(401, "Unauthorized")
        key = self.headers.get("Sec-WebSocket-Key", "")
        if self.headers.get("Upgrade", "").lower() != "websocket" or not key:
            return self._plain(400, "Not a WebSocket upgrade")
        accept = base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        with contextlib.suppress(OSError):
            _Session(self.rfile, self.wfile, self.connection, self.server).run()

    def _authorised(self, behaviour: Behaviour) -> bool:
        if behaviour.credentials is None:
            return True
        token = base64.b64encode(":".join(behaviour.credentials).encode()).decode()
        return self.headers.get("Authorization") == f"Basic {token}"

    def _plain(self, status: int, text: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    behaviour: Behaviour
    log: Log


class _Session:
    """One session's messages and the game it plays."""

    def __init__(
        self, rfile: io.BufferedIOBase, wfile: Any, connection: socket.socket, server: _Server
    ) -> None:
        self.rfile, self.wfile, self.connection = rfile, wfile, connection
        self.behaviour, self.log = server.behaviour, server.log
        self.game = Game()
        with self.log.lock:
            self.log.sessions += 1
            self.number = self.log.sessions

    def run(self) -> None:
        if self.number <= self.behaviour.full:
            error = {"message": "no room for another session", "code": "CAPACITY_REACHED"}
            self.send(json.dumps({"type": "error", "data": error}))
            self.wfile.write(server_frame(0x8, struct.pack("!H", 1013)))
            return
        while (text := read_message(self.rfile)) is not None:
            message = json.loads(text)
            with self.log.lock:
                self.log.messages.append((self.number, message))
            reply = self.answer(message)
            if reply is None:
                return
            self.send(reply)

    def answer(self, message: dict[str, Any]) -> str | None:
        """The reply to one message; None ends the session unanswered."""
        kind, data = message.get("type"), message.get("data") or {}
        if kind == "close":
            return None
        if self.behaviour.raw is not None:
            return self.behaviour.raw
        if kind == "reset":
            return self.observation(*self.game.reset(data.get("seed")))
        if kind != "step":
            return json.dumps({"type": "error", "data": {"message": f"unknown type {kind}"}})
        if self.behaviour.drop_on_step:
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        if self.behaviour.error is not None:
            return error_reply("the environment failed", self.behaviour.error)
        if self.behaviour.mcp:
            return self.mcp(data)
        if self.behaviour.action_field not in data:
            return error_reply("Invalid message", "VALIDATION_ERROR")
        return self.observation(*self.game.step(str(data[self.behaviour.action_field])))

    def mcp(self, action: dict[str, Any]) -> str:
        """An MCP environment's reply: its tools listed, or one of them run."""
        behaviour = self.behaviour
        if action.get("type") == "list_tools":
            data = {"observation": {"tools": self.tools(), "metadata": {}}, "done": False}
            return json.dumps({"type": "observation", "data": data})
        if action.get("type") != "call_tool":
            return error_reply("Invalid message", "VALIDATION_ERROR")
        name, arguments = action.get("tool_name"), action.get("arguments") or {}
        reward, done, truncated = None, False, False
        if name == behaviour.answer_tool:
            guess = str(arguments.get(behaviour.action_field))
            text, reward, done, truncated = self.game.step(guess)
        elif name == "hint":
            text = "even" if self.game.secret % 2 == 0 else "odd"
        else:
            error = {"error_type": "tool_not_found", "message": f"no tool {name}"}
            data = {"observation": {"tool_name": name, "result": None, "error": error},
                    "done": False}  # fmt: skip
            return json.dumps({"type": "observation", "data": data})
        result = {"content": [{"type": "text", "text": text}], "isError": False}
        observation = {"tool_name": name, "result": result, "error": None, "metadata": {},
                       "truncated": truncated}  # fmt: skip
        data = {"observation": observation, "reward": reward, "done": done}
        return json.dumps({"type": "observation", "data": data})

    def tools(self) -> list[dict[str, Any]]:
        """The MCP tool specifications the server lists."""
        field = self.behaviour.action_field
        guess = {"type": "object", "properties": {field: {"type": "string"}}, "required": [field]}
        return [
            {"name": self.behaviour.answer_tool, "description": "Guess the digit.",
             "input_schema": guess},
            {"name": "hint", "description": "Whether the digit is even.",
             "input_schema": {"type": "object", "properties": {}}},
        ]  # fmt: skip

    def observation(self, text: str, reward: float | None, done: bool, truncated: bool) -> str:
        """An observation reply, as the behaviour shapes it."""
        behaviour = self.behaviour
        if behaviour.malformed:
            return '{"type": "observation", "data": '
        if behaviour.wrong_shape:
            return json.dumps({"kind": "observation", "payload": [text]})
        observation: dict[str, Any] = {name: text for name in behaviour.fields}
        observation.update(truncated=truncated, turn=self.game.guesses)
        if behaviour.pad:
            observation["padding"] = [0] * behaviour.pad
        if reward is not None and behaviour.nan_reward:
            reward = float("nan")
        if reward is not None and behaviour.reward is not None:
            reward = behaviour.reward
        data = {"observation": observation, "reward": reward, "done": done}
        return json.dumps({"type": "observation", "data": data})

    def send(self, text: str) -> None:
        """Send one text message, as slowly and in as many frames as the behaviour says."""
        behaviour = self.behaviour
        time.sleep(behaviour.delay_s)
        if behaviour.ping:
            self.wfile.write(server_frame(0x9, b"alive?"))
        payload = text.encode("utf-8")
        step = behaviour.fragment or max(len(payload), 1)
        pieces = [payload[i : i + step] for i in range(0, len(payload), step)] or [b""]
        frames = b"".join(
            server_frame(0x1 if i == 0 else 0x0, piece, final=i == len(pieces) - 1)
            for i, piece in enumerate(pieces)
        )
        if not behaviour.drip_s:
            self.wfile.write(frames)
            return
        for i in range(0, len(frames), 4):
            self.wfile.write(frames[i : i + 4])
            time.sleep(behaviour.drip_s)


def error_reply(message: str, code: str) -> str:
    """An OpenEnv error reply."""
    return json.dumps({"type": "error", "data": {"message": message, "code": code}})


class GameServer:
    """The game on ``127.0.0.1`` (a free port), in a thread, while started.

    :param behaviour: :class:`Behaviour`'s fields.
    """

    def __init__(self, **behaviour: Any) -> None:
        self.behaviour = Behaviour(**behaviour)
        self.log = Log()
        self._server: _Server | None = None
        self.url = ""

    def start(self) -> GameServer:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.behaviour, server.log = self.behaviour, self.log
        threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> GameServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(**behaviour: Any) -> tuple[str, Callable[[], None]]:
    """Start a :class:`GameServer`: its URL, and what stops it."""
    server = GameServer(**behaviour).start()
    return server.url, server.stop


def closed_url() -> str:
    """The URL of a loopback port nothing listens on (connections to it are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
