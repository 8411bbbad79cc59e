"""Code a saved run names, and when agile may import it.

A manifest can name code: an environment's ``entrypoint`` (a ``module:callable`` or a
``file.py:callable``), its ``wrappers`` and an LLM environment's ``reward_file_path`` are
imported and called when the environment is built. ``agile train m.yaml`` runs what the
user's own manifest names. A checkpoint read back (``agile evaluate``, ``agile dataset
collect``, ``agile train --resume``) may come from someone else, so the code it names is
imported only when this user's agile wrote it, or when the user says ``--trust-code``.

"Written by this user" is a seal in the checkpoint: an HMAC of the code references under a
random key kept in ``~/.config/agile/trust.key`` (``$XDG_CONFIG_HOME``; readable by the user
only). Someone else's checkpoint cannot carry a valid seal.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agile_cli.errors import UsageError

_CODE_FIELDS = ("entrypoint", "wrappers")


def references(manifest: Mapping[str, Any]) -> list[str]:
    """The code a manifest (as plain data) names, one ``field: value`` each."""
    environment = manifest.get("environment")
    if not isinstance(environment, Mapping):
        return []
    found = []
    if environment.get("entrypoint"):
        found.append(f"environment.entrypoint: {environment['entrypoint']}")
    if environment.get("reward_file_path"):
        named = environment.get("reward_fn_name")
        found.append(f"environment.reward_file_path: {environment['reward_file_path']}:{named}")
    wrappers = environment.get("wrappers") or []
    for index, wrapper in enumerate(wrappers if isinstance(wrappers, list) else [wrappers]):
        target = wrapper[0] if isinstance(wrapper, list | tuple) and wrapper else wrapper
        found.append(f"environment.wrappers[{index}]: {target}")
    return found


def seal(manifest: Mapping[str, Any]) -> str | None:
    """This user's seal over the code ``manifest`` names (None when it names none, or when no
    key can be kept)."""
    found = references(manifest)
    key = _key()
    if not found or key is None:
        return None
    return _digest(key, found)


def check(state: Mapping[str, Any], source: Path, *, trusted: bool) -> None:
    """Refuse to build what a checkpoint's manifest names unless this user sealed it.

    :param trusted: the user passed ``--trust-code``.
    :raises UsageError: the manifest names code, without a valid seal.
    """
    found = references(state.get("manifest") or {})
    if not found or trusted:
        return
    key = _key()
    given = state.get("code_seal")
    if (
        key is not None
        and isinstance(given, str)
        and hmac.compare_digest(given, _digest(key, found))
    ):
        return
    raise UsageError(
        f"{source} was not written by your agile, and its manifest names code that would be "
        "imported and run: " + "; ".join(found),
        "pass --trust-code if you trust whoever made it",
    )


def _digest(key: bytes, found: list[str]) -> str:
    return hmac.new(key, json.dumps(found).encode(), hashlib.sha256).hexdigest()


def _key_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "agile" / "trust.key"


def _key() -> bytes | None:
    """The user's key, made on first use (atomically, 0600); None if it cannot be kept."""
    path = _key_path()
    try:
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            temporary = path.with_name(f".trust.key.{secrets.token_hex(6)}")
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as stream:
                stream.write(secrets.token_bytes(32))
            try:
                os.link(temporary, path)  # the first writer wins; the others read its key
            except FileExistsError:
                pass
            finally:
                temporary.unlink(missing_ok=True)
        key = path.read_bytes()
    except OSError:
        return None
    return key if len(key) == 32 else None
