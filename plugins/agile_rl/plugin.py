"""Registers the four RL paradigms (light: their ``training`` specs are named by reference,
imported when a manifest needs them, and the runners are imported only to train)."""

from __future__ import annotations

from agile_cli import RegisterParadigm, hookimpl
from agile_rl.architectures import check_architecture

_IMPLEMENTATIONS = "agile_rl.paradigms"
_SPECS = "agile_rl.spec"


@hookimpl
def agile_register_paradigms(register: RegisterParadigm) -> None:
    register(
        name="off_policy",
        implementation=f"{_IMPLEMENTATIONS}:OffPolicy",
        network="agile_rl.models.network:NetworkSpec",
        replay_buffer="agile_rl.models.replay_buffer:ReplayBufferSpec",
        training=f"{_SPECS}:OffPolicyTraining",
        algorithm_fields={"learn_step": int, "gamma": float},
        check_architecture=check_architecture,
        description="act, store transitions in a shared replay buffer, learn from batches",
    )
    register(
        name="on_policy",
        implementation=f"{_IMPLEMENTATIONS}:OnPolicy",
        network="agile_rl.models.network:NetworkSpec",
        algorithm_fields={"learn_step": int},
        check_architecture=check_architecture,
        description="collect a rollout of learn_step steps, learn from it, repeat",
    )
    register(
        name="multi_agent_off_policy",
        implementation=f"{_IMPLEMENTATIONS}:TeamOffPolicy",
        network="agile_rl.models.network:NetworkSpec",
        replay_buffer="agile_rl.models.replay_buffer:ReplayBufferSpec",
        multi_agent=True,
        training=f"{_SPECS}:TeamOffPolicyTraining",
        algorithm_fields={"gamma": float},
        check_architecture=check_architecture,
        description="a team acts, every agent's transitions go to a shared replay buffer",
    )
    register(
        name="multi_agent_on_policy",
        implementation=f"{_IMPLEMENTATIONS}:TeamOnPolicy",
        network="agile_rl.models.network:NetworkSpec",
        multi_agent=True,
        training=f"{_SPECS}:TeamTraining",
        check_architecture=check_architecture,
        description="a team collects a rollout per agent and learns from it",
    )
