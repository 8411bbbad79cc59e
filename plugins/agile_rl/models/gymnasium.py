"""The ``environment`` fields of a vector of Gymnasium environments (the ``gymnasium`` and
``offline`` builders), with the standard Atari preprocessing for ``ALE/`` ids and EnvPool as
the optional engine that steps them."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from agile_cli import Spec, VectorEnvironmentSpec
from agile_cli.helpers import AGILE_ONLY, located_error

#: ``config`` keys an Atari game takes with ``atari`` preprocessing (ale-py's vector
#: environment's own; the rest of ``gymnasium.make``'s are the preprocessing's to set), with
#: what each must be.
ATARI_CONFIG = {
    "repeat_action_probability": ("a number in [0, 1]", lambda v: _number(v) and 0 <= v <= 1),
    "full_action_space": ("true or false", lambda v: isinstance(v, bool)),
    "max_num_frames_per_episode": ("a positive integer", lambda v: _integer(v) and v > 0),
}


#: ``config`` keys of EnvPool's that agile sets itself with ``engine: envpool``, with what sets
#: them.
ENVPOOL_OWN = {
    "num_envs": "environment.num_envs",
    "batch_size": "agile (every copy steps at each step)",
    "seed": "the run's --seed",
    "env_seed": "the run's --seed",
    "max_num_players": "agile (one player)",
    "gym_reset_return_info": "agile",
}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class AtariSpec(Spec):
    """The standard Atari preprocessing (Mnih et al., 2015; Machado et al., 2018), done by
    ale-py's vector environment in C++ threads. The environment reports each game's own score
    and end; what the learner sees instead (clipped rewards, a lost life as an episode's end)
    is applied where it learns, so returns and fitness stay the game's score."""

    noop_max: int = Field(
        30, ge=0, le=1000, description="Up to this many no-op actions start each episode."
    )
    frame_skip: int = Field(
        4,
        ge=1,
        le=16,
        description="Frames each action repeats; an observation is the maximum of the last two.",
    )
    screen_size: int = Field(
        84, ge=8, le=512, description="Frames are resized to a square of this side."
    )
    grayscale: bool = Field(True, description="Frames in grayscale (else RGB).")
    frame_stack: int = Field(
        4, ge=1, le=32, description="An observation is this many latest frames, stacked."
    )
    episodic_life: bool = Field(
        False,
        description="The learner sees a lost life as the end of an episode (the game goes on; "
        "returns stay whole games'). Off by default, as Machado et al. recommend.",
    )
    clip_rewards: bool = Field(
        True, description="The learner sees each reward's sign (returns stay the game's score)."
    )
    fire_reset: bool = Field(
        True,
        description="Press FIRE after each reset and each lost life, for games that wait for it.",
    )


class GymnasiumEnvSpec(VectorEnvironmentSpec):
    """A vector of Gymnasium environments: a registered id (``config`` goes to
    ``gymnasium.make``) or your own callable; with ``engine: envpool``, a task EnvPool knows
    (``config`` goes to ``envpool.make``). :func:`~agile_rl.gym_vector_env` builds it."""

    registered_makers: ClassVar[tuple[str, ...]] = ("gymnasium:make",)

    name: str = Field(
        min_length=1,
        description="Registered Gymnasium id (e.g. CartPole-v1), or a label with entrypoint.",
    )
    atari: AtariSpec | bool | None = Field(
        None,
        json_schema_extra=AGILE_ONLY,
        description="An ALE/ game with the standard Atari preprocessing: true for its "
        "defaults, or the fields to change (the atari extra installs ale-py).",
    )
    engine: Literal["gymnasium", "envpool"] = Field(
        "gymnasium",
        json_schema_extra=AGILE_ONLY,
        description="What steps the copies: gymnasium (its vectors, or ale-py's with atari) or "
        "envpool (EnvPool's C++ threads, for the ids it knows; the envpool extra).",
    )

    @field_validator("atari", mode="before")
    @classmethod
    def _atari_switch(cls, value: Any) -> Any:
        """``true`` is the preprocessing's defaults; ``false`` none (so that, validated, the
        field is an :class:`AtariSpec` or None)."""
        if isinstance(value, bool):
            return {} if value else None
        return value

    @model_validator(mode="after")
    def _atari_fits(self) -> GymnasiumEnvSpec:
        """The preprocessing runs in ale-py's vector environment: an ``ALE/`` id of the v5
        family, made by agile, with ale-py's own options only."""
        if self.atari is None:
            return self
        own = "for your own environment, apply gymnasium.wrappers.AtariPreprocessing and "
        own += "FrameStackObservation in wrappers instead"
        if self.entrypoint or self.factory or self.wrappers:
            field = "entrypoint" if self.entrypoint else "factory" if self.factory else "wrappers"
            raise located_error(
                field, "cannot be combined with atari (ale-py's vector environment makes the "
                "games)", own,
            )  # fmt: skip
        if not (self.name.startswith("ALE/") and self.name.endswith("-v5")):
            raise located_error(
                "atari", f"needs an ALE/...-v5 game, not {self.name!r}", f"e.g. ALE/Pong-v5; {own}"
            )
        if unknown := sorted(set(self.config) - set(ATARI_CONFIG)):
            raise located_error(
                f"config.{unknown[0]}", "is not an option of an Atari game with atari "
                "preprocessing", f"use {', '.join(ATARI_CONFIG)}, or the fields of atari",
            )  # fmt: skip
        for key, value in self.config.items():
            wanted, fits = ATARI_CONFIG[key]
            if not fits(value):
                raise located_error(f"config.{key}", f"must be {wanted}, not {value!r}")
        return self

    @model_validator(mode="after")
    def _envpool_fits(self) -> GymnasiumEnvSpec:
        """EnvPool makes the copies of a task it knows, by its id: no callable or wrappers of
        the user's, an Atari game only with ``atari`` (EnvPool preprocesses every game), and
        none of the options agile sets itself in ``config``. Whether EnvPool knows the id is
        the build's to check (``--check-env``): validation imports no environment library."""
        if self.engine != "envpool":
            return self
        if self.entrypoint or self.factory or self.wrappers:
            field = "entrypoint" if self.entrypoint else "factory" if self.factory else "wrappers"
            raise located_error(
                field, "cannot be combined with engine envpool (EnvPool makes its own tasks by "
                "their ids)", "use engine: gymnasium for your own environment or wrappers",
            )  # fmt: skip
        if self.name.startswith("ALE/") and self.atari is None:
            raise located_error(
                "atari", "must be set for an Atari game with engine envpool (EnvPool's games "
                "come preprocessed)", "atari: true, or the fields to change",
            )  # fmt: skip
        if own := sorted(set(self.config) & set(ENVPOOL_OWN)):
            raise located_error(
                f"config.{own[0]}", "is agile's to set with engine envpool",
                f"{ENVPOOL_OWN[own[0]]} sets it; drop it from config",
            )  # fmt: skip
        return self
