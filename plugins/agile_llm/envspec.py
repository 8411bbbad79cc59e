"""The ``llm`` environment section, in both forms of the reference's format.

agilerl 2.58's form has two kinds: ``rollout`` (the model generates; every generative regime,
one turn being ``max_turns: 1``) from exactly one source, and ``dataset`` (teacher-forced rows,
``objective: sft | preference``). The sources of a rollout:

- dataset rows and a *rubric* (``rubric_file_path``, ``rubric_name``) scoring each completion;
- ``entrypoint``: an environment built here, by ``factory`` (``gem:make``, say) or by calling
  the ``module:Class`` it names, with ``env_config``;
- ``env_url``: an OpenEnv server someone else hosts (a list is a set of replicas);
- ``env_image``: a container the reference runs as a Pod (its Ray/Arena runtime only).

The August form's kinds are read as their 2.58 counterparts: ``reasoning`` and ``multiturn``
are ``rollout``, ``sft`` and ``preference`` are ``dataset`` with that objective, ``env_name``
(a GEM game) is ``entrypoint`` with ``factory: gem:make``, and ``reward_file_path`` /
``reward_fn_name`` are the rubric's file and name.

Light: pydantic and agile_cli only. Nothing here opens a file or a connection.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator

from agile_cli import EnvironmentSpec, Spec, StarterValue
from agile_cli.helpers import located_error, reject_both_spellings

EnvType = Literal["rollout", "dataset"]
Objective = Literal["preference", "sft"]
#: The August form's kinds: kind -> (2.58's kind, its objective).
AUGUST_KINDS: dict[str, tuple[str, str | None]] = {
    "reasoning": ("rollout", None),
    "multiturn": ("rollout", None),
    "preference": ("dataset", "preference"),
    "sft": ("dataset", "sft"),
}
#: The factory an August ``env_name`` (a GEM game) is made by.
GEM_FACTORY = "gem:make"
#: Roles a prompt template's turn may have.
ROLES = ("system", "user", "assistant")
#: Endings of the local dataset files the ``llm`` environment reads.
DATA_FILES = (".parquet", ".pq", ".jsonl", ".json", ".csv")
_OTHER_FILES = (".txt", ".tsv", ".arrow", ".xlsx", ".xls", ".yaml", ".yml", ".pkl", ".zip", ".gz")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
_TURN_KEY = re.compile(r"^[a-z]+_\d+$")
_REFERENCE = re.compile(r"^[^:\s]+:[A-Za-z_][\w.]*$")
_DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_VARIABLE = r"^[A-Za-z_][A-Za-z0-9_]*$"
#: 2.58's defaults for a container source, filled in where the manifest leaves them out.
IMAGE_DEFAULTS = {
    "env_port": 8000,
    "cpus_per_env_host": 0.01,
    "env_sessions_per_host": 1,
    "env_host_ready_timeout_s": 600.0,
}


# --------------------------------------------------------------------------------------------
# the container source (the reference's Ray/Arena runtime)


class ContainerSpec(Spec):
    """One container of a backing service's Pod."""

    name: str = Field(pattern=_DNS_LABEL, max_length=40, description="Unique in its service.")
    image: str = Field(description="The container image.")
    command: list[str] | None = Field(default=None, description="Replaces the image's entry.")
    env: dict[str, str] = Field(default_factory=dict, description="Its environment, in order.")
    port: int | None = Field(
        default=None, ge=1, le=65535, description="The port it serves on (one container sets it)."
    )
    setup_command: list[str] | None = Field(default=None, description="Run once at its start.")
    readiness_command: list[str] | None = Field(default=None, description="Readiness probe.")
    readiness_path: str | None = Field(default=None, description="HTTP readiness path on port.")
    cpu: str = Field(default="10m", description="CPU request (a Kubernetes quantity).")
    memory: str | None = Field(default=None, description="Memory request.")
    memory_limit: str | None = Field(default=None, description="Memory limit.")
    ephemeral_storage: str | None = Field(default=None, description="Ephemeral-storage request.")
    memory_rootfs: str | None = Field(
        default=None, description="Memory volume the image is unpacked into (needs command)."
    )

    @model_validator(mode="after")
    def _one_probe(self) -> ContainerSpec:
        if self.readiness_command is not None and self.readiness_path is not None:
            raise located_error(
                "readiness_path",
                "a container has one readiness probe",
                "keep readiness_command or readiness_path",
            )
        if self.readiness_path is not None and self.port is None:
            raise located_error("port", "readiness_path probes the port, which is not set")
        if self.memory_rootfs is not None and self.command is None:
            raise located_error(
                "command", "memory_rootfs runs the image without its entry", "set command"
            )
        return self


class ServiceSpec(Spec):
    """A backing service the container sessions share: one Pod behind a stable name."""

    name: str = Field(pattern=_DNS_LABEL, max_length=30, description="Unique in the section.")
    port: int = Field(ge=1, le=65535, description="The port clients dial.")
    url_env: str = Field(pattern=_VARIABLE, description="Variable carrying the service's URL.")
    containers: list[ContainerSpec] = Field(min_length=1, description="The Pod's containers.")
    ready_timeout_s: float = Field(default=600.0, gt=0, description="Seconds to become ready.")

    @model_validator(mode="after")
    def _one_server(self) -> ServiceSpec:
        names = [container.name for container in self.containers]
        if len(set(names)) != len(names):
            raise located_error("containers", f"repeat a name: {names}")
        if len([c for c in self.containers if c.port is not None]) != 1:
            raise located_error("containers", "exactly one container must set port")
        return self


class _HostingFields(Spec):
    """Where the reference hosts an environment on its Ray/Arena runtime (agile trains an
    ``entrypoint`` in its own process and has no container runtime)."""

    env_image: str | None = Field(
        default=None,
        description="A prebuilt environment image, run as a Pod per host serving "
        "on env_port (the reference's Ray/Arena runtime only).",
    )
    env_port: int | None = Field(
        default=None, ge=1, le=65535, description="env_image's port (8000 with an image)."
    )
    env_hosts: int | None = Field(
        default=None,
        ge=1,
        description="Hosts serving the environment (the reference's Ray runtime).",
    )
    env_sessions_per_host: int | None = Field(
        default=None, ge=1, description="Sessions per env_image Pod (1 with an image)."
    )
    env_session_ports: dict[str, int] = Field(
        default_factory=dict, description="Variables set to base + session index per session."
    )
    cpus_per_env_host: float | None = Field(default=None, gt=0, description="CPUs per host.")
    env_host_memory_bytes: int | None = Field(default=None, gt=0, description="Memory per host.")
    env_host_memory_limit_bytes: int | None = Field(
        default=None, gt=0, description="Memory limit per env_image Pod."
    )
    env_host_ready_timeout_s: float | None = Field(
        default=None, gt=0, description="Seconds an env_image session may take to be ready."
    )
    env_services: list[ServiceSpec] = Field(
        default_factory=list, description="Backing services the env_image sessions share."
    )
    env_host_resource: str | None = Field(
        default=None, description="Where hosts land: a Ray resource or a node selector."
    )
    env_vars: dict[str, str] = Field(default_factory=dict, description="env_image's environment.")
    max_concurrent_resets: int | None = Field(
        default=None,
        ge=1,
        description="Resets one rollout engine runs at once (the reference's "
        "Ray runtime; agile resets its episodes one by one).",
    )
    adaptive_task_sampling: bool = Field(
        default=False,
        description="Draw tasks by how often their groups' rewards differed (the "
        "reference's Ray async rollouts only).",
    )
    task_family_field: str | None = Field(
        default=None,
        description="Field of env_config.tasks rows naming their family (with "
        "adaptive_task_sampling).",
    )
    task_family_prior_strength: float = Field(
        default=1.0, gt=0, description="Groups' worth of weight a family's rate carries."
    )


class _RemoteFields(Spec):
    """How an environment that is not a dataset talks to the model."""

    env_url: str | list[str] | None = Field(
        default=None,
        description="URL of a hosted OpenEnv server; a list is a set of "
        "interchangeable replicas dealt across episodes.",
    )
    request_timeout_s: float | None = Field(
        default=None,
        ge=0,
        description="Seconds one HTTP exchange with env_url may take; null: 300; 0: no bound.",
    )
    answer_tool: str | None = Field(
        default=None,
        description="For an environment of tools: the tool a turn's prose goes to "
        "when it calls none; null: such a turn is answered with retry feedback.",
    )
    action_field: str | None = Field(
        default=None,
        description="The action field the model's text is sent in (message for "
        "an environment; a tool's argument name).",
    )
    observation_field: str | None = Field(
        default=None,
        description="The observation field holding its text; null: the standard "
        "shapes, or the one text field it has.",
    )
    observation_processor: str | None = Field(
        default=None, description="'module:fn' rendering an observation to prompt text."
    )
    action_processor: str | None = Field(
        default=None, description="'module:fn' turning the model's text into the action sent."
    )
    screenshot_field: str | None = Field(
        default=None, description="Observation field of a page image."
    )
    goal_images_field: str | None = Field(
        default=None, description="Observation field of task images."
    )
    segment_prompt_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Restart an episode's context past this many prompt "
        "tokens (the reference's Ray/Arena runtime only).",
    )
    segment_max_images: int | None = Field(
        default=None, ge=1, description="Restart an episode's context past this many images."
    )
    restart_keep_turns: int = Field(
        default=0, ge=0, description="Turns a restarted context repeats."
    )
    restart_older_obs_field: str = Field(
        default="", description="Field shown for older kept turns."
    )
    restart_older_images: bool = Field(default=True, description="Older kept turns keep images.")
    action_error_field: str = Field(
        default="",
        description="Observation field of an action's error, listed in a restarted context.",
    )


class _SourceFields(EnvironmentSpec):
    """What the environment is: its kind, its data or its environment, and its prompts."""

    name: str = Field(
        default="llm",
        min_length=1,
        description="Label of the run; default: the source. Written alone, it is the dataset.",
    )
    env_type: EnvType | Literal["reasoning", "multiturn", "sft", "preference"] | None = Field(
        default=None,
        description="rollout (the model generates: GRPO, GSPO, CISPO, LLMPPO, LLMREINFORCE) or "
        "dataset (teacher-forced: SFT, DPO); null: the algorithm's. The August form's "
        "reasoning, multiturn, sft and preference are read as rollout or dataset.",
    )
    objective: Objective | None = Field(
        default=None, description="A dataset's loss: sft or preference; null: the algorithm's."
    )
    num_envs: int = Field(default=1, ge=1, description="Accepted for compatibility (1).")
    dataset: str | None = Field(
        default=None,
        description="A local .parquet, .pq, .jsonl, .json or .csv file, a folder of such files "
        "(read together, as datasets does), or a Hugging Face dataset id ('owner/name'); split "
        "into training and held-out parts by train_test_split.",
    )
    dataset_path: str | None = Field(default=None, description="Arena: an uploaded dataset.")
    hf_dataset_id: str | None = Field(default=None, description="A Hub id apart from dataset.")
    columns: dict[str, str] | None = Field(
        default=None, description="Renames of the dataset's columns: source name -> name used here."
    )
    prompt_template: dict[str, str] | None = Field(
        default=None,
        description="Chat turns in order, keyed role_N (system_0, user_1, assistant_2, ...); each "
        "value may hold {column} placeholders filled from the row. Required for a rollout over "
        "dataset rows.",
    )
    apply_chat_template: bool | None = Field(
        default=None,
        description="Render prompts through the tokenizer's chat template. null: yes for "
        "rollouts and with a prompt_template; no for sft and preference rows of a plain prompt "
        "column, which are read as written.",
    )
    chat_template_path: str | None = Field(
        default=None, description="A Jinja file whose template replaces the tokenizer's own."
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Variables the chat template is rendered with, e.g. {enable_thinking: false}.",
    )
    max_reward: float | None = Field(
        default=None, description="The reward of a solved task: the share reaching it is reported."
    )
    min_reward: float | None = Field(
        default=None,
        description="The lowest reward: a turn whose tool call is malformed or "
        "missing gets it without reaching the environment; null: 0.",
    )
    train_test_split: float = Field(
        default=0.9,
        description="Fraction of the rows used for training, strictly between 0 and 1; the rest "
        "is the held-out split members are scored on.",
    )
    rubric_file_path: str | None = Field(
        default=None,
        validation_alias=AliasChoices("rubric_file_path", "reward_file_path"),
        description="Python file holding the rubric of a rollout over dataset rows (also "
        "spelled reward_file_path).",
    )
    rubric_name: str | None = Field(
        default=None,
        min_length=1,
        validation_alias=AliasChoices("rubric_name", "reward_fn_name"),
        description="The rubric in rubric_file_path: a function (completion, answer, question) "
        "-> float, or a class or object with forward(action, observation); reward_fn with a "
        "dataset (also spelled reward_fn_name).",
    )
    response_column: str = Field(
        default="response", min_length=1, description="SFT: the column holding the response."
    )
    reward_timeout: float = Field(
        default=30.0,
        gt=0,
        le=86_400,
        description="Seconds one call of the rubric may take; a longer call stops the run, "
        "naming it and the completion it was scoring (an agile addition).",
    )
    entrypoint: str | None = Field(
        default=None,
        description="The environment to build: with factory, the id it is given (e.g. "
        "game:GuessTheNumber-v0-easy); else 'module:Class' or 'file.py:function' called with "
        "env_config.",
    )
    env_name: str | None = Field(
        default=None,
        description="The August form: a GEM game, read as entrypoint with factory: gem:make.",
    )
    factory: str | None = Field(
        default=None,
        description="'module:callable' given entrypoint and env_config, e.g. gem:make.",
    )
    env_config: dict[str, Any] | None = Field(
        default=None, description="Keyword arguments of the factory or constructor."
    )
    env_packages: dict[str, Any] | None = Field(
        default=None,
        description="What the entrypoint needs installed: {pip: [...]} or "
        "{uv: [...]}; agile names them when the entrypoint cannot be imported.",
    )
    max_turns: int | None = Field(
        default=None,
        ge=1,
        description="Turns per episode at most (1 over dataset rows; required with env_url).",
    )
    strict_chat_template_boundary: bool = Field(
        default=True,
        description="Fail (true) or warn (false) when the chat template cannot mark where a "
        "turn ends.",
    )


class LLMEnvSpec(_HostingFields, _RemoteFields, _SourceFields):
    """The ``llm`` environment: a dataset, or an environment the model acts in.

    ``name`` is the run's label; written alone it also names the dataset (the August form
    spells the dataset ``name``).
    """

    starter_values: ClassVar[Mapping[str, StarterValue]] = {
        "name": StarterValue("llm"),
        "dataset": StarterValue(
            "data/train.jsonl", "your .jsonl/.parquet/.csv file or a Hub id", placeholder=True
        ),
    }

    @model_validator(mode="before")
    @classmethod
    def _both_forms(cls, data: Any) -> Any:
        """The August spellings read as 2.58's; then what 2.58 fills in from the kind."""
        if not isinstance(data, Mapping):
            return data
        for spellings in (
            ("rubric_file_path", "reward_file_path"),
            ("rubric_name", "reward_fn_name"),
        ):
            reject_both_spellings(data, spellings)
        data = _august_kind(_gem_game(dict(data)))
        data = _name_and_dataset(data)
        return _conditional_defaults(data)

    # -- what the section says --------------------------------------------------------------

    @property
    def source(self) -> str | None:
        """A rollout's source: ``dataset``, ``entrypoint``, ``env_url`` or ``env_image``."""
        for name in ("entrypoint", "env_url", "env_image"):
            if getattr(self, name) is not None:
                return name
        return "dataset" if self.named_dataset is not None else None

    @property
    def named_dataset(self) -> str | None:
        """The dataset, however it is named."""
        return self.dataset or self.dataset_path or self.hf_dataset_id

    @property
    def regime(self) -> str | None:
        """How agile trains it: ``reasoning`` (a rollout over dataset rows), ``multiturn`` (a
        rollout of an environment), ``sft`` or ``preference``; None until the kind is known."""
        if self.env_type == "dataset":
            return self.objective
        if self.source in ("entrypoint", "env_url", "env_image"):
            return "multiturn"
        return "reasoning" if self.env_type == "rollout" else None

    # -- field shapes -----------------------------------------------------------------------

    @field_validator("dataset")
    @classmethod
    def _dataset_shape(cls, value: str | None) -> str | None:
        if value is None or value.lower().endswith(DATA_FILES):
            return value
        wanted = (
            "a local .parquet, .pq, .jsonl, .json or .csv file, a folder of them, or a Hugging "
            "Face dataset id like 'owner/name'"
        )
        folder = value.startswith(("/", "./", "../", "~")) or value.count("/") > 1
        if value.lower().endswith(_OTHER_FILES) or not (folder or _HUB_ID.match(value)):
            raise ValueError(f"{value!r} is not {wanted}")
        return value

    @field_validator("prompt_template")
    @classmethod
    def _turns(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return value
        if not value:
            raise ValueError("has no turns; write at least one, e.g. user_0: '{question}'")
        for key, text in value.items():
            _check_turn(key, text)
        return value

    @field_validator("train_test_split")
    @classmethod
    def _both_parts(cls, value: float) -> float:
        if not 0 < value < 1:
            raise ValueError(
                f"{value} must be strictly between 0 and 1: training needs a train part and "
                "scoring a held-out part"
            )
        return value

    @field_validator("factory", "observation_processor", "action_processor")
    @classmethod
    def _callable_reference(cls, value: str | None) -> str | None:
        if value is not None and not _REFERENCE.match(value):
            raise ValueError(f"{value!r} must look like 'module:callable' or 'file.py:callable'")
        return value

    @field_validator("env_url")
    @classmethod
    def _urls(cls, value: str | list[str] | None) -> str | list[str] | None:
        urls = [value] if isinstance(value, str) else value or []
        if isinstance(value, list) and not value:
            raise ValueError("is an empty list; give at least one server's URL")
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r} is not an http:// or https:// URL")
        return value

    @field_validator("env_packages")
    @classmethod
    def _packages(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            _check_packages(value)
        return value

    # -- rules across fields ----------------------------------------------------------------

    @model_validator(mode="after")
    def _rules(self) -> LLMEnvSpec:
        for rule in _RULES:
            rule(self)
        return self


def _august_kind(data: dict[str, Any]) -> dict[str, Any]:
    """``reasoning`` / ``multiturn`` as ``rollout``, ``sft`` / ``preference`` as a dataset."""
    written = data.get("env_type")
    if written not in AUGUST_KINDS:
        return data
    kind, objective = AUGUST_KINDS[written]
    if objective is not None and data.get("objective") not in (None, objective):
        raise located_error(
            "objective",
            f"{data['objective']} contradicts env_type: {written}",
            "remove objective, or write env_type: dataset",
        )
    data["env_type"] = kind
    if objective is not None:
        data["objective"] = objective
    return data


def _gem_game(data: dict[str, Any]) -> dict[str, Any]:
    """The August ``env_name`` (a GEM game) as ``entrypoint`` made by ``gem:make``."""
    game = data.pop("env_name", None)
    if game is None:
        return data
    if data.get("entrypoint") is not None:
        raise located_error(
            "env_name",
            "an environment takes one of env_name and entrypoint, not both",
            "name a GEM game (env_name) or your own factory (entrypoint)",
        )
    if data.get("factory") not in (None, GEM_FACTORY):
        raise located_error(
            "factory",
            f"{data['factory']} with env_name, a GEM game",
            "write entrypoint: GAME and factory: gem:make",
        )
    return {**data, "entrypoint": game, "factory": GEM_FACTORY}


def _name_and_dataset(data: dict[str, Any]) -> dict[str, Any]:
    """``name`` alone is the dataset too (the August form); a source alone labels the run."""
    sources = ("dataset", "dataset_path", "hf_dataset_id", "entrypoint", "env_url", "env_image")
    if isinstance(data.get("name"), str) and all(data.get(key) is None for key in sources):
        data["dataset"] = data["name"]
    if "name" not in data:
        for key in sources:
            label = data.get(key)
            if isinstance(label, list) and label:
                label = label[0]
            if isinstance(label, str) and label:
                data["name"] = label
                break
    return data


def _conditional_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """What 2.58 fills in once the kind and the source are known."""
    named = any(data.get(key) is not None for key in ("dataset", "dataset_path", "hf_dataset_id"))
    hosted = any(data.get(key) is not None for key in ("entrypoint", "env_url", "env_image"))
    if data.get("env_type") == "rollout":
        if named and not hosted:
            data.setdefault("max_turns", 1)
            if data.get("rubric_name", data.get("reward_fn_name")) is None:
                data.pop("reward_fn_name", None)
                data["rubric_name"] = "reward_fn"
        if hosted and data.get("action_field") is None:
            data["action_field"] = "message"
    if data.get("env_image") is not None:
        for key, value in IMAGE_DEFAULTS.items():
            if data.get(key) is None:
                data[key] = value
    return data


def _check_turn(key: str, text: str) -> None:
    role = key.split("_", 1)[0]
    if not _TURN_KEY.match(key) or role not in ROLES:
        raise located_error(
            key,
            f"turn key {key!r} is not role_N with a role of {', '.join(ROLES)}",
            "name turns like system_0, user_1, assistant_2",
        )
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(text) if name]
    except ValueError as exc:
        raise located_error(
            key, f"is not a template: {exc}", "write {column} placeholders; {{ for a brace"
        ) from None
    for name in fields:
        if not name.isidentifier():
            raise located_error(
                key,
                f"placeholder {{{name}}} is not a column name",
                "write {column}; double a literal brace as {{ or }}",
            )


def listed_packages(value: Mapping[str, Any]) -> list[Any]:
    """The packages ``env_packages`` names, under ``uv`` and ``pip`` (a list, or
    ``{packages: [...]}``).

    :raises ValueError: one of them is neither.
    """
    packages: list[Any] = []
    for tool in ("uv", "pip"):
        listed = value.get(tool)
        if isinstance(listed, dict):
            listed = listed.get("packages") or []
        if listed is not None and not isinstance(listed, list):
            raise ValueError(f"{tool} must be a list of packages or {{packages: [...]}}")
        packages += listed or []
    return packages


def _check_packages(value: dict[str, Any]) -> None:
    if not listed_packages(value) or set(value) - {"uv", "pip"}:
        raise ValueError("must name packages to install under pip or uv, e.g. {pip: [gem-llm]}")


# -- the rules, each raising the first problem it finds --------------------------------------


def _one_source(env: LLMEnvSpec) -> None:
    """A rollout has exactly one source; a dataset is teacher-forced over rows alone."""
    if env.env_type is None:
        return
    hosted = [key for key in ("entrypoint", "env_url", "env_image") if getattr(env, key)]
    given = (["dataset"] if env.named_dataset else []) + hosted
    if env.env_type == "dataset":
        if hosted:
            raise located_error(
                hosted[0],
                "a dataset environment is teacher-forced over its rows; it runs no environment",
                f"remove {hosted[0]}",
            )
        if not given:
            raise located_error(
                "dataset",
                "a dataset environment needs its dataset",
                "name a local .jsonl/.parquet/.csv file or a Hub id",
            )
        return
    if len(given) != 1:
        which = ", ".join(given) or "none"
        raise located_error(
            hosted[-1] if len(given) > 1 else "dataset",
            f"a rollout takes exactly one source, got {which}",
            "keep one of: dataset rows with a rubric, entrypoint (an environment built here), "
            "env_url (a hosted OpenEnv server), env_image (a container)",
        )


def _dataset_rollout(env: LLMEnvSpec) -> None:
    """What a rollout over dataset rows cannot take."""
    if env.source != "dataset" or env.env_type != "rollout":
        return
    if env.max_turns not in (None, 1):
        raise located_error(
            "max_turns",
            f"{env.max_turns}: a rollout over dataset rows is one turn",
            "remove it or write 1",
        )
    wrong = [
        key
        for key in (
            "env_config",
            "answer_tool",
            "request_timeout_s",
            "observation_field",
            "observation_processor",
            "action_processor",
        )
        if getattr(env, key) is not None
    ]
    wrong += [key for key in ("screenshot_field", "goal_images_field") if getattr(env, key)]
    if env.action_field not in (None, "message"):
        wrong.append("action_field")
    if wrong:
        raise located_error(
            wrong[0],
            "configures an environment the model acts in; a rollout over dataset rows has none",
            f"remove {wrong[0]}",
        )


def _rubric_place(env: LLMEnvSpec) -> None:
    """A rubric scores dataset rows only: an environment rewards its own turns."""
    if env.rubric_file_path is None:
        return
    if env.env_type == "dataset":
        raise located_error(
            "rubric_file_path",
            "a dataset environment learns from its rows, not from rewards",
            "remove rubric_file_path",
        )
    if env.source not in (None, "dataset"):
        raise located_error(
            "rubric_file_path",
            f"with {env.source}: an environment rewards its own turns",
            "remove rubric_file_path (and rubric_name)",
        )


#: Fields that only a source of some kind reads: (broken, field, what is wrong, how to fix it).
_FIELD_RULES: tuple[tuple[Callable[[LLMEnvSpec], bool], str, str, str], ...] = (
    (lambda env: env.env_config is not None and "env_id" in env.env_config, "env_config.env_id",
     "the environment's id is entrypoint's", "write it as entrypoint, and its maker as factory"),
    (lambda env: env.factory is not None and env.entrypoint is None, "factory",
     "is the callable; entrypoint, the environment it makes, is missing",
     "write entrypoint: too"),
    (lambda env: env.env_packages is not None and env.entrypoint is None, "env_packages",
     "installs what an entrypoint needs; there is none", "remove env_packages"),
    (lambda env: env.env_hosts is not None and env.source not in ("entrypoint", "env_image"),
     "env_hosts", "serves an environment built here (entrypoint or env_image)",
     "remove env_hosts"),
    (lambda env: env.observation_field is not None and env.observation_processor is not None,
     "observation_processor", "replaces the reading of observation_field: give one of them",
     "remove one"),
    (lambda env: env.env_url is not None and env.max_turns is None, "max_turns",
     "is required with env_url: a remote environment's turn budget cannot be probed",
     "write max_turns (1 for one turn)"),
    (lambda env: env.task_family_field is not None and not env.adaptive_task_sampling,
     "task_family_field", "weighs rows under adaptive_task_sampling",
     "set adaptive_task_sampling: true or remove it"),
)  # fmt: skip


def _environment_fields(env: LLMEnvSpec) -> None:
    """Fields that only a source of some kind reads (:data:`_FIELD_RULES`)."""
    for broken, field, message, hint in _FIELD_RULES:
        if broken(env):
            raise located_error(field, message, hint)


def _image_fields(env: LLMEnvSpec) -> None:
    """Pod settings need an image; sessions sharing a Pod need their own ports."""
    pod = (
        "env_vars",
        "env_sessions_per_host",
        "env_session_ports",
        "env_host_memory_limit_bytes",
        "env_host_ready_timeout_s",
        "env_services",
    )
    if env.env_image is None:
        written = [key for key in pod if getattr(env, key)]
        if written:
            raise located_error(
                written[0],
                "configures env_image Pods; there is no env_image",
                f"remove {written[0]}, or give env_image",
            )
        return
    if (env.env_sessions_per_host or 1) > 1 and not env.env_session_ports:
        raise located_error(
            "env_session_ports",
            "sessions sharing a Pod each need their own port",
            "e.g. env_session_ports: {PORT: 8000}",
        )
    names = [s.url_env for s in env.env_services] + [*env.env_vars, *env.env_session_ports]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated or len({s.name for s in env.env_services}) != len(env.env_services):
        raise located_error("env_services", f"names set more than once: {repeated or 'a service'}")


def _context_restarts(env: LLMEnvSpec) -> None:
    """Kept turns need a restart limit and room for the next turn's image."""
    keep = env.restart_keep_turns
    if (env.restart_older_obs_field or not env.restart_older_images) and keep < 2:
        raise located_error("restart_keep_turns", "settings for older kept turns need at least 2")
    if not keep:
        return
    if env.segment_prompt_tokens is None and env.segment_max_images is None:
        raise located_error(
            "restart_keep_turns",
            "applies at a context restart",
            "set segment_prompt_tokens or segment_max_images",
        )
    if env.segment_max_images is not None and keep >= env.segment_max_images:
        raise located_error(
            "restart_keep_turns",
            f"{keep} must be below segment_max_images ({env.segment_max_images})",
        )


_RULES: tuple[Callable[[LLMEnvSpec], None], ...] = (
    _one_source,
    _dataset_rollout,
    _rubric_place,
    _environment_fields,
    _image_fields,
    _context_restarts,
)
