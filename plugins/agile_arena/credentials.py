"""The files in ``~/.arena/``: OAuth tokens (``credentials.json``) and ``config.json``.

The folder is worked out when a function is called (from ``Path.home()``, so tests can set
``HOME``), unless a ``directory`` is passed. Writes are atomic and never looser than owner-only
at any moment: the folder is ``0700``, and each file is written to a temporary file created
``0600`` in the same folder, synced, then renamed over the old one. API keys are never written.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import Any

CREDENTIALS_FILE = "credentials.json"
CONFIG_FILE = "config.json"
_DIR_MODE = 0o700
_FILE_MODE = 0o600


def arena_dir(directory: Path | None = None) -> Path:
    """The folder holding Arena's files: ``directory``, else ``~/.arena``."""
    return Path(directory) if directory is not None else Path.home() / ".arena"


def load_tokens(directory: Path | None = None) -> dict[str, Any] | None:
    """The stored tokens, or None when there are none (a file without ``access_token``)."""
    data = _read_json(arena_dir(directory) / CREDENTIALS_FILE)
    if isinstance(data, dict) and isinstance(data.get("access_token"), str):
        return data
    return None


def save_tokens(update: dict[str, Any], directory: Path | None = None) -> None:
    """Merge ``update`` (a token response) into the stored tokens."""
    path = arena_dir(directory) / CREDENTIALS_FILE
    current = _read_json(path)
    merged = {**(current if isinstance(current, dict) else {}), **update}
    write_private_json(path, merged)


def delete_tokens(directory: Path | None = None) -> bool:
    """Delete the stored tokens; True if there was a file to delete."""
    try:
        (arena_dir(directory) / CREDENTIALS_FILE).unlink()
    except FileNotFoundError:
        return False
    return True


def load_config(directory: Path | None = None) -> dict[str, Any]:
    """``config.json`` as a dict (empty when missing or unreadable)."""
    data = _read_json(arena_dir(directory) / CONFIG_FILE)
    return data if isinstance(data, dict) else {}


def save_default_project(name: str, directory: Path | None = None) -> None:
    """Store ``name`` as the default project, keeping the other keys of ``config.json``."""
    config = load_config(directory)
    config["default_project"] = name
    write_private_json(arena_dir(directory) / CONFIG_FILE, config)


def default_project(directory: Path | None = None) -> str | None:
    """The stored default project, if any."""
    name = load_config(directory).get("default_project")
    return name if isinstance(name, str) and name.strip() else None


def jwt_expiry(token: str | None) -> float | None:
    """The ``exp`` claim of a JWT (seconds since the epoch), without checking its signature.

    None when ``token`` is not a JWT or carries no numeric ``exp``.
    """
    parts = (token or "").split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError, RecursionError):  # nested too deeply
        return None
    expiry = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(expiry, bool) or not isinstance(expiry, int | float):
        return None
    return float(expiry)


def write_private_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically, readable by its owner only."""
    _private_dir(path.parent)
    text = json.dumps(data, indent=2) + "\n"
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
            os.fchmod(stream.fileno(), _FILE_MODE)  # the umask may have removed owner bits
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    _fsync_dir(path.parent)


def _private_dir(directory: Path) -> None:
    directory.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    if directory.stat().st_mode & 0o777 != _DIR_MODE:
        directory.chmod(_DIR_MODE)


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable; not every platform can open a folder, which is fine."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # unreadable, not JSON, nested too deeply
        return None
