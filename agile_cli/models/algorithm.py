"""Base classes of algorithm and environment specs, which plugins subclass."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import (
    AliasChoices,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from agile_cli.errors import FieldError
from agile_cli.models import limits
from agile_cli.models.base import Spec, StarterValue, located_error, reject_both_spellings
from agile_cli.models.training import TrainingSpec

#: Every kind of mutation the core's mutator knows.
MUTATION_KINDS = ("architecture", "parameters", "activation", "rl_hp")


class AlgorithmSpec(Spec):
    """Base of every algorithm's spec.

    Subclasses add their hyperparameters as fields (each with a ``description``) and declare:

    - ``mutable_hyperparameters``: the numeric fields ``mutation.rl_hp_selection`` may name;
    - ``default_mutable``: the ones mutated when ``rl_hp_selection`` is empty;
    - ``default_evo_steps``: evolution interval when ``training.evo_steps`` is omitted;
    - ``network_spec`` / ``replay_buffer_spec``: the class the ``network`` / ``replay_buffer``
      section is validated against in place of the one the algorithm's paradigm declared (a
      subclass of it, e.g. with other defaults: RainbowDQN's replay buffer turns prioritised
      replay and n-step returns on); None: the paradigm's;
    - ``training_spec``: a :class:`~agile_cli.TrainingSpec` subclass with ``training`` fields
      this algorithm reads (e.g. epsilon-greedy exploration's ``eps_*``); None: none of its own;
    - ``mutation_kinds``: the mutations its members can undergo (of ``architecture``,
      ``parameters``, ``activation``, ``rl_hp``). A manifest that gives another kind a weight is
      refused; the defaults of the others count as 0.
    """

    batch_size: int = Field(
        default=64,
        ge=1,
        le=limits.BATCH,
        description=f"Transitions (or samples) per gradient step. At most {limits.BATCH:,}.",
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = ("batch_size",)
    default_mutable: ClassVar[tuple[str, ...]] = ()
    default_evo_steps: ClassVar[int] = 10_000
    #: Why ``agile validate --reference`` cannot write this algorithm's manifests in agilerl
    #: 2.58's form (e.g. 2.58 has no such algorithm); None: it can, by the same name.
    reference_gap: ClassVar[str | None] = None
    network_spec: ClassVar[type[Spec] | None] = None
    replay_buffer_spec: ClassVar[type[Spec] | None] = None
    training_spec: ClassVar[type[TrainingSpec] | None] = None
    mutation_kinds: ClassVar[frozenset[str]] = frozenset(MUTATION_KINDS)
    #: The environment ``agile init ALGORITHM`` writes when none is given; None: the
    #: paradigm's usual one (CartPole-v1 for single-agent Gymnasium algorithms).
    starter_environment: ClassVar[str | None] = None
    #: What the reference fills into an environment section that names no other kind (an
    #: LLM algorithm's ``env_type``, say), before the section is validated; none by default.
    environment_tags: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def starter_sections(cls) -> dict[str, dict[str, StarterValue]]:
        """What ``agile init`` writes for this algorithm in other sections instead of their
        defaults, ``section -> field -> value`` (the reward function a reasoning algorithm
        needs under ``environment``, say), over what those sections' specs give in their
        ``starter_values``. None by default."""
        return {}

    def check_manifest(self, manifest: Any) -> list[FieldError]:
        """Rules that involve other sections; paths are relative to the manifest root.

        :param manifest: the resolved :class:`~agile_cli.TrainingManifest` (typed loosely
            here: the manifest is assembled from these specs, not the other way round).
        """
        return []

    def local_training_errors(self, manifest: Any) -> list[FieldError]:
        """What keeps this machine from training a valid manifest in this process (a feature
        agile does not run locally, a package or GPU it lacks), each with how to train without
        it. ``agile train`` on this machine and ``agile validate --check-env`` refuse before
        loading anything; a backend that trains elsewhere (Arena) does not ask. None by
        default."""
        return []

    def step_unit(self, manifest: Any) -> str | None:
        """What ``training.max_steps`` counts for this manifest when it is not the paradigm's
        unit (an LLM trained on multi-turn episodes rather than prompts, say); None: the
        paradigm's."""
        return None

    def resolve_section(self, name: str, section: Spec) -> Spec:
        """The section ``name`` (``network``, ``replay_buffer``, ``mutation``) with what
        follows from this algorithm filled in where the manifest leaves it out
        (``section.model_fields_set`` says what was written); unchanged by default."""
        return section

    def manifest_warnings(self, manifest: Any) -> list[str]:
        """What is valid but probably not what the author meant (``agile validate`` and
        ``agile train`` show it), e.g. a field accepted for compatibility and ignored."""
        return []

    def not_available_errors(self, field: str, feature: str) -> list[FieldError]:
        """An error when a field accepted for compatibility is set to anything but null."""
        if getattr(self, field) is None:
            return []
        message = f"{feature} is not available yet"
        return [FieldError(f"algorithm.{field}", message, "remove it or set it to null")]

    def num_envs_copy_errors(self, field: str, manifest: Any) -> list[FieldError]:
        """Errors for a field that only repeats ``environment.num_envs`` (kept for
        compatibility) when it is given and disagrees."""
        value = getattr(self, field)
        num_envs = getattr(manifest.environment, "num_envs", None)
        if value is None or value == num_envs:
            return []
        return [
            FieldError(
                f"algorithm.{field}",
                f"{value} disagrees with environment.num_envs ({num_envs})",
                f"remove it; {manifest.algorithm_name} uses environment.num_envs",
            )
        ]


class EnvironmentSpec(Spec):
    """Base of every environment builder's spec.

    ``version`` picks a version of an environment registered on Arena (the reference format
    has it); every builder accepts it, Arena receives it, local training ignores it. Left out,
    it is left out of resolved manifests too.

    ``env_type`` is the reference's name for the kind of environment (agilerl 2.58 writes it
    out); a subclass names its kind in ``reference_env_type`` (``gym``, ``offline``,
    ``bandit``), which a manifest may repeat and resolved manifests carry. A subclass whose
    kind the field itself chooses (the LLM environments) redefines the field.
    """

    reference_env_type: ClassVar[str | None] = None

    name: str = Field(description="Environment id or label.")
    env_type: str | None = Field(
        default=None,
        description="The reference's kind of environment (gym, offline, bandit), accepted for "
        "compatibility: agile knows it from the algorithm and checks one that is written.",
    )
    version: str | None = Field(
        default=None,
        min_length=1,
        description="Arena only: the version of the registered Arena environment (e.g. v1 or "
        "3; default: the latest). Local training ignores it.",
    )

    @model_validator(mode="before")
    @classmethod
    def _reference_spellings(cls, data: Any) -> Any:
        """The kind filled in where it is left out, and a version written as a number read as
        the text Arena takes."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if cls.reference_env_type is not None and data.get("env_type") is None:
            data["env_type"] = cls.reference_env_type
        version = data.get("version")
        if isinstance(version, int) and not isinstance(version, bool):
            data["version"] = str(version)
        return data

    @field_validator("env_type")
    @classmethod
    def _kind(cls, value: str | None) -> str | None:
        kind = cls.reference_env_type
        if kind is not None and value != kind:
            raise ValueError(
                f"is {value!r}, but this algorithm trains on {kind!r} environments; remove it "
                f"or write env_type: {kind}"
            )
        return value

    @model_serializer(mode="wrap")
    def _without_unset_version(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for key in ("version", "env_type"):
                if key in data and data[key] is None:
                    del data[key]
        return data

    def manifest_warnings(self) -> list[str]:
        """What is valid but probably not what the author meant (shown with the manifest's)."""
        if self.version is None:
            return []
        return [
            f"environment.version: only Arena reads it ({self.version} of the environment "
            "registered there); local training builds the environment as installed"
        ]


_REFERENCE = re.compile(r"^[^:\s]+:[A-Za-z_][\w.]*$")
_DOTTED = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+$")


def check_entrypoint(value: str | None) -> str | None:
    """Validator of an ``entrypoint`` field: ``module:Callable`` or ``file.py:Callable``."""
    if value is not None and not _REFERENCE.match(value):
        raise ValueError("entrypoint must look like 'module:Callable' or 'file.py:Callable'")
    return value


def check_wrappers(value: list[Any]) -> list[Any]:
    """Validator of a ``wrappers`` list: each ``module:Wrapper``, ``package.module.Wrapper``
    or ``[wrapper, {kwargs}]``."""
    for item in value:
        target = item[0] if isinstance(item, tuple) else item
        if not (_REFERENCE.match(target) or _DOTTED.match(target)):
            raise ValueError(
                f"wrapper {target!r} must look like 'module:Wrapper' or 'package.module.Wrapper'"
            )
    return value


class VectorEnvironmentSpec(EnvironmentSpec):
    """Fields shared by builders of vectorised environments (Gymnasium, PettingZoo): the copies,
    your own callable, its keyword arguments, wrappers, and where the copies run. Subclasses
    describe ``name``.

    The reference's 2.58 spellings are read with the same meaning: ``env_config`` and
    ``env_wrappers`` for ``config`` and ``wrappers``; ``factory`` (``module:callable``) called
    with the environment's id (``entrypoint``, else ``name``) and the config;
    ``entrypoint`` as a registered id (the ``name`` again, or any id with ``custom: true``);
    ``custom`` and ``default_type``. A factory in ``registered_makers`` (``gymnasium:make``
    for Gymnasium) on the named id is the same as no factory, and is resolved so.
    """

    reference_env_type: ClassVar[str | None] = "gym"
    #: Factories that make the registered id ``name`` as the builder does without one.
    registered_makers: ClassVar[tuple[str, ...]] = ()

    num_envs: int = Field(
        default=16,
        ge=1,
        le=limits.ENVIRONMENTS,
        description=f"Environments stepped side by side. At most {limits.ENVIRONMENTS:,}.",
    )
    entrypoint: str | None = Field(
        default=None,
        description="'module:Callable' or 'file.py:Callable' that makes one environment; with "
        "factory, the id the factory is given.",
    )
    factory: str | None = Field(
        default=None,
        description="'module:callable' called with the environment's id (entrypoint, else name) "
        "and config, e.g. gymnasium:make.",
    )
    custom: bool = Field(
        default=False,
        description="Accepted for compatibility: the environment is your own rather than "
        "registered (an entrypoint may then be an id other than name).",
    )
    default_type: str = Field(
        default="float32",
        description="The reference's dtype for observations, accepted for compatibility: agile "
        "keeps them as float32.",
    )
    path: str | None = Field(
        default=None, description="Directory that entrypoint and wrapper modules are resolved from."
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("config", "env_config"),
        description="Keyword arguments for the entrypoint, or for the named environment's maker.",
    )
    wrappers: list[str | tuple[str, dict[str, Any]]] = Field(
        default_factory=list,
        validation_alias=AliasChoices("wrappers", "env_wrappers"),
        description=(
            "Wrappers applied in order: 'module:Wrapper', 'package.module.Wrapper', or "
            "[wrapper, {kwargs}]."
        ),
    )
    sync: bool = Field(
        default=False, description="Step the environments in this process instead of subprocesses."
    )

    _factory_shape = field_validator("factory")(check_entrypoint)
    _wrapper_shape = field_validator("wrappers")(check_wrappers)

    @model_validator(mode="before")
    @classmethod
    def _reference_form(cls, data: Any) -> Any:
        """``config``/``env_config`` and ``wrappers``/``env_wrappers`` given once each; an
        empty config or wrapper list written as null (the reference writes that) read as none;
        an entrypoint repeating the name, or the registered maker on it, read as the name."""
        reject_both_spellings(data, ("config", "env_config"))
        reject_both_spellings(data, ("wrappers", "env_wrappers"))
        if not isinstance(data, dict):
            return data
        data = {key: _EMPTY[key]() if value is None and key in _EMPTY else value
                for key, value in data.items()}  # fmt: skip
        name, entrypoint, factory = data.get("name"), data.get("entrypoint"), data.get("factory")
        an_id = isinstance(entrypoint, str) and ":" not in entrypoint
        if entrypoint == name and (an_id or factory is not None):
            if factory is None or factory in cls.registered_makers:
                data.pop("entrypoint")
                data.pop("factory", None)
        elif entrypoint is None and factory in cls.registered_makers:
            data.pop("factory")
        return data

    @model_validator(mode="after")
    def _entrypoint_meaning(self) -> VectorEnvironmentSpec:
        """An entrypoint is a callable's reference, or (with a factory) the id it makes, which
        is the name unless the environment is ``custom``."""
        entrypoint, factory = self.entrypoint, self.factory
        if entrypoint is None:
            return self
        if factory is None and not _REFERENCE.match(entrypoint):
            raise located_error(
                "entrypoint",
                "must look like 'module:Callable' or 'file.py:Callable', or name the id a "
                "factory makes",
                "give factory: too (e.g. factory: gymnasium:make), or drop entrypoint",
            )
        if factory is not None and entrypoint != self.name and not self.custom:
            raise located_error(
                "entrypoint",
                f"{entrypoint!r} differs from name {self.name!r}",
                "give the same id in both, drop entrypoint, or set custom: true",
            )
        return self

    def manifest_warnings(self) -> list[str]:
        warnings = super().manifest_warnings()
        if self.default_type != "float32":
            warnings.append(
                f"environment.default_type: agile keeps observations as float32, not "
                f"{self.default_type}"
            )
        return warnings


#: Keys whose null the reference writes for "none", and what makes that none.
_EMPTY: dict[str, type] = {
    "config": dict, "env_config": dict, "wrappers": list, "env_wrappers": list,
}  # fmt: skip
