"""The run folder every training run leaves behind.

runs/<algorithm>-<environment>-<YYYYmmdd-HHMMSS>/
  manifest.yaml        the resolved manifest (every default filled in)
  command.txt          the command line that started (or resumed) the run
  metrics.jsonl        one JSON object per generation
  checkpoints/         latest.pt (every generation) and step_<N>.pt snapshots
  elite.pt             the best member at the last selection (or at the end)
  summary.json         best fitness, steps, speed, whether the target was reached
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from agile_cli.manifest import TrainingManifest


class RunFolder:
    """Paths and writers of one run folder."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.checkpoints = path / "checkpoints"

    @classmethod
    def create(cls, manifest: TrainingManifest, base: Path | None = None) -> RunFolder:
        """Make a new run folder (``base`` itself if given, else one under ``runs/``)."""
        if base is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            label = re.sub(
                r"[^A-Za-z0-9._-]+", "_", f"{manifest.algorithm_name}-{manifest.environment.name}"
            )
            base = Path("runs") / f"{label}-{stamp}"
            suffix = 1
            while base.exists():
                suffix += 1
                base = Path("runs") / f"{label}-{stamp}-{suffix}"
        folder = cls(base)
        folder.checkpoints.mkdir(parents=True, exist_ok=True)
        text = yaml.safe_dump(manifest.to_dict(), sort_keys=False)
        (base / "manifest.yaml").write_text(text, encoding="utf-8")
        folder.record_command()
        return folder

    @property
    def manifest(self) -> Path:
        return self.path / "manifest.yaml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    @property
    def elite(self) -> Path:
        return self.path / "elite.pt"

    @property
    def latest(self) -> Path:
        return self.checkpoints / "latest.pt"

    def record_command(self) -> None:
        """Append the current command line (a resumed run gets a second line)."""
        with (self.path / "command.txt").open("a", encoding="utf-8") as stream:
            stream.write(shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) + "\n")

    def append_metrics(self, record: dict[str, Any]) -> None:
        with self.metrics.open("a", encoding="utf-8") as stream:
            stream.write(json.dumps(record) + "\n")

    def write_summary(self, summary: dict[str, Any]) -> None:
        self.summary.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
