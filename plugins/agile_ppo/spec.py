"""The ``algorithm`` section of PPO."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator

from agile_cli import FieldError, limits
from agile_cli.helpers import AGILE_ONLY
from agile_rl import ClippedObjectiveSpec, evolvable_network

if TYPE_CHECKING:
    from agile_cli import TrainingManifest

#: The encoders that carry a hidden state: for vector observations, and for images.
_RECURRENT_ENCODERS = ("lstm", "cnn_lstm")

#: The reference's rollout buffer options, at what agile's rollouts do.
_ROLLOUT_BUFFER: dict[str, Any] = {
    "use_gae": True,
    "wrap_at_capacity": False,
}


class PPOSpec(ClippedObjectiveSpec):
    """Proximal Policy Optimization with clipped objective and GAE (Schulman et al., 2017)."""

    clip_value_loss: bool = Field(
        False,
        json_schema_extra=AGILE_ONLY,
        description="Clip the value update to clip_coef around the old estimate.",
    )
    normalize_advantages: bool = Field(
        True, json_schema_extra=AGILE_ONLY, description="Normalise advantages per minibatch."
    )
    rollout_buffer_config: dict[str, Any] = Field(
        default_factory=dict,
        description="The reference's rollout buffer options, accepted for compatibility where "
        "they say what agile does: use_gae: true, wrap_at_capacity: false.",
    )
    recurrent: bool = Field(
        False,
        description="LSTM policy (recurrent PPO): the network's encoder is an LSTM (lstm), or "
        "convolutions then an LSTM (cnn_lstm) for image observations.",
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
        description="Recurrent PPO: where sequences of max_seq_len start: every max_seq_len "
        "steps (chunked), every step (maximum) or every max_seq_len // 2 (fifty_percent_overlap; "
        "each step then learns in two sequences).",
    )
    share_encoders: bool = Field(True, description="Actor and critic share one encoder.")
    num_envs: int | None = Field(
        None, ge=1, description="Derived from environment.num_envs; leave it out."
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        *ClippedObjectiveSpec.mutable_hyperparameters,
        "max_seq_len",
    )

    @field_validator("rollout_buffer_config")
    @classmethod
    def _what_agile_does(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, given in value.items():
            if key not in _ROLLOUT_BUFFER:
                options = ", ".join(_ROLLOUT_BUFFER)
                raise ValueError(f"{key!r} is not an option agile reads (it reads {options})")
            if given != _ROLLOUT_BUFFER[key]:
                said, agile = json.dumps(given), json.dumps(_ROLLOUT_BUFFER[key])
                raise ValueError(f"{key}: only {agile} is available (got {said}); remove it")
        return value

    def check_manifest(self, manifest: TrainingManifest) -> list[FieldError]:
        return [
            *self._recurrent_errors(manifest),
            *self.num_envs_copy_errors("num_envs", manifest),
            *self._sequence_mutation_errors(manifest),
        ]

    def _sequence_mutation_errors(self, manifest: TrainingManifest) -> list[FieldError]:
        """``max_seq_len`` mutates only where it cuts sequences: a recurrent policy's, set."""
        mutation = manifest.mutation
        if mutation is None or "max_seq_len" not in mutation.rl_hp_selection:
            return []
        if self.recurrent and self.max_seq_len is not None:
            return []
        why = "algorithm.recurrent is false" if not self.recurrent else "max_seq_len is null"
        return [
            FieldError(
                "mutation.rl_hp_selection.max_seq_len",
                f"cannot mutate: {why}",
                "remove it, or train a recurrent policy with a max_seq_len",
            )
        ]

    def _recurrent_errors(self, manifest: TrainingManifest) -> list[FieldError]:
        """A recurrent encoder (``lstm``, ``cnn_lstm``) goes with ``recurrent``, and
        ``recurrent`` with a recurrent encoder."""
        network = evolvable_network(manifest)
        if not self.recurrent:
            if network.arch not in _RECURRENT_ENCODERS:
                return []
            return [
                FieldError(
                    "network.encoder_config.arch",
                    f"'{network.arch}' needs algorithm.recurrent: true",
                    "set algorithm.recurrent: true, or remove arch",
                )
            ]
        if network.simba:
            message = "cannot be combined with algorithm.recurrent: true"
            return [FieldError("network.simba", message)]
        errors = []
        if network.arch not in (None, *_RECURRENT_ENCODERS):
            errors.append(
                FieldError(
                    "network.encoder_config.arch",
                    f"'{network.arch}' carries no hidden state, but algorithm.recurrent is true",
                    "write arch: lstm (vector observations) or cnn_lstm (images), or remove arch",
                )
            )
        elif network.arch is None and network.encoder_config is not None:
            errors.append(
                FieldError(
                    "network.encoder_config",
                    "describes an MLP encoder, but algorithm.recurrent is true",
                    "give the LSTM's fields, e.g. {hidden_state_size: 64} (for images, "
                    "arch: cnn_lstm and its fields), or remove it",
                )
            )
        return errors
