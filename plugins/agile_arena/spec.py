"""Run options of the Arena backend (``agile train --backend arena ...``)."""

from __future__ import annotations

from pydantic import Field

from agile_cli import Spec, TrainingSpec, limits

#: The algorithms Arena can run (the reference platform's registry); others are local-only.
ARENA_ALGORITHMS = frozenset(
    {
        "DQN", "RainbowDQN", "DDPG", "TD3", "PPO", "IPPO", "MADDPG", "MATD3",
        "GRPO", "CISPO", "GSPO", "LLMPPO", "LLMREINFORCE", "DPO", "SFT",
    }
)  # fmt: skip


class ArenaOptions(Spec):
    """How ``agile train --backend arena`` submits."""

    resource_id: str = Field(
        "arena-medium", description="Arena resource tier (see `agile arena resources list`)."
    )
    num_nodes: int = Field(2, ge=1, description="Nodes to train on.")
    project: str | None = Field(
        None, description="Arena project; default: `agile arena projects set-default`."
    )
    experiment_name: str | None = Field(None, description="Name of the Arena experiment.")
    upload_env: bool = Field(
        False, description="Upload a custom environment (entrypoint/path) before submitting."
    )
    api_key: str | None = Field(
        None, description="Arena API key (else ARENA_API_KEY, else `agile login`).", repr=False
    )
    base_url: str | None = Field(None, description="Arena API URL (else ARENA_BASE_URL).")
    request_timeout: float = Field(
        30.0,
        gt=0,
        description="Seconds allowed per attempt of a request, until its reply is read; all "
        "attempts and waits of one request end within 3 times this.",
    )
    upload_timeout: float = Field(
        300.0,
        gt=0,
        description="Seconds allowed per attempt of an upload or a submission, until its last "
        "progress line; all attempts and waits end within 3 times this.",
    )


class ArenaTraining(TrainingSpec):
    """The ``training`` fields Arena reads from a manifest (accepted in every manifest, since
    a manifest is validated without knowing where it will run; local training ignores them)."""

    reporting_interval: int = Field(
        default=1024,
        ge=1,
        le=limits.STEPS,
        description="Arena only: environment steps between progress reports.",
    )
    experience_sharing: bool = Field(
        default=False,
        description="Arena only: share experience between nodes (locally it is always shared).",
    )
