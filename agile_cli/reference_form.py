"""A resolved manifest written in the form agilerl 2.58 reads and writes (its ``to_payload()``
form), so that a run can go back to the reference: ``agile validate --reference``.

The form is agile's resolved manifest with ``apiVersion`` first, no null values (2.58 writes
none and refuses some), the selection section under ``tournament_selection`` and nothing 2.58
has no field for. What agile alone reads is marked on its field (``json_schema_extra=
AGILE_ONLY`` of :mod:`agile_cli.helpers`): at its default it is left out silently, since the
reference then does the same; at another value it is left out with a note, since 2.58 cannot
say it. An algorithm whose spec names a ``reference_gap``, and a recipe, have no form there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from agile_cli.errors import UsageError
from agile_cli.validation import API_VERSION, SELECTION_ALIAS

if TYPE_CHECKING:
    from agile_cli.manifest import TrainingManifest


def reference_form(manifest: TrainingManifest) -> tuple[dict[str, Any], list[str]]:
    """``manifest`` in 2.58's form, and a note for each setting that form cannot carry.

    :raises UsageError: the algorithm, or a recipe, has no form in 2.58's format.
    """
    name = manifest.algorithm_name
    gap = manifest.algorithm.reference_gap
    if gap is not None:
        raise UsageError(f"{name} cannot be written in agilerl 2.58's form: {gap}")
    if manifest.recipe is not None:
        raise UsageError(
            "a recipe has no form in agilerl 2.58's manifest format",
            "write the run's own manifest instead of its recipe",
        )
    notes: list[str] = []
    data = manifest.to_dict()
    form: dict[str, Any] = {"apiVersion": API_VERSION}
    for key, value in data.items():
        section = "tournament_selection" if key == SELECTION_ALIAS else key
        spec = getattr(manifest, section)
        form[section] = _written(value, spec, section, notes)
    form["algorithm"] = {"name": name, **form["algorithm"]}
    environment = form["environment"]
    if environment.pop("builder", None) is not None:
        notes.append(f"environment.builder: {manifest.environment_builder} left out (agile's own)")
    return form, notes


def _written(value: Any, spec: Any, path: str, notes: list[str]) -> Any:
    """``value`` (``spec`` dumped) less its nulls and the fields only agile reads."""
    if isinstance(value, Mapping) and isinstance(spec, BaseModel):
        fields = type(spec).model_fields
        kept = {}
        for key, item in value.items():
            field = fields.get(key)
            if item is None:
                default = None if field is None else field.get_default(call_default_factory=True)
                if default is not None:  # null turns off what 2.58 does by default
                    notes.append(f"{path}.{key}: null left out (agilerl 2.58 uses {default!r})")
                continue
            if field is not None and _agile_only(field.json_schema_extra):
                if getattr(spec, key) != field.get_default(call_default_factory=True):
                    notes.append(
                        f"{path}.{key}: {item!r} left out (agilerl 2.58 has no such field)"
                    )
                continue
            kept[key] = _written(item, getattr(spec, key, None), f"{path}.{key}", notes)
        return kept
    if isinstance(value, Mapping):
        return {
            k: _written(v, None, f"{path}.{k}", notes) for k, v in value.items() if v is not None
        }
    if isinstance(value, list):
        return [_written(item, None, path, notes) for item in value]
    return value


def _agile_only(extra: Any) -> bool:
    return isinstance(extra, dict) and bool(extra.get("agile_only"))
