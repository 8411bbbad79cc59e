"""Resuming a run saved by an earlier agile, whose resolved manifest had other fields."""

from __future__ import annotations

import pytest

from agile_cli.errors import UsageError
from agile_cli.training.resume import manifest_edits

SAVED = {
    "algorithm": {"name": "PPO", "lr": 0.001},
    "training": {"max_steps": 1000, "eps_start": 1.0, "learning_delay": 0, "sum_scores": True},
    "mutation": {"rl_hp_selection": {}},
}


def test_training_fields_agile_stopped_reading_are_not_edits() -> None:
    current = {"algorithm": {"name": "PPO", "lr": 0.001}, "training": {"max_steps": 1000},
               "mutation": {"rl_hp_selection": {}}}  # fmt: skip
    assert manifest_edits(SAVED, current) == []


def test_a_field_agile_added_is_not_an_edit() -> None:
    current = {**SAVED, "training": {**SAVED["training"], "reporting_interval": 1024}}
    assert manifest_edits(SAVED, current) == []


def test_a_removed_section_and_a_changed_value_are_still_edits() -> None:
    without_mutation = {key: value for key, value in SAVED.items() if key != "mutation"}
    with pytest.raises(UsageError, match="mutation"):
        manifest_edits(SAVED, without_mutation)
    changed = {**SAVED, "algorithm": {"name": "PPO", "lr": 0.01}}
    with pytest.raises(UsageError, match=r"algorithm.lr \(0.001 -> 0.01\)"):
        manifest_edits(SAVED, changed)
