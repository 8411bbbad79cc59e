"""The plugin module agile loads through the ``agile`` entry point.

Keep it light: it imports only the spec. The implementation (torch) is named as a string and
imported when training starts, so `agile validate` stays fast.
"""

from __future__ import annotations

from agile_cli import Family, RegisterAlgorithm, hookimpl
from agile_reinforce.spec import REINFORCESpec


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="REINFORCE",
        spec=REINFORCESpec,
        family=Family.ON_POLICY,
        implementation="agile_reinforce.algorithm:REINFORCE",
    )
