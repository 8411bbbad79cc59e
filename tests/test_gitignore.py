""".gitignore: what agile writes at the top of the checkout is ignored, same-named files of the
project's folders are not."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout"
)


def _ignored(path: str) -> bool:
    """Whether git ignores ``path`` (relative to the checkout), whether or not it exists."""
    checked = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT, check=False
    )
    return checked.returncode == 0


@pytest.mark.parametrize(
    "path",
    ["report.html", "report.png", "report-curves.png", "report-lineage.png", "episodes.mp4",
     "elite.onnx", "policy.onnx", "elite.ts", "runs/PPO-CartPole-v1/metrics.csv"],
)  # fmt: skip
def test_what_agile_writes_at_the_top_is_ignored(path: str) -> None:
    assert _ignored(path)


@pytest.mark.parametrize(
    "path",
    ["docs/images/report-curves.png", "plugins/agile_report/report.html", "tests/data/clip.mp4",
     "tests/data/elite.onnx", "agile_cli/elite.ts", "plugins/agile_report/curves.py"],
)  # fmt: skip
def test_the_project_s_own_files_of_those_names_are_not(path: str) -> None:
    assert not _ignored(path)
