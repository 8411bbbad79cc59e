"""The ``mutation`` section: which mutations happen how often, and within which ranges."""

from __future__ import annotations

from pydantic import Field, model_validator

from agile_cli.models.base import AGILE_ONLY, Spec, located_error

#: The kind of mutation each ``mutation.probabilities`` field weighs (``no_mut`` weighs none).
KIND_FIELDS = {
    "arch_mut": "architecture",
    "new_layer": "architecture",
    "params_mut": "parameters",
    "act_mut": "activation",
    "rl_hp_mut": "rl_hp",
}


class MutationProbabilities(Spec):
    """Relative weights of the mutation kinds; normalised, so they need not sum to 1."""

    no_mut: float = Field(
        default=0.4, ge=0, le=1, description="Weight of leaving an agent unchanged."
    )
    arch_mut: float = Field(
        default=0.2, ge=0, le=1, description="Weight of an architecture mutation."
    )
    new_layer: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description=(
            "Within an architecture mutation, the share of layer add/remove moves "
            "(the rest are node moves). Not a mutation kind of its own."
        ),
    )
    params_mut: float = Field(
        default=0.2, ge=0, le=1, description="Weight of Gaussian weight noise."
    )
    act_mut: float = Field(
        default=0.0, ge=0, le=1, description="Weight of a hidden activation swap."
    )
    rl_hp_mut: float = Field(
        default=0.2, ge=0, le=1, description="Weight of an RL hyperparameter change."
    )

    def weights(self) -> dict[str, float]:
        """The mutation kinds in their fixed order, with their weights (new_layer excluded)."""
        return {
            "none": self.no_mut,
            "architecture": self.arch_mut,
            "parameters": self.params_mut,
            "activation": self.act_mut,
            "rl_hp": self.rl_hp_mut,
        }


class RLHyperparameter(Spec):
    """The range an RL hyperparameter may be mutated within."""

    min: float = Field(description="Smallest value a mutation may produce.")
    max: float = Field(description="Largest value a mutation may produce.")
    grow_factor: float = Field(
        default=1.2, ge=1, description="Factor applied when the value grows."
    )
    shrink_factor: float = Field(
        default=0.8, ge=0, le=1, description="Factor applied when the value shrinks."
    )

    @model_validator(mode="after")
    def _ordered(self) -> RLHyperparameter:
        if self.min > self.max:
            raise located_error("max", f"{self.max} is below min ({self.min})", "swap them")
        return self


class MutationSpec(Spec):
    """Evolutionary hyperparameter optimisation: mutation weights, ranges, noise and seed."""

    name: str | None = Field(
        default=None,
        max_length=200,
        description="A label for the section (the reference writes one); agile keeps it.",
    )
    probabilities: MutationProbabilities = Field(
        default_factory=MutationProbabilities, description="Weights of the mutation kinds."
    )
    rl_hp_selection: dict[str, RLHyperparameter] = Field(
        default_factory=dict,
        description=(
            "Hyperparameters to mutate and their ranges. Empty: the algorithm's default set, "
            "each within [value/10, value*10] (floats) or [value//4, value*4] (integers)."
        ),
    )
    mutation_sd: float = Field(
        default=0.1, ge=0, description="Relative standard deviation of parameter mutations."
    )
    rand_seed: int = Field(
        default=42, ge=0, description="Seed of the mutation and selection generator."
    )
    dormant_threshold: float | None = Field(
        default=0.01,
        ge=0,
        le=1,
        description=(
            "A parameter mutation first re-initialises the member's dormant neurons: those "
            "whose mean gradient magnitude in the last generation, relative to their layer's "
            "mean, is at most this (ReGraMa, as the reference). null: no resets. An algorithm "
            "may leave them off when the field is not written (RainbowDQN does)."
        ),
    )
    preserve_function: bool = Field(
        default=True,
        description=(
            "Nodes and layers an architecture mutation adds start so that the network computes "
            "what it computed before (new nodes' outgoing weights zero, a new layer the "
            "identity), where the layers around them allow it; false: they start random."
        ),
        json_schema_extra=AGILE_ONLY,
    )
