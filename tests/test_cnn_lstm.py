"""The ``cnn_lstm`` encoder of recurrent policies on images: agilerl 2.58's manifests with it
validate (tests/test_reference_258.py trains the corpus's); its network reads sequences as it
reads frames one by one, resets where episodes start, survives checkpoints and architecture
files; a misplaced one is refused with the field to fix."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import jsonschema
import numpy as np
import pytest
import torch
import yaml

from agile_cli import ManifestError, TrainingManifest
from agile_cli.testing import tiny_population
from agile_rl import CnnLstmEncoderConfig, NetworkSpec
from agile_rl.nn.arch import (
    CNNArch,
    CnnLstmArch,
    MLPArch,
    NetworkArch,
    arch_from_spec,
    check_within,
)
from agile_rl.nn.modules import EvolvableNetwork
from agile_rl.nn.recurrent_arch import LSTMArch
from agile_rl.runtime.stacked import layout_key
from agile_rl.training.budget import network_parameters

ROOT = Path(__file__).resolve().parents[1]
PIXELS = ROOT / "tests" / "reference_258" / "recurrent_ppo_cartpole_pixels.yaml"
HWC = gym.spaces.Box(0, 255, (12, 16, 3), np.uint8)
CHW = gym.spaces.Box(0.0, 1.0, (2, 12, 16), np.float32)
VECTOR = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
CNN_LSTM = {"arch": "cnn_lstm", "channel_size": [8, 8], "kernel_size": [3, 3],
            "stride_size": [2, 1], "hidden_state_size": 16}  # fmt: skip


def _corpus(**training: Any) -> dict[str, Any]:
    data = yaml.safe_load(PIXELS.read_text())
    data["training"].update(training)
    return data


def _errors(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        TrainingManifest.get_validated(data)
    return caught.value.lines()


def _spec(**encoder: Any) -> NetworkSpec:
    config = {**CNN_LSTM, **encoder}
    return NetworkSpec.model_validate({"latent_dim": 16, "encoder_config": config,
                                       "head_config": {"hidden_size": [16]}})  # fmt: skip


def _net(space: gym.spaces.Box, **encoder: Any) -> EvolvableNetwork:
    arch = arch_from_spec(_spec(**encoder), space, recurrent=True)
    heads = {"policy": 2, "value": 1}
    return EvolvableNetwork(arch, space, heads, generator=torch.Generator().manual_seed(0))


def _frames(steps: int, batch: int, space: gym.spaces.Box) -> torch.Tensor:
    return torch.rand((steps, batch, *space.shape), generator=torch.Generator().manual_seed(1))


def _stepped(
    net: EvolvableNetwork, obs: torch.Tensor, state: tuple[torch.Tensor, ...]
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """The policy head read one frame at a time, the state carried from frame to frame."""
    outputs = []
    for frame in obs:
        out, state = net.unroll(frame[None], state)
        outputs.append(out["policy"])
    return torch.cat(outputs), state


# -- the reference's manifest ----------------------------------------------------------------------


def test_the_pixel_manifest_validates_with_a_cnn_lstm_encoder(run: Any) -> None:
    manifest = TrainingManifest.get_validated(_corpus())
    encoder = manifest.network.encoder_config
    assert isinstance(encoder, CnnLstmEncoderConfig)
    assert (encoder.channel_size, encoder.kernel_size, encoder.stride_size) == (
        [8, 8], [8, 4], [8, 4],
    )  # fmt: skip
    assert (encoder.hidden_state_size, encoder.num_layers, encoder.output_activation) == (
        16, 1, None,
    )  # fmt: skip
    result = run("validate", str(PIXELS))
    assert result.exit_code == 0, result.output


def test_the_schema_tells_a_cnn_lstm_from_a_cnn_and_an_lstm(run: Any) -> None:
    schema = json.loads(run("schema", "--algorithm", "PPO").output)
    network = schema["$defs"]["StochasticNetworkSpec"]
    encoder = {"$defs": schema["$defs"], **network["properties"]["encoder_config"]}
    keys_only = {key: value for key, value in CNN_LSTM.items() if key != "arch"}
    cnn = {key: keys_only[key] for key in ("channel_size", "kernel_size", "stride_size")}
    for config in (CNN_LSTM, keys_only, cnn, {"hidden_state_size": 16}):
        jsonschema.validate(config, encoder)  # one choice each, as validation reads it
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**CNN_LSTM, "hidden_size": [16]}, encoder)


def test_a_member_restored_from_its_state_computes_what_it_did() -> None:
    manifest = TrainingManifest.get_validated(_corpus(pop_size=2))
    saved, fresh = tiny_population(manifest)
    grown, _ = saved.arch.apply("latent.add_node", np.random.default_rng(0))
    saved.set_architecture(grown)  # restoring rebuilds the fresh member's networks first
    fresh.load_state_dict(saved.state_dict())
    assert fresh.arch == grown
    space = saved.policy.observation_space
    obs = _frames(2, 1, space)
    with torch.no_grad():
        expected, _ = saved.policy.unroll(obs, saved.policy.initial_state(1))
        restored, _ = fresh.policy.unroll(obs, fresh.policy.initial_state(1))
    assert all(torch.equal(expected[name], restored[name]) for name in expected)


# -- the network -----------------------------------------------------------------------------------


@pytest.mark.parametrize("space", [HWC, CHW], ids=["channels-last", "channels-first"])
def test_a_sequence_read_at_once_equals_its_frames_read_one_by_one(space: gym.Space) -> None:
    net = _net(space, num_layers=2)
    obs = _frames(5, 3, space)
    start = tuple(torch.randn_like(part) for part in net.initial_state(3))
    whole, final = net.unroll(obs, start)
    stepped, state = _stepped(net, obs, start)
    assert torch.allclose(whole["policy"], stepped, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(final, state, strict=True))
    with pytest.raises(TypeError, match="unroll"):
        net(obs[0])


def test_a_reset_inside_a_sequence_equals_starting_afresh() -> None:
    net = _net(HWC)
    obs = _frames(6, 2, HWC)
    starts = torch.zeros(6, 2, dtype=torch.bool)
    starts[3, 1] = True
    start = tuple(torch.randn_like(part) for part in net.initial_state(2))
    whole, _ = net.unroll(obs, start, starts)
    afresh, _ = _stepped(net, obs[3:, 1:], net.initial_state(1))
    assert torch.allclose(whole["policy"][3:, 1:], afresh, atol=1e-6)
    unreset, _ = net.unroll(obs, start)
    assert torch.equal(whole["policy"][:, :1], unreset["policy"][:, :1])  # the other one
    assert not torch.allclose(whole["policy"][3:, 1:], unreset["policy"][3:, 1:])


def test_its_parameters_are_named_for_transfer_and_mutation_and_counted() -> None:
    net = _net(HWC, layer_norm=True)
    names = [name for name, _ in net.encoder.named_parameters()]
    assert {"cnn.convs.0.weight", "cnn.norms.1.weight", "lstm.weight_ih_l0", "out.weight",
            "out.bias"} <= set(names)  # fmt: skip
    assert all(name.startswith(("cnn.", "lstm.", "out.")) for name in names)
    one_head = EvolvableNetwork(net.arch, HWC, {"value": 1})
    assert network_parameters(net.arch, HWC, 1) == sum(p.numel() for p in one_head.parameters())
    assert net.recurrent and layout_key(net) is None  # members train one by one, not stacked


def test_a_latent_mutation_keeps_the_convolutions_and_the_lstm() -> None:
    net = _net(HWC)
    grown, _ = net.arch.apply("latent.add_node", np.random.default_rng(0))
    rebuilt = net.rebuilt(grown)
    before, after = net.state_dict(), rebuilt.state_dict()
    kept = [name for name in before if name.startswith(("encoder.cnn.", "encoder.lstm."))]
    assert kept and all(torch.equal(before[name], after[name]) for name in kept)
    assert after["encoder.out.weight"].shape[0] == grown.latent_dim > net.arch.latent_dim


# -- the architecture ------------------------------------------------------------------------------


def test_the_architecture_round_trips_describes_itself_and_does_not_mutate() -> None:
    arch = arch_from_spec(_spec(output_activation="Tanh", dropout=0.5), HWC, recurrent=True)
    encoder = arch.encoder
    assert encoder == CnnLstmArch(
        cnn=CNNArch((8, 8), (3, 3), (2, 1)),
        lstm=LSTMArch(16, dropout=0.5, max_hidden_state_size=256, max_layers=6,
                      activation="Tanh"),
    )  # fmt: skip
    assert arch.describe() == "cnn[8k3s2,8k3s1]+lstm[16x1] -> 16 -> mlp[16]"
    data = json.loads(json.dumps(arch.to_dict()))
    assert data["encoder"]["kind"] == "cnn_lstm"
    assert NetworkArch.from_dict(data) == arch
    assert not [m.name for m in arch.mutation_methods() if m.name.startswith("encoder.")]
    changed = arch.with_activation("GELU").encoder
    assert changed == replace(encoder, cnn=replace(encoder.cnn, activation="GELU"))
    check_within(arch, _spec(), recurrent=True)


def test_an_architecture_past_the_sections_bounds_is_refused() -> None:
    arch = arch_from_spec(_spec(), HWC, recurrent=True)
    wide = replace(arch.encoder.cnn, channel_size=(8, 300))
    with pytest.raises(ValueError, match=r"encoder\.cnn\.channel_size\[1\] is 300, over"):
        check_within(replace(arch, encoder=replace(arch.encoder, cnn=wide)), _spec())
    deep = replace(arch.encoder.lstm, num_layers=7)
    with pytest.raises(ValueError, match=r"encoder\.lstm\.num_layers is 7, over"):
        check_within(replace(arch, encoder=replace(arch.encoder, lstm=deep)), _spec())
    with pytest.raises(ValueError, match=r"'lstm' or 'cnn_lstm'"):
        check_within(replace(arch, encoder=MLPArch((16,))), NetworkSpec(), recurrent=True)


def test_a_recurrent_policy_on_images_takes_2_58s_cnn_lstm_unless_told_otherwise() -> None:
    default = arch_from_spec(NetworkSpec(), HWC, recurrent=True).encoder
    assert default == CnnLstmArch(
        CNNArch((32, 32), (3, 3), (1, 1)),
        LSTMArch(128, max_hidden_state_size=256, max_layers=6, activation=None),
    )
    keys_only = {key: value for key, value in CNN_LSTM.items() if key != "arch"}
    spec = NetworkSpec.model_validate({"encoder_config": keys_only})
    assert spec.arch == "cnn_lstm"
    assert isinstance(arch_from_spec(spec, HWC, recurrent=True).encoder, CnnLstmArch)


# -- what is refused -------------------------------------------------------------------------------


def test_mismatched_kernel_and_channel_lengths_name_the_field(run: Any, write: Any) -> None:
    data = _corpus()
    data["network"]["encoder_config"]["kernel_size"] = [8]
    (line,) = _errors(data)
    assert line.startswith("network.encoder_config.kernel_size: channel_size, kernel_size and")
    text = PIXELS.read_text().replace("kernel_size: [8, 4]", "kernel_size: [8]")
    result = run("validate", str(write("pixels.yaml", text)))
    assert result.exit_code == 2
    assert "network.encoder_config.kernel_size: channel_size, kernel_size" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("hidden_state_size", 300, "hidden_state_size: 300 is outside [8, 256]"),
        ("num_layers", 7, "num_layers: 7 is outside [1, 6]"),
        ("block_type", "Conv3d", "block_type: input should be 'Conv2d'"),
        ("hidden_size", [16], "hidden_size: not a field of this choice"),
    ],
)
def test_a_field_out_of_place_is_refused_by_name(field: str, value: Any, expected: str) -> None:
    data = _corpus()
    data["network"]["encoder_config"][field] = value
    assert any(line.startswith(f"network.encoder_config.{expected}") for line in _errors(data))


def test_cnn_lstm_needs_a_recurrent_algorithm() -> None:
    data = _corpus()
    data["algorithm"]["name"] = "PPO"
    (line,) = _errors(data)
    assert line.startswith("network.encoder_config.arch: 'cnn_lstm' needs algorithm.recurrent")
    with pytest.raises(ManifestError) as caught:
        arch_from_spec(_spec(), HWC)  # e.g. DQN's members, which carry no hidden state
    (line,) = caught.value.lines()
    assert line.startswith("network.encoder_config.arch: 'cnn_lstm' needs a recurrent algorithm")


def test_cnn_lstm_needs_images_and_images_need_it() -> None:
    with pytest.raises(ManifestError) as caught:
        arch_from_spec(_spec(), VECTOR, recurrent=True)
    (line,) = caught.value.lines()
    assert line.startswith("network.encoder_config.arch: 'cnn_lstm' reads image (3-D Box)")
    assert line.endswith("(write arch: lstm, or remove arch)")
    lstm = NetworkSpec.model_validate({"encoder_config": {"arch": "lstm"}})
    with pytest.raises(ManifestError, match=r"'lstm' reads vector observations.*arch: cnn_lstm"):
        arch_from_spec(lstm, HWC, recurrent=True)
