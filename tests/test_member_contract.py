"""The Member contract: what the core uses of a population member. The RL base's members and
the LLM members both satisfy it, the LLM member without subclassing the RL base, and an
algorithm class lacking part of it is refused by name."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from agile_cli import Member, TrainingError
from agile_cli.evolution.mutation import Mutator
from agile_cli.helpers import installed_registry
from agile_cli.member import missing_methods
from agile_cli.models.mutation import MutationSpec
from agile_cli.testing import tiny_manifest, tiny_population
from agile_cli.training import setup
from agile_rl import Algorithm

#: The contract's methods and the attributes its members' constructors set.
METHODS = sorted(
    name for name, value in vars(Member).items() if callable(value) and not name.startswith("_")
)
ATTRIBUTES = ("spec", "index", "record", "context")

LLM_CLASSES = ("SFT", "DPO", "GRPO", "GSPO", "CISPO", "LLMREINFORCE", "LLMPPO")


def test_the_contract_names_what_the_core_uses() -> None:
    expected = [
        "act", "clone", "describe_network", "export_policy", "hyperparameters",
        "load_state_dict", "reset_state", "save_portable", "set_hyperparameter", "state_dict",
    ]  # fmt: skip
    assert sorted(expected) == METHODS
    assert set(ATTRIBUTES) == set(Member.__annotations__)
    for name in METHODS:
        assert inspect.getdoc(getattr(Member, name)), f"Member.{name} has no docstring"


def assert_is_member(member: Any) -> None:
    """``member`` has every attribute of the contract and every method, callable."""
    assert isinstance(member, Member)
    for name in ATTRIBUTES:
        assert hasattr(member, name), name
    for name in METHODS:
        assert callable(getattr(member, name)), name
    assert isinstance(member.hyperparameters(), dict)
    assert isinstance(member.describe_network(), str)
    assert member.state_dict()["index"] == member.index


@pytest.mark.parametrize("algorithm", ["DQN", "PPO"])
def test_rl_members_satisfy_the_contract(algorithm: str) -> None:
    member = tiny_population(tiny_manifest(algorithm), size=1)[0]
    assert isinstance(member, Algorithm)
    assert_is_member(member)
    assert_is_member(member.clone(5))


@pytest.mark.parametrize("algorithm", LLM_CLASSES)
def test_llm_classes_implement_the_contract_without_the_rl_base(algorithm: str) -> None:
    pytest.importorskip("peft")
    cls = installed_registry().algorithms[algorithm].load()
    assert not issubclass(cls, Algorithm)
    assert missing_methods(cls) == []


def test_an_llm_member_satisfies_the_contract(tiny: Path, data: Path) -> None:
    pytest.importorskip("peft")
    import torch

    from agile_cli import AgentContext, TrainingManifest

    from .test_llm_training import manifest

    registry = installed_registry()
    parsed = TrainingManifest.get_validated(manifest("SFT", tiny, data), registry=registry)
    env = setup.build_environment(parsed, registry, seed=0)
    context = AgentContext(torch.device("cpu"), 1, parsed.training)
    member = setup.build_population(parsed, setup.algorithm_class(parsed, registry), env,
                                    context, size=1)[0]  # fmt: skip
    assert not isinstance(member, Algorithm)
    assert_is_member(member)
    assert_is_member(member.clone(3))


class Partial:
    """A member class with everything but ``clone`` and ``state_dict``."""

    def __init__(self) -> None:
        self.spec, self.index, self.record, self.context = None, 0, None, None

    def hyperparameters(self) -> dict[str, float | int]:
        return {}

    def set_hyperparameter(self, name: str, value: float | int) -> None:
        pass

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def describe_network(self) -> str:
        return "none"

    def act(self, obs: Any, *, explore: bool) -> Any:
        return obs

    def reset_state(self, envs: Any = None) -> None:
        pass

    def export_policy(self) -> None:
        return None

    def save_portable(self, directory: Path) -> bool:
        return False


class Whole(Partial):
    """A member class implementing the whole contract, with no RL base."""

    def clone(self, index: int) -> Whole:
        return Whole()

    def state_dict(self) -> dict[str, Any]:
        return {"index": self.index}


def _loaded(cls: Any) -> tuple[Any, Any]:
    """A manifest and registry whose algorithm's implementation is ``cls``."""
    entry = SimpleNamespace(load=lambda: cls, implementation=f"my_plugin:{cls.__name__}")
    return SimpleNamespace(algorithm_name="Mine"), SimpleNamespace(algorithms={"Mine": entry})


def test_a_class_lacking_part_of_the_contract_is_refused_by_name() -> None:
    with pytest.raises(TrainingError) as refused:
        setup.algorithm_class(*_loaded(Partial))
    assert refused.value.message == (
        "my_plugin:Partial lacks clone, state_dict of the agile_cli.Member contract"
    )
    with pytest.raises(TrainingError) as refused:
        setup.algorithm_class(*_loaded(len))
    assert refused.value.message == "my_plugin:len is not a class of members"


def test_a_class_with_the_whole_contract_is_accepted() -> None:
    assert setup.algorithm_class(*_loaded(Whole)) is Whole
    assert isinstance(Whole(), Member)
    assert not isinstance(Partial(), Member)


def test_network_mutations_do_not_apply_to_other_members() -> None:
    manifest = tiny_manifest("DQN")
    mutator = Mutator(MutationSpec(), manifest.algorithm, np.random.default_rng(0))
    member = Whole()
    assert mutator.apply(member, "none") == "none"
    for kind in ("architecture", "parameters", "activation"):
        assert mutator.apply(member, kind) == f"none ({kind} mutation does not apply)"
