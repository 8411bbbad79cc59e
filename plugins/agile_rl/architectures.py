"""The RL paradigms' check of an architecture a manifest names for their members (each entry
of a recipe's schedule), as paradigms register it (``check_architecture=``).

Validation calls it, so this module is light: the architectures (and numpy) are imported when
an architecture is checked, not when a plugin registers the check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agile_cli import AlgorithmSpec, Spec


def check_architecture(
    architecture: Mapping[str, Any], network: Spec, algorithm: AlgorithmSpec
) -> None:
    """Refuse an architecture the algorithm's evolvable members could not adopt, or one past
    the network section's bounds (:func:`agile_rl.nn.arch.check_architecture`).

    :param architecture: the architecture as the manifest gives it
        (:meth:`~agile_rl.NetworkArch.to_dict`'s form).
    :param network: the validated network section.
    :param algorithm: the validated algorithm section.
    :raises ValueError: one sentence naming what is wrong in ``architecture``.
    """
    from agile_rl.nn.arch import check_architecture as check

    check(architecture, network, recurrent=bool(getattr(algorithm, "recurrent", False)))
