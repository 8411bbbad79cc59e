"""``algorithm.normalize_images``: image observations reach the networks scaled to [0, 1] by
default, and as their 0-255 values with ``false`` (agilerl's meaning of the key), in training,
in clones, in a saved run read back and in an exported policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from agile_cli.testing import installed_host, smoke_train, tiny_manifest, tiny_population
from agile_cli.training.evaluation import load_agent

PIXELS = {"name": "bright", "path": str(Path(__file__).parent / "image_envs"),
          "entrypoint": "bright_side.py:make_bright_side", "num_envs": 2, "sync": True}  # fmt: skip
NETWORK = {"latent_dim": 8, "encoder_config": {"channel_size": [8], "kernel_size": [3],
           "stride_size": [1]}, "head_config": {"hidden_size": [8]}}  # fmt: skip


def _manifest(algorithm: str, normalize: bool | None) -> Any:
    options = {} if normalize is None else {"normalize_images": normalize}
    return tiny_manifest(algorithm, environment=PIXELS, algorithm_options=options, network=NETWORK)


def _pixels() -> np.ndarray:
    return np.full((2, 10, 12, 3), 200, dtype=np.uint8)


@pytest.mark.parametrize("algorithm", ["DQN", "PPO"])
@pytest.mark.parametrize(("normalize", "seen"), [(None, 200 / 255), (True, 200 / 255),
                                                  (False, 200.0)])  # fmt: skip
def test_members_and_their_clones_see_pixels_as_the_manifest_says(
    algorithm: str, normalize: bool | None, seen: float
) -> None:
    member = tiny_population(_manifest(algorithm, normalize), size=1)[0]
    for agent in (member, member.clone(1)):
        tensor = agent.obs_tensor(_pixels())
        assert tensor.dtype == torch.float32
        torch.testing.assert_close(tensor, torch.full(tensor.shape, seen))


@pytest.mark.parametrize(("normalize", "seen"), [(True, 200 / 255), (False, 200.0)])
def test_an_exported_policy_scales_pixels_as_its_member_did(normalize: bool, seen: float) -> None:
    member = tiny_population(_manifest("DQN", normalize), size=1)[0]
    policy = member.export_policy()
    pixels = _pixels()
    read = policy.observations(torch.as_tensor(pixels))
    torch.testing.assert_close(read, torch.full(read.shape, seen))
    exported = policy(torch.as_tensor(pixels))
    with torch.no_grad():
        own = member.networks["q"](member.obs_tensor(pixels))["q"].argmax(-1)
    assert torch.equal(exported.reshape(-1), own.reshape(-1))


def test_a_saved_run_reads_back_with_unscaled_pixels(tmp_path: Path) -> None:
    manifest = _manifest("DQN", False)
    smoke_train(manifest, tmp_path / "run")
    agent, _ = load_agent(tmp_path / "run", installed_host().registry, device="cpu")
    torch.testing.assert_close(agent.obs_tensor(_pixels()), torch.full((2, 10, 12, 3), 200.0))
    assert agent.observation_space.shape == (10, 12, 3)
    assert agent.observation_space.dtype == np.uint8  # stored as the environment gives them


def test_normalize_images_validates_without_a_warning(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        "algorithm: {name: DQN, normalize_images: false}\nenvironment: {name: CartPole-v1}\n",
        encoding="utf-8",
    )
    result = run("validate", str(path))
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output
    path.write_text(
        "algorithm: {name: DQN, normalize_images: sometimes}\nenvironment: {name: CartPole-v1}\n",
        encoding="utf-8",
    )
    result = run("validate", str(path))
    assert result.exit_code == 2
    assert "algorithm.normalize_images" in result.output
