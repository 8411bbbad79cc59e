"""The ``replay_buffer`` section for off-policy algorithms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import AliasChoices, Field, model_validator

from agile_cli import FieldError, Spec, limits
from agile_cli.helpers import located_error
from agile_rl.spec import RLOptions


class NStepBufferArgs(Spec):
    """Options of the n-step return buffer."""

    n_step: int = Field(
        default=3,
        ge=1,
        le=limits.N_STEP,
        description=f"Steps summed into each n-step return. At most {limits.N_STEP:,}.",
    )


class PERBufferArgs(Spec):
    """Options of the prioritised replay buffer."""

    alpha: float = Field(default=0.5, ge=0, le=1, description="Priority exponent (0 is uniform).")


#: The options that ask something of the algorithm: field, capability flag, what it is.
_ASKED = (
    ("per_buffer", "supports_per", "prioritised replay"),
    ("n_step_buffer", "supports_n_step", "n-step returns"),
)


class ReplayBufferSpec(Spec):
    """The replay memory shared by the whole population."""

    max_size: int = Field(
        default=100_000,
        ge=1,
        le=limits.BUFFER,
        validation_alias=AliasChoices("max_size", "memory_size"),
        description="Transitions kept (alias memory_size). "
        f"At most {limits.BUFFER:,}; `agile train` also checks that it fits in memory.",
    )
    standard_buffer: bool = Field(
        default=True,
        description="Accepted for compatibility; a uniform buffer is the default anyway.",
    )
    n_step_buffer: bool = Field(
        default=False, description="Learn from n-step returns (single-agent)."
    )
    n_step_buffer_args: NStepBufferArgs = Field(
        default_factory=NStepBufferArgs, description="Options of the n-step buffer."
    )
    per_buffer: bool = Field(
        default=False, description="Prioritised experience replay (algorithms that support it)."
    )
    per_buffer_args: PERBufferArgs = Field(
        default_factory=PERBufferArgs, description="Options of the prioritised buffer."
    )

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        if isinstance(data, dict) and "max_size" in data and "memory_size" in data:
            raise located_error(
                "memory_size", "given together with 'max_size', its other spelling", "keep only one"
            )
        return data

    def algorithm_errors(
        self, section: str, algorithm: str, spec: type[Any], installed: Callable[[], dict[str, Any]]
    ) -> list[Any]:
        """Prioritised replay or n-step returns for an algorithm that cannot learn from them,
        naming those installed that can."""
        errors = []
        for key, capability, what in _ASKED:
            if getattr(self, key) and not RLOptions.has(spec, capability):
                able = [name for name, other in installed().items()
                        if RLOptions.has(other, capability)]  # fmt: skip
                hint = ("supported by: " + ", ".join(able)) if able else "set it to false"
                errors.append(
                    FieldError(f"{section}.{key}", f"{algorithm} cannot learn from {what}", hint)
                )
        return errors
