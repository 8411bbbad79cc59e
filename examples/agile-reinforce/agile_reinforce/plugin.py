"""The plugin module agile loads through the ``agile`` entry point.

Keep it light: it imports nothing of its own. The spec and the implementation are named as
``"module:Class"`` strings: agile imports the spec when a manifest names REINFORCE (so
`agile validate` builds only the specs it needs) and the implementation (torch) when training
starts.
"""

from __future__ import annotations

from agile_cli import RegisterAlgorithm, hookimpl


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="REINFORCE",
        spec="agile_reinforce.spec:REINFORCESpec",
        family="on_policy",
        implementation="agile_reinforce.algorithm:REINFORCE",
    )
