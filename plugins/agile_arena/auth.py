"""Arena credentials: the API key or stored tokens, the OAuth device flow, refresh and logout.

The :class:`Authenticator` holds the credentials of one :class:`~agile_arena.client.ArenaClient`
and talks to the login server (Keycloak) through a callback the client supplies, so retries
and network errors are handled in one place. Every credential it sees is registered with a
:class:`Secrets`, which keeps them out of every message.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import sys
import time
import webbrowser
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import httpx

from agile_arena import credentials, wire
from agile_arena.errors import (
    API_KEY_HINT,
    LOGIN_HINT,
    ArenaAuthError,
    ArenaConfigError,
    ArenaError,
    ArenaNetworkError,
    ArenaTimeoutError,
    clip,
)
from agile_arena.parsing import TooDeep, load_json
from agile_cli.helpers import printable

REFRESH_MARGIN_S = 60.0  # refresh an access token that expires sooner than this
MAX_POLL_INTERVAL_S = 30.0  # the login is polled at least this often, whatever the server asks
KEYCLOAK_HINT = "check ARENA_KEYCLOAK_URL and your connection"

_DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_SECRET_WORDS = frozenset(
    {"token", "secret", "password", "passwd", "credential", "credentials", "authorization"}
)
_SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("private", "key")})


class LoginPost(Protocol):
    """POSTs ``form`` to an OpenID Connect ``endpoint`` (``token``, ``logout``, ...) of the
    login server, with retries; returns the last response, whatever its status."""

    def __call__(
        self, endpoint: str, form: dict[str, str], *, max_retries: int | None = None
    ) -> httpx.Response: ...


class Secrets:
    """The credentials a client knows, to be replaced by ``[redacted]`` wherever shown."""

    def __init__(self) -> None:
        self._values: set[str] = set()

    def add(self, value: str | None) -> str | None:
        """Remember ``value`` (when not empty) as a secret; returns it."""
        if value:
            self._values.add(value)
        return value

    def redact(self, value: Any) -> Any:
        """``value`` with every known secret replaced (inside dicts, lists and tuples too)."""
        if isinstance(value, str):
            for secret in self._values:
                value = value.replace(secret, "[redacted]")
            return value
        if isinstance(value, dict):
            return {key: self.redact(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact(item) for item in value]
        return value

    def scrub(self, value: Any) -> Any:
        """``value`` fit to show: :meth:`redact`, and text under a secret-like key masked.

        A server may echo a key or token back (``api_key``, ``access_token``, ``apiKey``,
        ``client_secret``, ...); such fields are shown as their first four characters and ``…``.
        """
        if isinstance(value, dict):
            return {key: self._scrub_field(str(key), item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.scrub(item) for item in value]
        return self.redact(value)

    def _scrub_field(self, key: str, value: Any) -> Any:
        return mask(value) if isinstance(value, str) and secret_name(key) else self.scrub(value)


def secret_name(key: str) -> bool:
    """Whether a field called ``key`` holds a credential (``api_key``, ``downloadToken``, ...)."""
    words = [word.lower() for word in _WORD.findall(key)]
    if _SECRET_WORDS.intersection(words) or "apikey" in words:
        return True
    return any(pair in _SECRET_PAIRS for pair in itertools.pairwise(words))


def mask(secret: str) -> str:
    """A credential as it may be shown: ``abcd…`` (``***`` when too short to keep a prefix)."""
    return f"{secret[:4]}…" if len(secret) >= 12 else "***"


class Authenticator:
    """The credentials of a client, and how to obtain, refresh and drop them.

    Highest precedence first: ``api_key`` (an empty string counts as unset), ``ARENA_API_KEY``,
    the tokens stored in the credentials folder (read when this is built).

    :param api_key: a personal access token (or any bearer token).
    :param client_id: the Keycloak client.
    :param credentials_dir: where tokens live (default ``~/.arena``).
    :param post: sends a form to the login server.
    :param sleep: how to wait between login polls.
    :param secrets: where every credential is registered for redaction.
    """

    def __init__(
        self,
        *,
        api_key: str | None,
        client_id: str,
        credentials_dir: Path | None,
        post: LoginPost,
        sleep: Callable[[float], None],
        secrets: Secrets,
    ) -> None:
        self.client_id = client_id
        self._credentials_dir = credentials_dir
        self._post = post
        self._sleep = sleep
        self._secrets = secrets
        self._api_key = secrets.add(api_key or os.environ.get("ARENA_API_KEY") or None)
        tokens = credentials.load_tokens(credentials_dir) or {}
        self._access_token = secrets.add(_string(tokens.get("access_token")))
        self._refresh_token = secrets.add(_string(tokens.get("refresh_token")))
        self._refresh_rejected = False

    @property
    def is_authenticated(self) -> bool:
        """Whether a credential is at hand (not whether Arena will accept it)."""
        return bool(self._api_key or self._access_token)

    @property
    def uses_api_key(self) -> bool:
        return bool(self._api_key)

    @property
    def mode(self) -> str:
        """``api key``, ``login`` or ``none``: which credential is in use."""
        return "api key" if self._api_key else "login" if self._access_token else "none"

    def authorization(self) -> str:
        """The ``Authorization`` header of an API request; ArenaAuthError when there is none."""
        token = self._api_key or self._access_token
        if not token:
            raise ArenaAuthError(
                "Not logged in to Arena",
                "run `agile login`, or pass --api-key / set ARENA_API_KEY",
            )
        return f"Bearer {token}"

    def login(
        self,
        *,
        timeout: float = 300,
        force: bool = False,
        notify: Callable[[str], None] = print,
        open_browser: bool = True,
    ) -> None:
        """Log in with the OAuth device flow, unless not needed (see ``ArenaClient.login``)."""
        if self._api_key and not force:
            notify("An API key is in use, so no login is needed (pass --force to log in anyway).")
            return
        self._api_key = None
        remaining = _expires_in(self._access_token)
        if not force and remaining is not None and remaining > REFRESH_MARGIN_S:
            notify("Already logged in to Arena (pass --force to log in again).")
            return
        if not force and self._refresh_token and self._try_refresh():
            notify("Refreshed the stored Arena session.")
            return
        self._device_flow(timeout, notify, open_browser)

    def logout(self) -> None:
        """End the session on the login server (best effort) and delete the stored tokens."""
        if self._refresh_token:
            form = {"client_id": self.client_id, "refresh_token": self._refresh_token}
            with contextlib.suppress(ArenaError):
                self._post("logout", form, max_retries=0)
        try:
            credentials.delete_tokens(self._credentials_dir)
        except OSError as error:
            raise ArenaConfigError(f"Could not delete the stored Arena login: {error}") from None
        self._access_token = self._refresh_token = None

    def refresh_if_expiring(self) -> None:
        """Refresh a stored access token that expires within a minute (failures wait for a 401)."""
        if self._api_key or not self._refresh_token or self._refresh_rejected:
            return
        remaining = _expires_in(self._access_token)
        if remaining is None or remaining > REFRESH_MARGIN_S:  # unknown expiry: wait for a 401
            return
        with contextlib.suppress(ArenaError):
            self._refresh()

    def recover_from_401(self) -> None:
        """Refresh the tokens after Arena refused them; ArenaAuthError when that can't help."""
        if self._api_key or not self._refresh_token or self._refresh_rejected:
            raise self.unauthorized()
        self._refresh()

    def unauthorized(self) -> ArenaAuthError:
        """The error for a request Arena refused with the current credential."""
        if self._api_key:
            return ArenaAuthError("Arena rejected the API key", API_KEY_HINT)
        return ArenaAuthError("Your Arena session has expired", LOGIN_HINT)

    # -- tokens --------------------------------------------------------------------------------

    def _try_refresh(self) -> bool:
        try:
            self._refresh()
        except ArenaAuthError:
            return False
        return True

    def _refresh(self) -> None:
        form = {
            "grant_type": "refresh_token",
            "refresh_token": self._refresh_token or "",
            "client_id": self.client_id,
        }
        response = self._post("token", form)
        if response.status_code in (400, 401):
            self._refresh_rejected = True
            raise ArenaAuthError("Your Arena session has expired", LOGIN_HINT)
        if not response.is_success:
            raise ArenaAuthError(
                f"Could not refresh the Arena session (login server answered "
                f"{response.status_code})",
                "try again later, or run `agile login`",
            )
        self._store_tokens(_token_reply(response))

    def _store_tokens(self, tokens: dict[str, Any]) -> None:
        self._access_token = self._secrets.add(tokens["access_token"])
        self._refresh_token = self._secrets.add(_string(tokens.get("refresh_token"))) or (
            self._refresh_token
        )
        self._refresh_rejected = False
        try:
            credentials.save_tokens(tokens, self._credentials_dir)
        except OSError as error:
            folder = credentials.arena_dir(self._credentials_dir)
            raise ArenaConfigError(
                f"Could not save the Arena login in {folder}: {error.strerror or error}",
                f"check the permissions of {folder}",
            ) from None

    # -- the device flow -----------------------------------------------------------------------

    def _device_flow(self, timeout: float, notify: Callable[[str], None], browser: bool) -> None:
        """Show the code, then poll until it is confirmed; never waits past ``timeout``, whatever
        the polling interval the server asks for (it is taken up to MAX_POLL_INTERVAL_S)."""
        start = self._start_device_flow()
        url = str(start.get("verification_uri_complete") or start.get("verification_uri") or "")
        code = start.get("user_code")
        notify(
            printable(f"Open {url} and enter the code {code}" if code else f"Open {url} to log in")
        )
        if browser and url:
            _open_browser(url)
        interval = min(_seconds(start.get("interval"), 5.0), MAX_POLL_INTERVAL_S)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self._sleep(min(interval, max(0.0, end - time.monotonic())))
            if time.monotonic() >= end:
                break
            reply = self._poll_until(str(start["device_code"]), end)
            if reply is None:
                break
            if isinstance(reply, dict):
                self._store_tokens(reply)
                return
            if reply == "slow_down":
                interval = min(interval + 5, MAX_POLL_INTERVAL_S)
        raise _login_timed_out(timeout)

    def _poll_until(self, device_code: str, end: float) -> dict[str, Any] | str | None:
        """:meth:`_poll_device`, cut off at ``end`` (a :func:`time.monotonic` time): None then."""
        try:
            with wire.until(end):
                return self._poll_device(device_code)
        except ArenaNetworkError:
            if time.monotonic() < end:
                raise
            return None

    def _start_device_flow(self) -> dict[str, Any]:
        form = {"client_id": self.client_id, "scope": "openid profile email"}
        response = self._post("auth/device", form)
        reply = _json_or_none(response)
        if response.is_success and isinstance(reply, dict) and reply.get("device_code"):
            return reply
        reason = self._secrets.redact(_oauth_reason(response, reply))
        raise ArenaAuthError(f"Could not start the Arena login ({reason})", KEYCLOAK_HINT)

    def _poll_device(self, device_code: str) -> dict[str, Any] | str:
        """The tokens, or ``authorization_pending`` / ``slow_down``; raises on anything else."""
        form = {
            "grant_type": _DEVICE_GRANT,
            "device_code": device_code,
            "client_id": self.client_id,
        }
        response = self._post("token", form)
        if response.is_success:
            return _token_reply(response)
        reply = _json_or_none(response)
        error = str(reply.get("error", "")) if isinstance(reply, dict) else ""
        if error in ("authorization_pending", "slow_down"):
            return error
        if error == "expired_token":
            raise ArenaTimeoutError(
                "The login code expired before it was confirmed", "run `agile login` again"
            )
        reason = self._secrets.redact(_oauth_reason(response, reply))
        raise ArenaAuthError(f"Arena login failed ({reason})", "run `agile login` again")


def _login_timed_out(timeout: float) -> ArenaTimeoutError:
    return ArenaTimeoutError(
        f"Login timed out after {timeout:g} s without authorization",
        "run `agile login` again (pass --timeout to wait longer)",
    )


def _token_reply(response: httpx.Response) -> dict[str, Any]:
    reply = _json_or_none(response)
    if isinstance(reply, dict) and isinstance(reply.get("access_token"), str):
        return reply
    raise ArenaAuthError("Arena's login server sent no access token", "run `agile login` again")


def _oauth_reason(response: httpx.Response, reply: Any) -> str:
    if isinstance(reply, dict):
        text = reply.get("error_description") or reply.get("error")
        if text:
            return clip(str(text))
    return f"HTTP {response.status_code}"


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return load_json(response.content)
    except ValueError:
        return None
    except TooDeep as error:
        raise ArenaAuthError(
            f"Arena's login server sent a reply that {error}", KEYCLOAK_HINT
        ) from None


def _open_browser(url: str) -> None:
    """Open ``url`` when this machine has a browser to show it and it is a web address (the
    login server's reply chooses it: never a file, or another program's scheme); never fails."""
    if os.environ.get("AGILE_NO_BROWSER") or not url.lower().startswith(("https://", "http://")):
        return
    has_display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    if sys.platform.startswith("linux") and not has_display:
        return
    with contextlib.suppress(Exception):
        webbrowser.open(url)


def _expires_in(token: str | None) -> float | None:
    """Seconds until a JWT expires; None when unknown (not a JWT, no ``exp``)."""
    expiry = credentials.jwt_expiry(token)
    return expiry - time.time() if expiry is not None else None


def _seconds(value: Any, default: float) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return default
    return seconds if seconds > 0 else default


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
