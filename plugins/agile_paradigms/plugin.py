"""Registers the four RL paradigms (light: the runners are imported only to train)."""

from __future__ import annotations

from agile_cli import Family, RegisterParadigm, hookimpl
from agile_paradigms.spec import OffPolicyTraining, TeamOffPolicyTraining, TeamTraining

_FACTORIES = "agile_paradigms.factories"


@hookimpl
def agile_register_paradigms(register: RegisterParadigm) -> None:
    register(
        name=Family.OFF_POLICY,
        runner=f"{_FACTORIES}:off_policy_runner",
        buffer=f"{_FACTORIES}:replay_buffer",
        training=OffPolicyTraining,
        algorithm_fields={"learn_step": int, "gamma": float},
        description="act, store transitions in a shared replay buffer, learn from batches",
    )
    register(
        name=Family.ON_POLICY,
        runner=f"{_FACTORIES}:on_policy_runner",
        algorithm_fields={"learn_step": int},
        description="collect a rollout of learn_step steps, learn from it, repeat",
    )
    register(
        name=Family.MULTI_AGENT_OFF_POLICY,
        runner=f"{_FACTORIES}:team_off_policy_runner",
        buffer=f"{_FACTORIES}:team_replay_buffer",
        environment=f"{_FACTORIES}:team_environment",
        multi_agent=True,
        training=TeamOffPolicyTraining,
        algorithm_fields={"gamma": float},
        description="a team acts, every agent's transitions go to a shared replay buffer",
    )
    register(
        name=Family.MULTI_AGENT_ON_POLICY,
        runner=f"{_FACTORIES}:team_on_policy_runner",
        environment=f"{_FACTORIES}:team_environment",
        multi_agent=True,
        training=TeamTraining,
        description="a team collects a rollout per agent and learns from it",
    )
