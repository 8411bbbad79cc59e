"""Optional metric sinks: Weights & Biases and TensorBoard."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from agile_cli.errors import TrainingError, UsageError


class MetricSink(Protocol):
    def log(self, values: dict[str, float], step: int) -> None: ...
    def close(self) -> None: ...


class WandbSink:
    """Logs scalars to W&B; ``WANDB_MODE`` (offline, disabled) is honoured by wandb itself."""

    def __init__(self, run_dir: Path, config: dict[str, Any], name: str) -> None:
        import wandb

        try:
            self.run = wandb.init(
                project=os.environ.get("WANDB_PROJECT", "agile"),
                name=name,
                config=config,
                dir=str(run_dir),
                reinit="finish_previous",
            )
        except Exception as exc:  # wandb raises many kinds of errors for a missing login
            raise TrainingError(
                f"Weights & Biases could not start: {exc}",
                "run `wandb login`, or set WANDB_MODE=offline to log locally",
            ) from None

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def close(self) -> None:
        self.run.finish()


class TensorBoardSink:
    """Writes scalars under ``<run folder>/tensorboard``."""

    def __init__(self, run_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise UsageError(
                "--tensorboard needs the tensorboard package",
                "install it with `pip install tensorboard` or, in agile's folder, "
                '`pip install -e ".[tensorboard]"`',
            ) from None
        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, values: dict[str, float], step: int) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, global_step=step)

    def close(self) -> None:
        self.writer.close()
