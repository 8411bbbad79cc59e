"""The conformance check catches state that a checkpoint loses.

The variants below are DQN with a learned temperature (as in Soft Actor-Critic's ``log_alpha``)
that learning changes; the broken ones leave it out of ``extra_state()``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from agile_cli import hookimpl
from agile_cli.testing import check_conformance
from agile_dqn.algorithm import DQN
from agile_dqn.spec import DQNSpec
from agile_rl import LearnResult


class LeakyTensorDQN(DQN):
    """Learns a temperature tensor, and forgets to checkpoint it."""

    def build(self) -> None:
        super().build()
        self.log_alpha = torch.zeros(1)

    def learn(self, batch: Any) -> LearnResult:
        self.log_alpha = self.log_alpha - 0.01 * batch.rewards.mean()
        return super().learn(batch)


class LeakyFloatDQN(DQN):
    """Learns a float temperature, and forgets to checkpoint it."""

    def build(self) -> None:
        super().build()
        self.alpha = 0.2

    def learn(self, batch: Any) -> LearnResult:
        self.alpha *= 0.99
        return super().learn(batch)


class TemperatureDQN(LeakyTensorDQN):
    """Checkpoints its temperature: conforms."""

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "log_alpha": self.log_alpha.clone()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        self.log_alpha = state["log_alpha"].clone()


class AlphaDQN(DQN):
    """A temperature with its own optimizer, checkpointed as docs/plugins.md shows: conforms."""

    def build(self) -> None:
        super().build()
        self.log_alpha = torch.zeros(1, device=self.device, requires_grad=True)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=1e-2)

    def learn(self, batch: Any) -> LearnResult:
        alpha_loss = self.log_alpha * batch.rewards.mean().detach()
        self.alpha_optimizer.zero_grad()
        alpha_loss.sum().backward()
        self.alpha_optimizer.step()
        return super().learn(batch)

    def extra_state(self) -> dict[str, Any]:
        return {
            **super().extra_state(),
            "log_alpha": self.log_alpha.detach().clone(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])


class LeakyOptimizerDQN(AlphaDQN):
    """Checkpoints its temperature but not the temperature's optimizer."""

    def extra_state(self) -> dict[str, Any]:
        state = super().extra_state()
        del state["alpha_optimizer"]
        return state

    def load_extra_state(self, state: dict[str, Any]) -> None:
        DQN.load_extra_state(self, state)
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])


VARIANTS = (LeakyTensorDQN, LeakyFloatDQN, TemperatureDQN, AlphaDQN, LeakyOptimizerDQN)


class Variants:
    """Registers each variant under its class name, with DQN's spec."""

    @hookimpl
    def agile_register_algorithms(self, register: Any) -> None:
        for cls in VARIANTS:
            register(
                name=cls.__name__,
                spec=DQNSpec,
                family="off_policy",
                implementation=f"{__name__}:{cls.__name__}",
            )


@pytest.fixture
def registry(agile_host: Any) -> Any:
    host = agile_host(Variants())
    assert all(info.status == "loaded" for info in host.plugins), host.plugins
    return host.registry


@pytest.mark.parametrize(
    ("variant", "attribute"), [("LeakyTensorDQN", "log_alpha"), ("LeakyFloatDQN", "alpha")]
)
def test_conformance_names_a_learned_attribute_extra_state_drops(
    registry: Any, tmp_path: Path, variant: str, attribute: str
) -> None:
    with pytest.raises(AssertionError) as failure:
        check_conformance(variant, tmp_path, registry=registry)
    message = str(failure.value)
    assert f"{variant} does not conform" in message
    assert f"checkpoint round trip lost '{attribute}'" in message
    assert "return it from extra_state() and restore it in load_extra_state()" in message


@pytest.mark.parametrize("variant", ["TemperatureDQN", "AlphaDQN"])
def test_a_variant_that_saves_its_temperature_conforms(
    registry: Any, tmp_path: Path, variant: str
) -> None:
    check_conformance(variant, tmp_path, registry=registry)


def test_conformance_names_an_optimizer_kept_outside_self_optimizers(
    registry: Any, tmp_path: Path
) -> None:
    with pytest.raises(AssertionError) as failure:
        check_conformance("LeakyOptimizerDQN", tmp_path, registry=registry)
    message = str(failure.value)
    assert "checkpoint round trip lost the state of 'alpha_optimizer' (Adam), kept outside" in (
        message
    )
    assert "lost 'log_alpha'" not in message


def test_the_fixture_takes_a_registry(registry: Any, agile_conformance: Any) -> None:
    with pytest.raises(AssertionError, match="lost 'alpha'"):
        agile_conformance("LeakyFloatDQN", registry=registry)
