"""The ``algorithm`` section of IPPO: the clipped-objective update fields PPO has too (from
``agile_cli``), plus acting options."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from agile_cli import FieldError, limits
from agile_rl import ClippedObjectiveSpec, evolvable_network

if TYPE_CHECKING:
    from agile_cli import TrainingManifest


class IPPOSpec(ClippedObjectiveSpec):
    """Independent PPO (de Witt et al., 2020): every agent learns its own clipped-objective
    actor-critic from its own rewards; agents of a group share one."""

    batch_size: int = Field(
        64,
        ge=1,
        le=limits.BATCH,
        description="Samples (one agent's step each) per gradient step of a group.",
    )
    action_batch_size: int | None = Field(
        None,
        ge=1,
        le=limits.BATCH,
        description=(
            "Acting: at most this many rows (agents of a group x environments) per forward "
            "pass, to bound memory with many environments; null: all at once."
        ),
    )
    torch_compiler: str | None = Field(
        None,
        description="Accepted for compatibility; must be null (torch.compile is not used).",
    )

    def check_manifest(self, manifest: TrainingManifest) -> list[FieldError]:
        errors = self.not_available_errors("torch_compiler", "torch.compile")
        if evolvable_network(manifest).arch in ("lstm", "cnn_lstm"):
            errors.append(
                FieldError(
                    "network.encoder_config.arch",
                    "IPPO's policies carry no hidden state",
                    "use an MLP (remove arch), or a CNN for image observations",
                )
            )
        return errors
