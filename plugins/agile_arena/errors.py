"""Errors of the Arena client, each with one line saying what failed and a hint saying what to do.

They are :class:`~agile_cli.errors.AgileError` subclasses, so the CLI prints them as
``error: <message> (<hint>)`` followed by one ``Key: value`` line per extra the server sent.
Whatever a server sent reaches them through :func:`one_line` or :func:`clip`, and every line
they print goes through :func:`agile_cli.helpers.printable`: escape sequences are shown, not obeyed.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from agile_cli import AgileError
from agile_cli.helpers import EXIT_RUNTIME, printable

LOGIN_HINT = "run `agile login`"
API_KEY_HINT = "check --api-key or ARENA_API_KEY"
PROJECT_HINT = "pass --project or run `agile arena projects set-default NAME`"
ENVIRONMENTS_HINT = "see `agile arena environments list`"
UPLOAD_HINT = "upload it with `agile arena environments upload {name} --source PATH`"
CREDITS_HINT = "see `agile arena user credits`"
NETWORK_HINT = "check --base-url / ARENA_BASE_URL and your connection"
REPLY_HINT = "Arena may be having problems; try again later"
SHOWN_CHARS = 300  # of anything a server sent, shown in an error


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) turned into one space, and
    other control characters (an escape sequence's ESC, a bell) shown as escapes."""
    return printable(" ".join(str(text).split()))


def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` on one line, cut after ``limit`` characters with a note saying so."""
    line = one_line(text)
    return line if len(line) <= limit else f"{line[:limit].rstrip()}… [cut]"


class ArenaError(AgileError):
    """Base class of every error the Arena client raises on purpose."""

    exit_code = EXIT_RUNTIME

    def lines(self) -> list[str]:
        return [printable(line) for line in super().lines()]


class ArenaAuthError(ArenaError):
    """No usable credential: not logged in, session expired, API key rejected, login failed."""

    def __init__(self, message: str, hint: str | None = LOGIN_HINT) -> None:
        super().__init__(one_line(message), hint)


class ArenaTimeoutError(ArenaAuthError):
    """The browser login was not completed in time, or its code expired."""


class ArenaConfigError(ArenaError):
    """Something to fix on this machine: no project chosen, a missing file, a bad URL."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(one_line(message), hint)


class ArenaAPIError(ArenaError):
    """Arena answered with an error, or an in-stream ``failed`` event.

    :param detail: what Arena said went wrong (shown on one line, cut when long).
    :param status_code: the HTTP status, or 0 when there was none (stream events, network).
    :param extras: further fields of the error body, shown one per line.
    :param hint: what to do; each class has a default.
    """

    label: ClassVar[str] = "Arena API error"
    default_hint: ClassVar[str | None] = None

    def __init__(
        self,
        detail: str,
        *,
        status_code: int = 0,
        extras: dict[str, Any] | None = None,
        hint: str | None = None,
    ) -> None:
        self.detail = clip(detail)
        self.status_code = status_code
        self.extras = dict(extras or {})
        super().__init__(self._headline(), hint or self.default_hint)

    def _headline(self) -> str:
        where = f" ({self.status_code})" if self.status_code else ""
        return f"{self.label}{where}: {self.detail}"

    def lines(self) -> list[str]:
        return [*super().lines(), *(_extra_line(key, value) for key, value in self.extras.items())]


class ArenaValidationError(ArenaAPIError):
    """An environment upload or validation was refused or failed."""

    label = "Environment validation failed"


class ArenaTrainingError(ArenaAPIError):
    """An experiment submission was refused or failed."""

    label = "Experiment submission failed"


class ArenaEnvironmentNotFoundError(ArenaAPIError):
    """The experiment names an environment Arena does not have."""

    label = "Environment not found"
    default_hint = f"{ENVIRONMENTS_HINT}, or {UPLOAD_HINT.format(name='NAME')}"


class ArenaNetworkError(ArenaAPIError):
    """Arena could not be reached (after retries), or the connection dropped mid-reply."""

    label = "Network error"
    default_hint = NETWORK_HINT


class ArenaReplyError(ArenaAPIError):
    """Arena's reply cannot be used: the wrong shape, too large, or a redirect elsewhere.

    The detail is the whole message, e.g. ``Arena sent an unexpected reply to GET /x: ...``.
    """

    default_hint = REPLY_HINT

    def _headline(self) -> str:
        return self.detail


class ArenaRedirectError(ArenaReplyError):
    """Arena redirected a request to another origin; it was not followed."""

    default_hint = "check --base-url / ARENA_BASE_URL; credentials are only sent to that server"


class ArenaCreditsError(ArenaAPIError):
    """The account has not enough credits for what was asked."""

    label = "Not enough Arena credits"
    default_hint = CREDITS_HINT


def _extra_line(key: str, value: Any) -> str:
    label = one_line(str(key).replace("_", " "))
    label = label[:1].upper() + label[1:]
    if isinstance(value, list | tuple):
        text = ", ".join(str(item) for item in value)
    elif isinstance(value, dict):
        text = json.dumps(value, default=str)
    else:
        text = str(value)
    return f"{label}: {clip(text)}"
