"""``agile validate --check-env`` builds one member, so that an algorithm refuses the spaces it
cannot handle at validation rather than when training starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gymnasium import spaces

from agile_cli import hookimpl
from agile_dqn.algorithm import DQN
from agile_dqn.spec import DQNSpec


class PickyDQN(DQN):
    """Refuses non-Discrete actions the documented way."""

    def build(self) -> None:
        if not isinstance(self.action_space, spaces.Discrete):
            kind = type(self.action_space).__name__
            raise NotImplementedError(
                f"PickyDQN does not support {kind} action spaces (it needs Discrete actions)"
            )
        super().build()


class TerseDQN(DQN):
    """Refuses without naming itself."""

    def build(self) -> None:
        raise NotImplementedError("Discrete action spaces only")


class Variants:
    @hookimpl
    def agile_register_algorithms(self, register: Any) -> None:
        for name, implementation in (
            ("PickyDQN", f"{__name__}:PickyDQN"),
            ("TerseDQN", f"{__name__}:TerseDQN"),
            ("MissingDQN", f"{__name__}:NoSuchClass"),
        ):
            register(name=name, spec=DQNSpec, family="off_policy", implementation=implementation)


@pytest.fixture
def host(agile_host: Any) -> Any:
    return agile_host(Variants())


def _manifest(write: Any, algorithm: str, environment: str = "Pendulum-v1") -> Path:
    return write(
        "m.yaml",
        f"algorithm: {{name: {algorithm}}}\n"
        f"environment: {{name: {environment}, num_envs: 2}}\n"
        "training: {max_steps: 256, pop_size: 2, evo_steps: 128}\n",
    )


def test_dqn_on_box_actions_fails_validate_check_env(run: Any, write: Any) -> None:
    path = _manifest(write, "DQN")
    assert run("validate", str(path)).exit_code == 0  # without --check-env: spaces unknown
    result = run("validate", "--check-env", str(path))
    assert result.exit_code == 2, result.output
    assert f"{path}: invalid, 1 error\n  algorithm: DQN does not support Box action spaces" in (
        result.output
    )
    assert "Traceback" not in result.output


def test_an_algorithm_refusing_a_space_is_reported_in_its_words(
    run: Any, write: Any, host: Any
) -> None:
    result = run("validate", "--check-env", str(_manifest(write, "PickyDQN")), host=host)
    assert result.exit_code == 2, result.output
    assert result.output.splitlines()[1] == (
        "  algorithm: PickyDQN does not support Box action spaces (it needs Discrete actions)"
    )


def test_a_refusal_not_naming_the_algorithm_is_prefixed_with_it(
    run: Any, write: Any, host: Any
) -> None:
    result = run("validate", "--check-env", str(_manifest(write, "TerseDQN")), host=host)
    assert result.exit_code == 2, result.output
    assert "  algorithm: TerseDQN: Discrete action spaces only" in result.output


def test_train_still_refuses_the_space(
    run: Any, write: Any, host: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = run("train", str(_manifest(write, "PickyDQN")), host=host)
    assert result.exit_code == 1, result.output
    assert (
        "error: PickyDQN does not support Box action spaces (it needs Discrete actions)"
        in result.output
    )


def test_an_implementation_that_cannot_be_imported_is_reported(
    run: Any, write: Any, host: Any
) -> None:
    result = run("validate", "--check-env", str(_manifest(write, "MissingDQN")), host=host)
    assert result.exit_code == 2, result.output
    assert f"  algorithm: cannot load '{__name__}:NoSuchClass': AttributeError" in result.output


def test_a_supported_algorithm_passes(run: Any, write: Any) -> None:
    path = _manifest(write, "PPO")
    result = run("validate", "--check-env", str(path))
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"{path}: ok (PPO on Pendulum-v1")
