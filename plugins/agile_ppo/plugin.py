"""Registers PPO (light: its spec is named by reference, imported when a manifest names
PPO; the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import RegisterAlgorithm, hookimpl


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="PPO",
        spec="agile_ppo.spec:PPOSpec",
        family="on_policy",
        implementation="agile_ppo.algorithm:PPO",
        # The reference names a recurrent PPO run "Recurrent PPO" when it writes its manifest.
        aliases={"Recurrent PPO": {"recurrent": True}, "RecurrentPPO": {"recurrent": True}},
    )
