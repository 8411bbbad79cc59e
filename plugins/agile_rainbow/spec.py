"""The ``algorithm`` section of RainbowDQN."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import Field, ValidationInfo, field_validator

from agile_cli import FieldError, MutationSpec, Spec, limits
from agile_rl import NStepBufferArgs, ReplayBufferSpec, RLAlgorithmSpec, RLOptions

if TYPE_CHECKING:
    from agile_cli import TrainingManifest


class RainbowReplayBufferSpec(ReplayBufferSpec):
    """RainbowDQN's replay memory: prioritised, of n-step returns, unless the manifest says
    otherwise (Rainbow is those two and four more; without them RainbowDQN learnt CartPole in
    2 of 3 seeds at the defaults, with them in 3 of 3)."""

    standard_buffer: bool = Field(
        default=True, description="Accepted for compatibility; it has no effect."
    )
    n_step_buffer: bool = Field(
        default=True,
        description="Learn from n-step returns (RainbowDQN: on unless set to false; the length "
        "is n_step_buffer_args.n_step, else algorithm.n_step).",
    )
    per_buffer: bool = Field(
        default=True, description="Prioritised experience replay (RainbowDQN: on unless false)."
    )


class RainbowDQNSpec(RLOptions, RLAlgorithmSpec):
    """Rainbow (Hessel et al., 2018): a distributional, dueling, noisy, double DQN that learns
    from prioritised replay and n-step returns.

    Prioritised replay and n-step returns are on by default, in the ``replay_buffer`` section
    (``per_buffer``, ``n_step_buffer``), where the n-step length also lives; the reference
    format has them off unless written.
    """

    lr: float = Field(1e-4, gt=0, description="Adam learning rate.")
    learn_step: int = Field(
        5, ge=1, le=limits.ROLLOUT, description="Environment steps between gradient steps."
    )
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    tau: float = Field(
        1e-3, gt=0, le=1, description="Soft update rate of the target network (1 copies it)."
    )
    beta: float = Field(
        0.4,
        ge=0,
        le=1,
        description="Prioritised replay: initial importance-sampling exponent, annealed to 1 "
        "over max_steps.",
    )
    prior_eps: float = Field(
        1e-6, gt=0, description="Prioritised replay: added to every priority (keeps it > 0)."
    )
    num_atoms: int = Field(
        51,
        ge=2,
        le=limits.WIDTH,
        description="Atoms of the return distribution's support (C51 uses 51).",
    )
    v_min: float = Field(
        0.0,
        description="Lowest value of the support. The default suits positive returns such as "
        "CartPole's; lower it for environments with negative returns.",
    )
    v_max: float = Field(
        200.0, validate_default=True, description="Highest value of the support; above v_min."
    )
    noise_std: float = Field(
        0.5,
        gt=0,
        description="Initial noise scale sigma_0 of the noisy layers (exploration); mutating it "
        "rescales every layer's sigma by new / old.",
    )
    n_step: int | None = Field(
        None,
        ge=1,
        le=limits.N_STEP,
        description="The n-step buffer's length when replay_buffer.n_step_buffer_args leaves "
        "it out (if both are given, they must agree; with replay_buffer.n_step_buffer: false "
        "it is ignored).",
    )
    combined_reward: bool = Field(
        False,
        description="With n-step returns, also learn from the one-step return of the same "
        "sampled transitions: the loss is the sum of both cross-entropies (the replay buffer "
        "then keeps each transition's first step too). Ignored without an n-step buffer.",
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr", "batch_size", "learn_step", "gamma", "tau", "beta", "prior_eps", "noise_std",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "batch_size", "learn_step")
    supports_per: ClassVar[bool] = True
    supports_n_step: ClassVar[bool] = True
    replay_buffer_spec: ClassVar[type[Spec] | None] = RainbowReplayBufferSpec

    @field_validator("v_max")
    @classmethod
    def _above_v_min(cls, value: float, info: ValidationInfo) -> float:
        v_min = info.data.get("v_min")
        if v_min is not None and value <= v_min:
            raise ValueError(f"must be greater than v_min ({v_min})")
        return value

    def resolve_section(self, name: str, section: Spec) -> Spec:
        """An n-step buffer whose length the manifest leaves out takes ``algorithm.n_step``
        (what the reference's own manifests write, with the buffer's flag left out); a
        mutation section that leaves out ``dormant_threshold`` resets no neurons, where
        AgileRL 2.58 resets at 0.01: RainbowDQN learnt CartPole worse with the resets
        (docs/performance.md, "The neuron-level mutation operators, on and off")."""
        if name == "mutation" and isinstance(section, MutationSpec):
            if "dormant_threshold" in section.model_fields_set:
                return section
            return section.model_copy(update={"dormant_threshold": None})
        if name != "replay_buffer" or not isinstance(section, ReplayBufferSpec):
            return section
        replay = section
        written = "n_step_buffer_args" in replay.model_fields_set
        if self.n_step is None or not replay.n_step_buffer or written:
            return replay
        return replay.model_copy(update={"n_step_buffer_args": NStepBufferArgs(n_step=self.n_step)})

    def check_manifest(self, manifest: TrainingManifest) -> list[FieldError]:
        replay = manifest.replay_buffer
        if (
            self.n_step is None
            or not isinstance(replay, ReplayBufferSpec)
            or not replay.n_step_buffer
        ):
            return []  # without an n-step buffer it only earns a warning
        if self.n_step != replay.n_step_buffer_args.n_step:
            return [
                FieldError(
                    "algorithm.n_step",
                    f"{self.n_step} disagrees with replay_buffer.n_step_buffer_args.n_step "
                    f"({replay.n_step_buffer_args.n_step})",
                    "remove it; RainbowDQN uses replay_buffer.n_step_buffer_args.n_step",
                )
            ]
        return []

    def learns_from_first_steps(self) -> bool:
        """With ``combined_reward``, the one-step return too."""
        return self.combined_reward

    def manifest_warnings(self, manifest: TrainingManifest) -> list[str]:
        """``n_step`` and ``combined_reward`` without an n-step buffer are ignored (the
        reference format writes them so, and its trainer ignores them too)."""
        replay = manifest.replay_buffer
        if isinstance(replay, ReplayBufferSpec) and replay.n_step_buffer:
            return []
        warnings = []
        if self.n_step is not None:
            warnings.append(
                f"algorithm.n_step: ignored, no n-step returns without "
                f"replay_buffer.n_step_buffer (for {self.n_step}-step returns set "
                f"replay_buffer.n_step_buffer: true and n_step_buffer_args.n_step: "
                f"{self.n_step}; else remove it)"
            )
        if self.combined_reward:
            warnings.append(
                "algorithm.combined_reward: ignored, the one-step return is the only one "
                "without replay_buffer.n_step_buffer"
            )
        return warnings
