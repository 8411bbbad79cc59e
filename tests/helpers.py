"""Small real populations and manifests for tests."""

from __future__ import annotations

from typing import Any

import torch

from agile_cli import TrainingManifest
from agile_cli.agent import AgentContext, Algorithm
from agile_cli.nn.arch import arch_from_spec
from agile_cli.plugins import default_host
from agile_cli.training import setup


def tiny_manifest(algorithm: str, **sections: Any) -> TrainingManifest:
    data = {
        "algorithm": {"name": algorithm, "batch_size": 16},
        "environment": {"name": "CartPole-v1", "num_envs": 2, "sync": True},
        "training": {"max_steps": 256, "evo_steps": 128, "pop_size": 2},
        "network": {
            "latent_dim": 16,
            "encoder_config": {"hidden_size": [16]},
            "head_config": {"hidden_size": [16]},
        },
        **sections,
    }
    return TrainingManifest.get_validated(data)


def tiny_population(algorithm: str, size: int = 2) -> list[Algorithm]:
    manifest = tiny_manifest(algorithm)
    registry = default_host().registry
    env = setup.build_environment(manifest, registry, seed=0)
    context = AgentContext(torch.device("cpu"), env.num_envs, manifest.training, seed=0,
                           network=manifest.network)  # fmt: skip
    cls = setup.algorithm_class(manifest, registry)
    arch = arch_from_spec(manifest.network, env.single_observation_space)
    members = [
        cls(manifest.algorithm, observation_space=env.single_observation_space,
            action_space=env.single_action_space, arch=arch, context=context, index=i)
        for i in range(size)
    ]  # fmt: skip
    env.close()
    return members
