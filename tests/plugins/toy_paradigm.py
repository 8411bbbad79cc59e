"""A training paradigm that is not reinforcement learning, registered as a third party would:
supervised regression of ``y = 2 x`` from samples its runner draws.

Nothing in agile's core knows it: the plugin contributes the paradigm (runner factory and a
``training`` field), an algorithm of that family and an environment builder for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, cast

import numpy as np
import torch
from gymnasium import spaces
from pydantic import Field

from agile_cli import (
    AlgorithmSpec,
    EnvironmentBuilder,
    EnvironmentSpec,
    GenerationStats,
    Paradigm,
    RegisterAlgorithm,
    RegisterEnvironment,
    RegisterParadigm,
    Runner,
    TrainingManifest,
    TrainingSpec,
    hookimpl,
)
from agile_rl import Algorithm, LearnResult, NetworkSpec, RLParadigm

SLOPE = 2.0


class RegressionTraining(TrainingSpec):
    """The paradigm's own ``training`` field."""

    samples_per_step: int = Field(default=8, ge=1, description="Samples in each gradient step.")


class FitterSpec(AlgorithmSpec):
    lr: float = Field(default=0.05, gt=0, description="Learning rate.")
    mutable_hyperparameters: ClassVar[tuple[str, ...]] = ("lr",)
    default_evo_steps: ClassVar[int] = 20


class LineSpec(EnvironmentSpec):
    """Where the samples come from: ``x`` uniform in [-1, 1]."""


class Line:
    """Not a vector environment: only the spaces and a sampler the runner uses."""

    num_envs = 1
    single_observation_space = spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)
    single_action_space = spaces.Box(-np.inf, np.inf, (1,), dtype=np.float32)

    def __init__(self, seed: int | None) -> None:
        self.rng = np.random.default_rng(seed)

    def sample(self, count: int) -> np.ndarray:
        return self.rng.uniform(-1.0, 1.0, (count, 1)).astype(np.float32)

    def close(self) -> None:
        pass


class LineBuilder(EnvironmentBuilder):
    def build(self, spec: EnvironmentSpec, *, seed: int | None = None) -> Line:
        return Line(seed)


class Fitter(Algorithm):
    """Predicts ``y`` from ``x`` with one network."""

    def build(self) -> None:
        self.add_network("model", {"y": 1})
        self.add_optimizer("model", ("model",), "lr")

    def predict(self, x: np.ndarray) -> torch.Tensor:
        out: torch.Tensor = self.networks["model"](self.obs_tensor(x))["y"]
        return out

    def act(self, obs: Any, *, explore: bool) -> Any:
        with torch.no_grad():
            return self.predict(obs).cpu().numpy()

    def learn(self, x: np.ndarray) -> LearnResult:
        target = torch.as_tensor(SLOPE * x, device=self.device)
        loss = torch.nn.functional.mse_loss(self.predict(x), target)
        self.gradient_step("model", loss)
        return LearnResult(float(loss.detach()))


class RegressionRunner(Runner[Fitter]):
    """A generation is ``steps`` gradient steps; the fitness is minus the squared error."""

    def __init__(self, line: Line, samples_per_step: int) -> None:
        super().__init__(line)
        self.line = line
        self.samples_per_step = samples_per_step

    def train_population(
        self, members: list[Fitter], steps: int, progress: Callable[[int], None]
    ) -> list[GenerationStats]:
        return [self._train(member, steps, progress) for member in members]

    def _train(
        self, member: Fitter, steps: int, progress: Callable[[int], None]
    ) -> GenerationStats:
        stats = GenerationStats()
        for _ in range(steps):
            stats.losses.append(member.learn(self.line.sample(self.samples_per_step)).loss)
            stats.steps += 1
            member.record.steps += 1
            progress(1)
        return stats

    def evaluate_population(
        self, members: list[Fitter], rounds: int, max_steps: int | None
    ) -> list[float]:
        x = self.line.sample(64 * rounds)
        return [-float(np.mean((m.act(x, explore=False) - SLOPE * x) ** 2)) for m in members]


class Regression(RLParadigm):
    def runner(self, manifest: TrainingManifest, env: Line, buffer: None) -> RegressionRunner:
        training = cast(RegressionTraining, manifest.training)
        return RegressionRunner(env, training.samples_per_step)


class ToyParadigmPlugin:
    @hookimpl
    def agile_register_paradigms(self, register: RegisterParadigm) -> None:
        register(
            name="regression",
            implementation=f"{__name__}:Regression",
            training=RegressionTraining,
            network=NetworkSpec,
            description="fit y = 2x from samples",
        )

    @hookimpl
    def agile_register_algorithms(self, register: RegisterAlgorithm) -> None:
        register(name="Fitter", spec=FitterSpec, family="regression",
                 implementation=f"{__name__}:Fitter")  # fmt: skip

    @hookimpl
    def agile_register_environments(self, register: RegisterEnvironment) -> None:
        register(name="line", spec=LineSpec, families=["regression"],
                 implementation=f"{__name__}:LineBuilder")  # fmt: skip


class NotARunner(RLParadigm):
    def runner(self, manifest: TrainingManifest, env: Line, buffer: None) -> Any:
        return object()


class MalformedRunnerPlugin:
    """A paradigm whose runner is not a Runner."""

    @hookimpl
    def agile_register_paradigms(self, register: RegisterParadigm) -> None:
        register(name="bogus", implementation=f"{__name__}:NotARunner", network=NetworkSpec)

    @hookimpl
    def agile_register_algorithms(self, register: RegisterAlgorithm) -> None:
        register(name="Bogus", spec=FitterSpec, family="bogus",
                 implementation=f"{__name__}:Fitter")  # fmt: skip

    @hookimpl
    def agile_register_environments(self, register: RegisterEnvironment) -> None:
        register(name="bogus-line", spec=LineSpec, families=["bogus"],
                 implementation=f"{__name__}:LineBuilder")  # fmt: skip


class RunnerOnly(Paradigm):
    """A paradigm written before every paradigm built its own population."""

    def runner(self, manifest: TrainingManifest, env: Line, buffer: None) -> RegressionRunner:
        return RegressionRunner(env, 8)


class NoPopulationPlugin:
    """A paradigm that does not implement ``population``."""

    @hookimpl
    def agile_register_paradigms(self, register: RegisterParadigm) -> None:
        register(name="unpopulated", implementation=f"{__name__}:RunnerOnly")

    @hookimpl
    def agile_register_algorithms(self, register: RegisterAlgorithm) -> None:
        register(name="Lonely", spec=FitterSpec, family="unpopulated",
                 implementation=f"{__name__}:Fitter")  # fmt: skip

    @hookimpl
    def agile_register_environments(self, register: RegisterEnvironment) -> None:
        register(name="lonely-line", spec=LineSpec, families=["unpopulated"],
                 implementation=f"{__name__}:LineBuilder")  # fmt: skip
