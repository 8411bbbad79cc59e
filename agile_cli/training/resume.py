"""What ``agile train --resume`` checks before it continues a run from its checkpoint."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from agile_cli.errors import TrainingError, UsageError
from agile_cli.manifest import TrainingManifest
from agile_cli.training import trust

#: Manifest fields a resumed run honours when ``manifest.yaml`` was edited since the checkpoint
#: (to train longer, or to stop at another score). Everything else is fixed by the checkpoint.
EDITABLE_ON_RESUME = frozenset(
    {
        "training.max_steps",
        "training.target_score",
        "training.checkpoint_steps",
        "training.overwrite_checkpoints",
    }
)


def check_compatible(
    state: Mapping[str, Any], manifest: TrainingManifest, spaces: dict[str, str] | None = None
) -> None:
    """Refuse a checkpoint of another algorithm, environment or observation/action spaces.

    :param spaces: the run's spaces as :func:`~agile_cli.training.setup.describe_spaces` gives
        (None: not compared). A checkpoint that recorded none (format 1) is not compared
        either: its members' weights, which must fit the networks built, say whether it fits.
    """
    problems = []
    if state.get("algorithm") != manifest.algorithm_name:
        problems.append(f"algorithm {state.get('algorithm')!r}, the run's is "
                        f"{manifest.algorithm_name!r}")  # fmt: skip
    if state.get("environment") != manifest.environment.name:
        problems.append(f"environment {state.get('environment')!r}, the run's is "
                        f"{manifest.environment.name!r}")  # fmt: skip
    saved_spaces = state.get("spaces")
    for name, space in (spaces or {}).items():
        if saved_spaces is not None and saved_spaces.get(name) != space:
            problems.append(f"{name} {saved_spaces.get(name)}, the environment's is {space}")
    if problems:
        raise TrainingError(
            "the checkpoint is not of this run: it has " + "; ".join(problems),
            "resume a run from its own checkpoints/latest.pt",
        )


@contextlib.contextmanager
def explain_mismatch() -> Iterator[None]:
    """Turn what a checkpoint that does not fit raises into one clear error."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as exc:
        detail = " ".join(str(exc).split())[:300]
        raise TrainingError(
            f"the checkpoint does not fit this run ({type(exc).__name__}: {detail})",
            "resume a run from its own checkpoints/latest.pt",
        ) from None


def checked_manifest(
    state: Mapping[str, Any], manifest: TrainingManifest, source: Path, *, trusted: bool
) -> tuple[TrainingManifest, list[str]]:
    """The manifest a resumed run trains with, and notes of the edits it applies.

    It is ``manifest.yaml``, the code it names found where the checkpoint's is (the run's
    sealed origin, never the current directory), and it must name the code the checkpoint
    names: that code is what runs, so it is what the trust check inspects.

    :param state: the checkpoint resumed from.
    :param manifest: the run folder's ``manifest.yaml``, resolved.
    :param source: the checkpoint's file, for messages.
    :param trusted: the user passed ``--trust-code``.
    :raises UsageError: edits resuming cannot apply (no field naming code may change), or code
        this user's seal does not cover (without ``trusted``).
    """
    origin = trust.origin(state)
    saved = trust.located(state["manifest"], origin)
    current = trust.located(manifest.to_dict(), origin, like=saved)
    notes = manifest_edits(saved, current)
    resumed = trust.checked(state, manifest, source, trusted=trusted, like=saved,
                            named_by="manifest.yaml")  # fmt: skip
    return resumed, notes


def manifest_edits(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Describe the edits resume applies; refuse the edits it cannot.

    :param saved: the manifest a checkpoint recorded.
    :param current: the run folder's ``manifest.yaml``, resolved.
    :raises UsageError: for edits the saved population cannot follow.
    """
    old, new = _flatten(saved), _flatten(current)
    changed = sorted(key for key in old.keys() | new.keys() if _edited(key, old, new))
    refused = [key for key in changed if key not in EDITABLE_ON_RESUME]
    if refused:
        shown = ", ".join(f"{key} ({old.get(key)!r} -> {new.get(key)!r})" for key in refused[:6])
        shown += f" and {len(refused) - 6} more" if len(refused) > 6 else ""
        raise UsageError(
            f"manifest.yaml was edited since the checkpoint, and resuming cannot apply: {shown}",
            "undo those edits, or start a new run with agile train; resume honours only "
            + ", ".join(sorted(EDITABLE_ON_RESUME)),
        )
    return [f"resuming with {key} {new.get(key)!r} (was {old.get(key)!r})" for key in changed]


def _edited(key: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether ``key`` differs. A field naming code differs whenever what it names does (one
    side lacking it is no field of another version: code added or removed is an edit)."""
    if key in trust.CODE_FIELDS:
        return (old.get(key) or None) != (new.get(key) or None)
    return old.get(key) != new.get(key) and not _field_of_another_version(key, old, new)


def _field_of_another_version(key: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """A key one side lacks although it has the section: a field agile added or stopped
    reading (e.g. ``training.eps_start`` of a PPO run saved before training fields moved to
    the paradigms that read them), not an edit. A section one side lacks is an edit."""
    section = key.split(".")[0] + "."
    for lacking in (old, new):
        if key not in lacking and any(other.startswith(section) for other in lacking):
            return True
    return False


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, path))
        else:
            flat[path] = value
    return flat
