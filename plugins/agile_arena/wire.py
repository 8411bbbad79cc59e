"""How Arena's replies are received: deadlines, caps on what is read, origins.

httpx's timeouts bound each network operation, not a whole request, so a server that sends one
byte a second keeps a request alive for ever. :func:`bound_by_deadlines` makes every socket
operation of a client's connections (connect, TLS, each write, each read) wait no longer than
what is left of the deadline set with :func:`deadline`; :func:`read_body` and :func:`lines` also
check it between chunks, for transports without sockets. Deadlines nest: one for all attempts
of a call, and inside it one per attempt, which never ends later than the call's.

Nothing here raises the plugin's errors: :class:`TooLarge` and the timeouts of httpx are turned
into them by :mod:`agile_arena.client`, which knows which request it was.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import httpcore
import httpx

MAX_REPLY_BYTES = 32 * 2**20  # a JSON or text reply
MAX_CSV_BYTES = 256 * 2**20  # a metrics download (the server caps it at 50,000 rows)
MAX_LINE_BYTES = 2**20  # one line of an NDJSON progress stream
MAX_ERROR_BYTES = 2**20  # what is read of an error reply; only its start is ever shown

_DEADLINE: ContextVar[float | None] = ContextVar("agile_arena_deadline", default=None)
_DEFAULT_PORTS = {"http": 80, "https": 443}
_PASSED = "the request's deadline has passed"


class TooLarge(Exception):
    """A reply, or one line of a stream, is longer than what is read of it."""

    def __init__(self, limit: int, declared: int | None = None, line: bool = False) -> None:
        self.limit, self.declared, self.line = limit, declared, line
        if declared is not None:
            text = f"it declares {declared} bytes; at most {size_text(limit)} are read"
        else:
            text = f"{'a line is ' if line else ''}longer than {size_text(limit)}"
        super().__init__(text)


def size_text(count: int) -> str:
    """``count`` bytes as ``64 KiB``, ``32 MiB`` or ``1000 bytes``."""
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if count >= size and count % size == 0:
            return f"{count // size} {unit}"
    return f"{count} bytes"


# -- deadlines -------------------------------------------------------------------------------


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[float | None]:
    """Within this block, network operations end at most ``seconds`` from now (None: no new
    limit), and never after the deadline of an enclosing block.

    :returns: (as the block's value) the deadline in :func:`time.monotonic` seconds, if any.
    """
    with until(None if seconds is None else time.monotonic() + seconds) as end:
        yield end


@contextlib.contextmanager
def until(end: float | None) -> Iterator[float | None]:
    """Like :func:`deadline`, for a deadline given as a :func:`time.monotonic` time."""
    outer = _DEADLINE.get()
    if outer is not None and (end is None or outer < end):
        end = outer
    token = _DEADLINE.set(end)
    try:
        yield end
    finally:
        _DEADLINE.reset(token)


def remaining() -> float | None:
    """Seconds left before the deadline of the enclosing block (None: there is none)."""
    end = _DEADLINE.get()
    return None if end is None else max(0.0, end - time.monotonic())


def time_left(timeout: float | None, expired: Callable[[str], Exception]) -> float | None:
    """``timeout`` shortened to what is left of the deadline; raises ``expired`` once it passed."""
    end = _DEADLINE.get()
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise expired(_PASSED)
    return left if timeout is None else min(timeout, left)


class _BoundStream(httpcore.NetworkStream):
    """A connection whose every operation ends by the deadline of the request using it."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        seconds = time_left(timeout, httpcore.ConnectTimeout)
        return _BoundStream(self._inner.start_tls(ssl_context, server_hostname, seconds))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _BoundBackend(httpcore.NetworkBackend):
    """Opens connections that honour the deadline of the request using them."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        seconds = time_left(timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(host, port, seconds, local_address, socket_options)
        return _BoundStream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        seconds = time_left(timeout, httpcore.ConnectTimeout)
        return _BoundStream(self._inner.connect_unix_socket(path, seconds, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def bound_by_deadlines(client: httpx.Client) -> int:
    """Make the connections of ``client``'s transports honour :func:`deadline`.

    httpx offers no public way to choose a transport's network backend, so this reaches for
    ``HTTPTransport._pool`` and the pool's ``_network_backend`` (both there since httpx 0.18 and
    httpcore 0.13). A transport without them (a mock, a later httpx) is left alone: the checks
    between chunks still bound the body, not the headers.

    :returns: how many transports were changed.
    """
    transports = [getattr(client, "_transport", None)]
    transports += list(getattr(client, "_mounts", {}).values())
    changed = 0
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        if pool is None:
            continue
        backend = getattr(pool, "_network_backend", None)
        if isinstance(backend, httpcore.NetworkBackend) and not isinstance(backend, _BoundBackend):
            pool._network_backend = _BoundBackend(backend)
            changed += 1
    return changed


# -- reading replies -------------------------------------------------------------------------


def read_body(response: httpx.Response, limit: int, *, cut: bool = False) -> httpx.Response:
    """``response`` with its body read and closed: TooLarge past ``limit`` bytes (decoded).

    :param cut: keep the first ``limit`` bytes instead of failing (for error replies).
    :returns: a response holding the body (without its ``Content-Encoding``, already decoded).
    """
    declared = _declared_length(response)
    if declared is not None and declared > limit and not cut:
        response.close()
        raise TooLarge(limit, declared=declared)
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_bytes():
            _check_deadline(response)
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                if not cut:
                    raise TooLarge(limit)
                break
    finally:
        response.close()
    return _holding(response, b"".join(chunks)[:limit])


def lines(response: httpx.Response, limit: int) -> Iterator[str]:
    """The lines of a streamed body, decoded as UTF-8; TooLarge when one passes ``limit`` bytes."""
    pending = b""
    for chunk in response.iter_bytes():
        _check_deadline(response)
        *complete, pending = (pending + chunk).split(b"\n")
        for line in complete:
            if len(line) > limit:
                raise TooLarge(limit, line=True)
            yield line.decode("utf-8", "replace")
        if len(pending) > limit:
            raise TooLarge(limit, line=True)
    if pending:
        yield pending.decode("utf-8", "replace")


def _check_deadline(response: httpx.Response) -> None:
    def expired(text: str) -> Exception:
        return httpx.ReadTimeout(text, request=response.request)

    time_left(None, expired)


def _declared_length(response: httpx.Response) -> int | None:
    value = response.headers.get("content-length", "").strip()
    return int(value) if value.isdigit() else None


def _holding(response: httpx.Response, body: bytes) -> httpx.Response:
    dropped = ("content-encoding", "content-length", "transfer-encoding")
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in dropped]
    return httpx.Response(
        response.status_code, headers=headers, content=body, request=response.request
    )


# -- origins ---------------------------------------------------------------------------------


def origin(url: httpx.URL) -> tuple[str, str, int | None]:
    """Scheme, host and port (the default one when the URL names none)."""
    return url.scheme, url.host, url.port or _DEFAULT_PORTS.get(url.scheme)


def host_text(url: httpx.URL) -> str:
    """``host:port`` of ``url``, as a person would type it."""
    scheme, host, port = origin(url)
    return host if port == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
