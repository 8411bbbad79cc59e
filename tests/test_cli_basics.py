"""`agile --help`, `--version`, and the promise that they stay light."""

from __future__ import annotations

import subprocess
import sys

from agile_cli import __version__

from .conftest import CONFIGS, ROOT

HEAVY = (
    "torch",
    "gymnasium",
    "numpy",
    "wandb",
    "httpx",
    "rich",
    "transformers",
    "peft",
    "tokenizers",
    "datasets",
    "pyarrow",
    "ray",
)

PROBE = """
import sys
from agile_cli.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(%r))
print("HEAVY:", ",".join(heavy))
"""


def _heavy_imports(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PROBE % (HEAVY,), *args], capture_output=True, text=True, check=True
    )
    return result.stdout.strip().splitlines()[-1]


def test_help_and_validate_import_no_heavy_dependency() -> None:
    assert _heavy_imports("--help") == "HEAVY:"
    assert _heavy_imports("validate", str(CONFIGS[0])) == "HEAVY:"
    assert _heavy_imports("schema") == "HEAVY:"
    assert _heavy_imports("init", "PPO") == "HEAVY:"


def test_version_and_help(run) -> None:
    assert run("--version").output.strip() == f"agile, version {__version__}"
    result = run("--help")
    assert result.exit_code == 0
    for command in ("validate", "plugins", "schema"):
        assert command in result.output


def test_python_dash_m_runs_the_cli() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agile_cli", "validate", str(CONFIGS[0])],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert ": ok (" in result.stdout


def test_usage_mistake_exits_two(run) -> None:
    assert run("validate").exit_code == 2
    assert run("no-such-command").exit_code == 2


def test_a_backend_option_of_another_backend_is_named_as_typed(run) -> None:
    result = run("train", str(ROOT / "configs" / "training" / "dqn" / "cartpole.yaml"), "--async")
    assert result.exit_code == 2
    assert "--async is not an option of backend 'local'" in result.output
    assert "Traceback" not in result.output
