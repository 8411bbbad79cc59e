"""The one error hierarchy of agile.

Library code raises :class:`AgileError` subclasses; the CLI turns them into output in one place
(:func:`agile_cli.cli.main`) and exits with the error's ``exit_code``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

EXIT_RUNTIME = 1
EXIT_USAGE = 2
#: Ctrl-C (SIGINT), as shells report a program it stopped: 128 + 2.
EXIT_INTERRUPTED = 130

# C0 and C1 control characters, DEL, and the Unicode marks that reorder or hide text on a
# terminal (bidirectional overrides and isolates, zero-width characters, the BOM).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` safe to show on a terminal: every control character (an ANSI or OSC escape's
    ESC, a carriage return, a bell) and every character that reorders text is replaced by its
    visible escape (``\\x1b``), so that text from a server, a dataset or any file cannot clear
    the screen, retitle the window or draw a fake prompt.

    :param keep_newlines: keep ``\\n`` (and ``\\t``) as they are, for text of several lines.
    """

    def escape(match: re.Match[str]) -> str:
        char = match.group()
        if keep_newlines and char in "\n\t":
            return char
        code = ord(char)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _UNPRINTABLE.sub(escape, text)


@dataclass(frozen=True)
class FieldError:
    """One problem with one field of a manifest.

    :param path: dotted path of the field, e.g. ``training.evo_steps`` (empty for the whole file).
    :param message: what is wrong.
    :param hint: how to fix it, if there is something useful to say.
    """

    path: str
    message: str
    hint: str | None = None

    def render(self) -> str:
        where = f"{self.path}: " if self.path else ""
        tail = f" ({self.hint})" if self.hint else ""
        return f"{where}{self.message}{tail}"

    def under(self, prefix: str) -> FieldError:
        """The same error, with its path placed under ``prefix``."""
        if not prefix:
            return self
        if not self.path:
            path = prefix
        elif self.path.startswith("["):
            path = f"{prefix}{self.path}"
        else:
            path = f"{prefix}.{self.path}"
        return FieldError(path, self.message, self.hint)


class AgileError(Exception):
    """Base class of every error agile raises on purpose."""

    exit_code = EXIT_RUNTIME

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def lines(self) -> list[str]:
        """What the CLI prints for this error, one line each."""
        tail = f" ({self.hint})" if self.hint else ""
        return [f"{self.message}{tail}"]

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled whole (hint included), e.g. when a Ray worker raises it for its driver.
        return (type(self), (self.message, self.hint), self.__dict__)


class UsageError(AgileError):
    """The user asked for something that cannot be done as asked."""

    exit_code = EXIT_USAGE


class ManifestError(AgileError):
    """A manifest could not be read or is invalid; carries every field error found."""

    exit_code = EXIT_USAGE

    def __init__(self, errors: Iterable[FieldError], source: str | None = None) -> None:
        self.errors = list(errors)
        self.source = source
        #: What validation read of the manifest despite the errors (its sections, where each
        #: was read apart from its unknown keys), for the rules across sections; else None.
        self.resolution: Any = None
        count = len(self.errors)
        noun = "error" if count == 1 else "errors"
        super().__init__(f"{source or 'manifest'}: {count} {noun}")

    def lines(self) -> list[str]:
        return [error.render() for error in self.errors]

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.errors, self.source), self.__dict__)

    def __str__(self) -> str:
        return "\n".join([self.message, *("  " + line for line in self.lines())])


class PluginError(AgileError):
    """A plugin is broken or conflicts with another one."""


class EnvironmentNotFoundError(AgileError):
    """An environment could not be resolved (unknown id, missing package, bad entry point)."""

    exit_code = EXIT_USAGE


class TrainingError(AgileError):
    """Training failed at run time."""


class MembersLost(TrainingError):
    """A runner lost members it held elsewhere (a remote worker died with them): the
    evolutionary loop goes back to the run's last checkpoint and trains on from there."""
