"""Proposed core test (loop.py): Ctrl-C as a generation ends keeps that generation whole."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agile_cli.cli import cli
from agile_cli.evolution.mutation import Mutator
from agile_cli.training import checkpoint

MANIFEST = """\
algorithm: {name: DQN, batch_size: 16}
environment: {name: CartPole-v1, num_envs: 2}
training: {max_steps: 256, evo_steps: 64, pop_size: 2}
mutation: {}
tournament_selection: {}
"""


def test_ctrl_c_during_selection_and_mutation_keeps_the_generation_just_trained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The generation's metrics line is written and its counters are counted before its
    members are selected and mutated: a Ctrl-C then must not leave the checkpoint behind."""
    mutate = Mutator.mutate
    pressed: list[int] = []

    def pressing(self: Mutator, population: list[Any], **options: Any) -> Any:
        if not options.get("pre_training") and not pressed:
            pressed.append(1)
            os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C here
        return mutate(self, population, **options)

    monkeypatch.setattr(Mutator, "mutate", pressing)
    (tmp_path / "m.yaml").write_text(MANIFEST, encoding="utf-8")
    run = tmp_path / "run"
    args = ["train", str(tmp_path / "m.yaml"), "--quiet", "--device", "cpu", "--run-dir", str(run)]
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in `agile train`
    try:
        result = CliRunner().invoke(cli, args)
    finally:
        signal.signal(signal.SIGINT, before)
    assert result.exit_code == 130, result.output
    assert "the checkpoint of generation 1 is kept" in result.output
    state = checkpoint.load(run / "checkpoints" / "latest.pt", kind=checkpoint.POPULATION)
    summary = json.loads((run / "summary.json").read_text())
    assert pressed and state["state"]["generation"] == summary["generations"] == 1
