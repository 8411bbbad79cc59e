"""Hostile replies for the stand-in's fault injection: a server that misbehaves on purpose.

* ``drip``: a normal status line and headers, then the body one byte every ``seconds``.
* ``drip_headers``: the status line, then the headers themselves one byte every ``seconds``.
* ``silent``: status ``status``, headers of a chunked ``content_type`` reply and ``body`` as its
  first chunk, then nothing more until the server stops.
* ``raw``: status ``status`` and ``body`` exactly as given, as ``content_type`` (e.g. JSON
  nested ten thousand levels deep, which the stand-in could not encode itself).
* ``redirect``: answer ``status`` (e.g. 307) with ``Location: <location><the request's path>``.
* ``huge``: a body of ``size`` bytes that never ends as JSON, chunked or with its
  ``Content-Length`` declared up front; ``fault.sent`` counts the body bytes the socket took.

Every loop is bounded by a byte count and ends as soon as the server stops, so a client that
never gives up still sees the reply end.
"""

from __future__ import annotations

from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .server import Fault

HOSTILE_KINDS = ("drip", "drip_headers", "silent", "raw", "redirect", "huge")
_CHUNK = 64 * 1024
_PREFIXES = {
    "application/json": b'{"ok": true, "data": "',
    "application/x-ndjson": b'{"kind": "status", "stage": "validation", "message": "',
}


def write_hostile(handler: BaseHTTPRequestHandler, fault: Fault) -> None:
    """Answer the request ``handler`` is serving the way ``fault`` says (one of HOSTILE_KINDS)."""
    writers: dict[str, Callable[[BaseHTTPRequestHandler, Fault], None]] = {
        "drip": _drip_body,
        "drip_headers": _drip_headers,
        "silent": _silent,
        "raw": _raw,
        "redirect": _redirect,
        "huge": _huge,
    }
    handler.close_connection = True
    writers[fault.kind](handler, fault)


def _stopping(handler: BaseHTTPRequestHandler) -> Any:
    return handler.server.arena._stopping  # type: ignore[attr-defined]


def _body(fault: Fault) -> bytes:
    if isinstance(fault.body, bytes):
        return fault.body
    return str(fault.body if fault.body is not None else "{}").encode()


def _drip(handler: BaseHTTPRequestHandler, data: bytes, seconds: float) -> bool:
    """Write ``data`` a byte at a time; False when the server stopped first."""
    stopping = _stopping(handler)
    for byte in data:
        if stopping.wait(seconds):
            return False
        handler.wfile.write(bytes([byte]))
    return True


def _drip_body(handler: BaseHTTPRequestHandler, fault: Fault) -> None:
    body = _body(fault)
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    _drip(handler, body, fault.seconds)


def _drip_headers(handler: BaseHTTPRequestHandler, fault: Fault) -> None:
    body = _body(fault)
    handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
    head = (
        b"Content-Type: application/json\r\n"
        b"X-Padding: " + b"p" * 200 + b"\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )
    if _drip(handler, head, fault.seconds):
        handler.wfile.write(body)


def _silent(handler: BaseHTTPRequestHandler, fault: Fault) -> None:
    handler.send_response(fault.status)
    handler.send_header("Content-Type", fault.content_type)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    body = _body(fault) if fault.body is not None else b""
    if body:
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(body), body))
    handler.wfile.flush()
    _stopping(handler).wait()


def _raw(handler: BaseHTTPRequestHandler, fault: Fault) -> None:
    body = _body(fault)
    handler.send_response(fault.status)
    handler.send_header("Content-Type", fault.content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _redirect(handler: BaseHTTPRequestHandler, fault: Fault) -> None:
    handler.send_response(fault.status)
    handler.send_header("Location", f"{fault.location}{handler.path}")
    handler.send_header("Content-Length", "0")
    handler.end_headers()


def _huge(handler: BaseHTTPRequestHandler, fault: Fault) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", fault.content_type)
    if fault.chunked:
        handler.send_header("Transfer-Encoding", "chunked")
    else:
        handler.send_header("Content-Length", str(fault.size))
    handler.end_headers()
    piece = _PREFIXES.get(fault.content_type, b"") + b"x" * _CHUNK
    while fault.sent < fault.size and not _stopping(handler).is_set():
        data = piece[: fault.size - fault.sent]
        framed = b"%x\r\n%s\r\n" % (len(data), data) if fault.chunked else data
        handler.wfile.write(framed)
        fault.sent += len(data)
        piece = b"x" * _CHUNK
