"""Other libraries' errors, told in agile's sentences."""

from __future__ import annotations

from agile_cli.helpers import printable


def error_detail(error: BaseException, limit: int = 300) -> str:
    """A library's error message for one of agile's: on one line, printable, at most ``limit``
    characters (it may quote a file's text)."""
    text = printable(" ".join(str(error).split()))
    return text if len(text) <= limit else text[: limit - 3] + "..."
