"""Evolvable networks: architecture descriptions, the torch modules built from them, and the
transfer of weights and optimizer state between a network and its mutated copy.

Importing this package is cheap: it exposes the torch-free architecture descriptions
(:mod:`agile_rl.nn.arch`). The torch modules live in :mod:`agile_rl.nn.modules` and
:mod:`agile_rl.nn.transfer`; import them where a network is built.
"""

from __future__ import annotations

from agile_rl.nn.arch import (
    ArchMethod,
    CNNArch,
    CnnLstmArch,
    LSTMArch,
    MLPArch,
    MultiInputArch,
    NetworkArch,
    SimBaArch,
    arch_from_spec,
)

__all__ = [
    "ArchMethod",
    "CNNArch",
    "CnnLstmArch",
    "LSTMArch",
    "MLPArch",
    "MultiInputArch",
    "NetworkArch",
    "SimBaArch",
    "arch_from_spec",
]
