"""The specs of the manifest's ``network`` and ``replay_buffer`` sections, for algorithms that
declare or narrow them (an algorithm spec's ``network_spec`` / ``replay_buffer_spec``), and
for the RL library, which builds networks and buffers from them."""

from __future__ import annotations

from agile_cli.models import NetworkSpec, StochasticNetworkSpec
from agile_cli.models.network import (
    CNNEncoderConfig,
    LSTMEncoderConfig,
    MLPConfig,
    MultiInputEncoderConfig,
    SimBaEncoderConfig,
)
from agile_cli.models.replay_buffer import NStepBufferArgs, ReplayBufferSpec

__all__ = [
    "CNNEncoderConfig",
    "LSTMEncoderConfig",
    "MLPConfig",
    "MultiInputEncoderConfig",
    "NStepBufferArgs",
    "NetworkSpec",
    "ReplayBufferSpec",
    "SimBaEncoderConfig",
    "StochasticNetworkSpec",
]
