"""Shared fixtures: run the real CLI, and register a plugin for one test only; a small Atari
manifest the Atari and EnvPool tests train."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from agile_cli.cli import CORE_COMMANDS, cli
from agile_cli.host.plugins import PluginHost, build_host

os.environ.setdefault("WANDB_MODE", "disabled")

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").rglob("*.yaml"))


@pytest.fixture(autouse=True, scope="session")
def _compiled_kernels(tmp_path_factory: pytest.TempPathFactory) -> None:
    """``--compile on``'s kernels (``torch.compile``) go to one folder of the test session,
    shared by its workers and the runs they start, not to the user's cache."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's folder sits in the session's
        shared = shared.parent
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(shared / "inductor")


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> Iterator[None]:
    """The tests' networks are tiny: one thread avoids OpenMP waits on a busy machine (and
    matches what training itself sets)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def make_host() -> Callable[..., PluginHost]:
    """Build a plugin host from the installed plugins plus the given ``(name, plugin)`` pairs."""

    def make(*extra: tuple[str, object], **kwargs: object) -> PluginHost:
        return build_host(extra_plugins=extra, reserved_commands=CORE_COMMANDS, **kwargs)

    return make


@pytest.fixture
def run() -> Callable[..., Result]:
    """Invoke ``agile ARGS`` in-process; pass ``host=`` to use a custom plugin host."""

    def invoke(*args: str, host: PluginHost | None = None) -> Result:
        return CliRunner().invoke(cli, list(args), obj=host, catch_exceptions=False)

    return invoke


@pytest.fixture
def write(tmp_path: Path) -> Iterator[Callable[[str, str], Path]]:
    """Write a file under a temporary folder and return its path."""

    def write_file(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    yield write_file


MINIMAL = """\
algorithm:
  name: DQN
environment:
  name: CartPole-v1
"""


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny local language model (``agile llm tiny-model``, 40 pretraining steps), made
    once per test process; a module that needs another pretraining defines its own."""
    from agile_llm.tiny import make_tiny_model

    path = tmp_path_factory.mktemp("tiny-llm")
    make_tiny_model(path, steps=40, seed=0)
    return path


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """The digits rows as a JSON-lines file, with the reward file ``reward.py`` (``exact``)
    beside it."""
    import json

    from .llm_rows import REWARD, ROWS

    path = tmp_path / "digits.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    (tmp_path / "reward.py").write_text(REWARD, encoding="utf-8")
    return path


def small_breakout(environment: dict[str, Any], path: Path) -> Path:
    """A manifest at ``path``: a small PPO population, one generation of 128 steps a member,
    on two copies of ``environment``."""
    manifest = {
        "algorithm": {"name": "PPO", "batch_size": 32, "learn_step": 64, "update_epochs": 1},
        "environment": {**environment, "num_envs": 2},
        "network": {"latent_dim": 32, "encoder_config": {"channel_size": [8, 16],
                    "kernel_size": [8, 4], "stride_size": [4, 2]}},
        "training": {"max_steps": 128, "evo_steps": 128, "pop_size": 2, "eval_steps": 50},
    }  # fmt: skip
    path.write_text(yaml.safe_dump(manifest))
    return path
