"""The ``algorithm`` section of PPO."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

from agile_cli import FieldError, limits
from agile_rl import ClippedObjectiveSpec, evolvable_network

if TYPE_CHECKING:
    from agile_cli import TrainingManifest


class PPOSpec(ClippedObjectiveSpec):
    """Proximal Policy Optimization with clipped objective and GAE (Schulman et al., 2017)."""

    clip_value_loss: bool = Field(
        False, description="Clip the value update to clip_coef around the old estimate."
    )
    normalize_advantages: bool = Field(True, description="Normalise advantages per minibatch.")
    rollout_buffer_config: dict[str, Any] = Field(
        default_factory=dict, description="Accepted for compatibility; must be empty."
    )
    recurrent: bool = Field(
        False, description="LSTM policy (recurrent PPO): the network's encoder is an LSTM."
    )
    max_seq_len: int | None = Field(
        32,
        ge=1,
        le=limits.ROLLOUT,
        description=(
            "Recurrent PPO: steps per training sequence (backpropagation through time); "
            "a minibatch holds batch_size // max_seq_len sequences. null: whole episodes "
            "are the sequences, cut where episodes end (one still running when the rollout "
            "ends gives the steps it has so far), each re-run from the hidden state stored "
            "at its first step; a minibatch holds shuffled episodes while they fit in "
            "batch_size steps (an episode longer than that alone), padded at their ends to "
            "its longest episode, the padding masked out of the loss."
        ),
    )
    bptt_sequence_type: Literal["chunked", "maximum", "fifty_percent_overlap"] = Field(
        "chunked",
        description="Recurrent PPO: how rollouts are cut into sequences (chunked only, so far).",
    )
    share_encoders: bool = Field(True, description="Actor and critic share one encoder.")
    num_envs: int | None = Field(
        None, ge=1, description="Derived from environment.num_envs; leave it out."
    )

    @field_validator("rollout_buffer_config")
    @classmethod
    def _empty(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value:
            raise ValueError("no rollout buffer options are available; remove the keys")
        return value

    def check_manifest(self, manifest: TrainingManifest) -> list[FieldError]:
        return [
            *self._recurrent_errors(manifest),
            *self.num_envs_copy_errors("num_envs", manifest),
        ]

    def _recurrent_errors(self, manifest: TrainingManifest) -> list[FieldError]:
        """An LSTM encoder goes with ``recurrent``, and ``recurrent`` with an LSTM encoder."""
        network = evolvable_network(manifest)
        if not self.recurrent:
            if network.arch != "lstm":
                return []
            return [
                FieldError(
                    "network.encoder_config.arch",
                    "'lstm' needs algorithm.recurrent: true",
                    "set algorithm.recurrent: true, or remove arch",
                )
            ]
        if network.simba:
            message = "cannot be combined with algorithm.recurrent: true"
            return [FieldError("network.simba", message)]
        errors = []
        if network.arch not in (None, "lstm"):
            errors.append(
                FieldError(
                    "network.encoder_config.arch",
                    f"'{network.arch}' carries no hidden state, but algorithm.recurrent is true",
                    "write arch: lstm, or remove arch",
                )
            )
        elif network.arch is None and network.encoder_config is not None:
            errors.append(
                FieldError(
                    "network.encoder_config",
                    "describes an MLP encoder, but algorithm.recurrent is true",
                    "give the LSTM's fields, e.g. {hidden_state_size: 64}, or remove it",
                )
            )
        if self.bptt_sequence_type != "chunked":
            errors.append(
                FieldError(
                    "algorithm.bptt_sequence_type",
                    f"'{self.bptt_sequence_type}' is not available yet",
                    "use chunked",
                )
            )
        return errors
