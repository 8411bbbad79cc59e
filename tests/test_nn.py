"""Evolvable networks: architecture mutations, the modules built from them, weight transfer."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
import torch

from agile_cli.errors import ManifestError
from agile_rl import NetworkSpec
from agile_rl.nn import (
    CNNArch,
    MLPArch,
    MultiInputArch,
    NetworkArch,
    SimBaArch,
    arch_from_spec,
)
from agile_rl.nn.modules import EvolvableNetwork, SimBa, preprocess
from agile_rl.nn.noisy import NoisyLinear, mean_weights, noisy_layers, reset_noise
from agile_rl.nn.transfer import transfer_optimizer_state

HEADS = {"policy": 3, "value": 1}
BATCH = 4

SPACES = {
    "vector": gym.spaces.Box(-1.0, 1.0, (6,), np.float32),
    "image_chw": gym.spaces.Box(0, 255, (3, 16, 16), np.uint8),
    "image_hwc": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8),
    "dict": gym.spaces.Dict(
        {
            "pixels": gym.spaces.Box(0, 255, (12, 12, 3), np.uint8),
            "state": gym.spaces.Box(-1.0, 1.0, (5,), np.float32),
            "mode": gym.spaces.Discrete(3),
        }
    ),
}


def _batch(space: gym.spaces.Space, seed: int = 0) -> object:
    """A preprocessed batch of BATCH observations of ``space``."""
    space.seed(seed)
    if isinstance(space, gym.spaces.Dict):
        raw = {key: np.stack([sub.sample() for _ in range(BATCH)]) for key, sub in space.items()}
    else:
        raw = np.stack([space.sample() for _ in range(BATCH)])
    return preprocess(space, raw, "cpu")


def _arch(space: gym.spaces.Space, **network: object) -> NetworkArch:
    return arch_from_spec(NetworkSpec.model_validate(network), space)


def _net(arch: NetworkArch, space: gym.spaces.Space, seed: int = 0) -> EvolvableNetwork:
    return EvolvableNetwork(arch, space, HEADS, generator=torch.Generator().manual_seed(seed))


def _check_shapes(net: EvolvableNetwork, obs: object) -> None:
    assert net.latent(obs).shape == (BATCH, net.arch.latent_dim)
    out = net(obs)
    assert {name: tuple(t.shape) for name, t in out.items()} == {
        name: (BATCH, width) for name, width in HEADS.items()
    }
    assert all(torch.isfinite(t).all() for t in out.values())


@pytest.mark.parametrize("kind", sorted(SPACES))
def test_every_mutation_gives_a_working_network(kind: str) -> None:
    space = SPACES[kind]
    obs = _batch(space)
    rng = np.random.default_rng(1)
    net = _net(_arch(space), space)
    _check_shapes(net, obs)
    for _ in range(2):  # twice, so mutations also apply to mutated networks
        for method in net.arch.mutation_methods():
            arch, _ = net.arch.apply(method.name, rng)
            net = net.rebuilt(arch, torch.Generator().manual_seed(2))
            assert net.arch == arch
            _check_shapes(net, obs)


def test_expected_encoder_per_observation_space() -> None:
    kinds = {name: type(_arch(space).encoder) for name, space in SPACES.items()}
    assert kinds == {
        "vector": MLPArch,
        "image_chw": CNNArch,
        "image_hwc": CNNArch,
        "dict": MultiInputArch,
    }
    names = {m.name for m in _arch(SPACES["image_chw"]).mutation_methods()}
    assert {"encoder.add_channel", "encoder.remove_channel", "encoder.change_kernel"} <= names


def test_channels_last_images_are_read_like_channels_first() -> None:
    chw, hwc = SPACES["image_chw"], SPACES["image_hwc"]
    arch = _arch(chw)
    first, last = _net(arch, chw, seed=3), _net(arch, hwc, seed=3)
    assert first.encoder.convs[0].in_channels == last.encoder.convs[0].in_channels == 3
    obs = _batch(chw)
    with torch.no_grad():
        expected, got = first(obs), last(obs.permute(0, 2, 3, 1))
    assert all(torch.allclose(expected[name], got[name]) for name in HEADS)


def test_kernels_larger_than_the_image_are_clamped() -> None:
    space = gym.spaces.Box(0, 255, (3, 6, 6), np.uint8)
    arch = replace(_arch(space), encoder=CNNArch((8, 8, 8), (7, 7, 7), (1, 1, 1)))
    _check_shapes(_net(arch, space), _batch(space))


def test_head_add_node_keeps_old_weights() -> None:
    space = SPACES["vector"]
    net = _net(_arch(space, head_config={"hidden_size": [64]}), space)
    arch, args = net.arch.apply("head.add_node", np.random.default_rng(0))
    assert args["layer"] == 0 and arch.head.hidden_size == (64 + args["nodes"],)
    new = net.rebuilt(arch)
    old_head, new_head = net.heads["policy"], new.heads["policy"]
    assert torch.equal(new_head.layers[0].weight[:64], old_head.layers[0].weight)
    assert torch.equal(new_head.layers[0].bias[:64], old_head.layers[0].bias)
    assert torch.equal(new_head.out.weight[:, :64], old_head.out.weight)
    assert torch.equal(new.encoder.out.weight, net.encoder.out.weight)


def test_head_add_layer_keeps_the_output_layer() -> None:
    space = SPACES["vector"]
    net = _net(_arch(space, head_config={"hidden_size": [32]}), space)
    arch, _ = net.arch.apply("head.add_layer", np.random.default_rng(0))
    assert arch.head.hidden_size == (32, 32)
    new = net.rebuilt(arch)
    for name in HEADS:
        assert torch.equal(new.heads[name].out.weight, net.heads[name].out.weight)
        assert torch.equal(new.heads[name].out.bias, net.heads[name].out.bias)
        assert torch.equal(new.heads[name].layers[0].weight, net.heads[name].layers[0].weight)


def test_latent_remove_node_keeps_the_retained_slice() -> None:
    space = SPACES["vector"]
    net = _net(_arch(space), space)
    arch, _ = net.arch.apply("latent.remove_node", np.random.default_rng(0))
    size = arch.latent_dim
    assert size < net.arch.latent_dim
    new = net.rebuilt(arch)
    assert torch.equal(new.encoder.out.weight, net.encoder.out.weight[:size])
    head, old_head = new.heads["value"], net.heads["value"]
    assert torch.equal(head.layers[0].weight, old_head.layers[0].weight[:, :size])


@pytest.mark.parametrize("kind", ["vector", "image_hwc", "dict"])
def test_rebuilding_an_unchanged_arch_keeps_the_function(kind: str) -> None:
    space = SPACES[kind]
    obs = _batch(space)
    net = _net(_arch(space), space, seed=0)
    copy = net.rebuilt(net.arch, torch.Generator().manual_seed(99))
    with torch.no_grad():
        before, after = net(obs), copy(obs)
    assert all(torch.equal(before[name], after[name]) for name in HEADS)


def _assert_within_bounds(arch: NetworkArch) -> None:
    assert arch.min_latent_dim <= arch.latent_dim <= arch.max_latent_dim
    for mlp in (arch.head, arch.encoder):
        assert mlp.min_hidden_layers <= len(mlp.hidden_size) <= mlp.max_hidden_layers
        assert all(mlp.min_mlp_nodes <= n <= mlp.max_mlp_nodes for n in mlp.hidden_size)


def test_random_mutations_respect_the_bounds() -> None:
    bounds = {"min_hidden_layers": 1, "max_hidden_layers": 2, "min_mlp_nodes": 16}
    arch = _arch(
        SPACES["vector"],
        latent_dim=32,
        min_latent_dim=24,
        max_latent_dim=48,
        encoder_config={"hidden_size": [32], "max_mlp_nodes": 80, **bounds},
        head_config={"hidden_size": [16, 16], "max_mlp_nodes": 64, **bounds},
    )
    rng = np.random.default_rng(7)
    names = [method.name for method in arch.mutation_methods()]
    seen = set()
    for _ in range(600):
        arch, _ = arch.apply(str(rng.choice(names)), rng)
        _assert_within_bounds(arch)
        seen.add((len(arch.head.hidden_size), arch.latent_dim))
    assert len(seen) > 4  # the walk did move around inside the bounds


def test_add_layer_at_the_maximum_and_remove_node_at_the_minimum_stay_in_bounds() -> None:
    head = MLPArch((16, 16, 16), min_mlp_nodes=16)
    rng = np.random.default_rng(0)
    grown, _ = head.add_layer(rng)
    assert len(grown.hidden_size) == 3 and sum(grown.hidden_size) > 48  # added nodes instead
    shrunk, _ = head.remove_node(rng)
    assert shrunk == head


def test_cnn_mutations_respect_channel_bounds_and_kernel_choices() -> None:
    cnn = CNNArch((8, 32), (3, 3), (1, 1), min_channel_size=8, max_channel_size=40)
    rng = np.random.default_rng(3)
    for _ in range(300):
        cnn, _ = getattr(cnn, str(rng.choice(CNNArch.node_methods)))(rng)
        assert all(8 <= c <= 40 for c in cnn.channel_size)
        assert set(cnn.kernel_size) <= {3, 5, 7}
    changed, args = cnn.change_kernel(rng)
    assert changed.kernel_size[args["layer"]] != cnn.kernel_size[args["layer"]]


def test_unknown_mutation_is_refused() -> None:
    arch = _arch(SPACES["vector"])
    with pytest.raises(ValueError, match=r"encoder\.add_channel"):
        arch.apply("encoder.add_channel", np.random.default_rng(0))  # not offered by an MLP


def test_optimizer_state_follows_the_parameters() -> None:
    space = SPACES["vector"]
    net = _net(_arch(space, head_config={"hidden_size": [32]}), space)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    sum(out.sum() for out in net(_batch(space)).values()).backward()
    optimizer.step()

    new = net.rebuilt(replace(net.arch, head=replace(net.arch.head, hidden_size=(48,))))
    new_optimizer = torch.optim.Adam(new.parameters(), lr=1e-3)
    old_params, new_params = dict(net.named_parameters()), dict(new.named_parameters())
    transfer_optimizer_state(optimizer, old_params, new_optimizer, new_params)

    same = "encoder.layers.0.weight"
    old_state, new_state = optimizer.state[old_params[same]], new_optimizer.state[new_params[same]]
    for key in ("step", "exp_avg", "exp_avg_sq"):
        assert torch.equal(new_state[key], old_state[key])
    resized = "heads.policy.layers.0.weight"
    old_state = optimizer.state[old_params[resized]]
    new_state = new_optimizer.state[new_params[resized]]
    assert new_state["exp_avg"].shape == (48, net.arch.latent_dim)
    assert torch.equal(new_state["exp_avg"][:32], old_state["exp_avg"])
    assert torch.equal(new_state["exp_avg_sq"][:32], old_state["exp_avg_sq"])
    assert not new_state["exp_avg"][32:].any()
    assert torch.equal(new_state["step"], old_state["step"])
    sum(out.sum() for out in new(_batch(space)).values()).backward()
    new_optimizer.step()  # the transferred state is usable


@pytest.mark.parametrize("kind", ["vector", "image_chw", "dict"])
def test_arch_round_trips_through_json(kind: str) -> None:
    arch = _arch(SPACES[kind], head_config={"hidden_size": [32, 16], "output_activation": "Tanh"})
    arch, _ = arch.apply(arch.mutation_methods()[2].name, np.random.default_rng(0))
    assert NetworkArch.from_dict(json.loads(json.dumps(arch.to_dict()))) == arch


def test_multi_input_spec_is_used() -> None:
    encoder = {"arch": "multiinput", "latent_dim": 24, "vector_space_mlp": True,
               "mlp_config": {"hidden_size": [16]}}  # fmt: skip
    arch = _arch(SPACES["dict"], encoder_config=encoder)
    assert arch.encoder.latent_dim == 24 and arch.encoder.mlp.hidden_size == (16,)
    assert NetworkArch.from_dict(json.loads(json.dumps(arch.to_dict()))) == arch
    _check_shapes(_net(arch, SPACES["dict"]), _batch(SPACES["dict"]))


def test_same_seed_same_weights_other_seed_other_weights() -> None:
    space = SPACES["image_chw"]
    arch = _arch(space)
    first, second, other = _net(arch, space, 5), _net(arch, space, 5), _net(arch, space, 6)
    first_state, second_state = first.state_dict(), second.state_dict()
    assert all(torch.equal(first_state[name], second_state[name]) for name in first_state)
    assert not torch.equal(first.encoder.convs[0].weight, other.encoder.convs[0].weight)
    assert not torch.equal(first.heads["value"].out.weight, other.heads["value"].out.weight)


def test_with_activation_changes_hidden_activations_only() -> None:
    arch = _arch(SPACES["dict"], head_config={"output_activation": "Tanh"}).with_activation("GELU")
    assert arch.head.activation == "GELU" and arch.head.output_activation == "Tanh"
    assert arch.encoder.mlp.activation == "GELU" and arch.encoder.cnn.activation == "GELU"
    net = _net(arch, SPACES["dict"])
    assert isinstance(net.heads["policy"].acts[0], torch.nn.GELU)
    assert isinstance(net.heads["policy"].out_act, torch.nn.Tanh)


def test_arch_from_spec_choices() -> None:
    image = SPACES["image_hwc"]
    mlp_fields = _arch(image, encoder_config={"hidden_size": [16]})
    assert mlp_fields.encoder == CNNArch((32, 32), (3, 3), (1, 1))
    flat = _arch(image, encoder_config={"arch": "mlp", "hidden_size": [16]})
    assert flat.encoder.hidden_size == (16,)
    _check_shapes(_net(flat, image), _batch(image))
    with pytest.raises(ManifestError):
        _arch(SPACES["vector"], arch="cnn")
    with pytest.raises(ManifestError, match="recurrent"):  # an LSTM needs algorithm.recurrent
        _arch(SPACES["vector"], arch="lstm")


def test_preprocess() -> None:
    one_hot = preprocess(gym.spaces.Discrete(3), np.array([0, 2]), "cpu")
    assert torch.equal(one_hot, torch.tensor([[1.0, 0, 0], [0, 0, 1]]))
    multi = preprocess(gym.spaces.MultiDiscrete([2, 3]), np.array([[1, 0]]), "cpu")
    assert torch.equal(multi, torch.tensor([[0.0, 1, 1, 0, 0]]))
    pixels = preprocess(SPACES["image_hwc"], np.full((2, 16, 16, 3), 255, np.uint8), "cpu")
    assert pixels.dtype == torch.float32 and pixels.shape == (2, 16, 16, 3)
    assert torch.all(pixels == 1.0)
    batch = _batch(SPACES["dict"])
    assert batch["mode"].shape == (BATCH, 3) and batch["state"].dtype == torch.float32
    assert batch["pixels"].min() >= 0.0 and batch["pixels"].max() <= 1.0


def test_importing_the_package_does_not_import_torch() -> None:
    code = "import agile_rl.nn, sys; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_head_extra_input_keeps_its_weights_when_the_latent_mutates() -> None:
    import gymnasium as gym
    import numpy as np
    import torch

    from agile_rl.nn.arch import arch_from_spec
    from agile_rl.nn.modules import EvolvableNetwork

    space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    arch = arch_from_spec(NetworkSpec(latent_dim=32), space)
    critic = EvolvableNetwork(arch, space, {"q": 1}, head_extra=2,
                              generator=torch.Generator().manual_seed(0))  # fmt: skip
    out = critic(torch.zeros(5, 3), torch.ones(5, 2))["q"]
    assert out.shape == (5, 1)
    bigger, _ = arch.apply("latent.add_node", np.random.default_rng(0))
    grown = critic.rebuilt(bigger)
    before = critic.heads["q"].layers[0].weight[:, :2]
    after = grown.heads["q"].layers[0].weight[:, :2]
    assert torch.equal(before, after)  # the action columns did not move
    with pytest.raises(ValueError, match="extra input"):
        critic(torch.zeros(5, 3))


# -- SimBa ---------------------------------------------------------------------------------

SIMBA_MANIFEST = """\
algorithm:
  name: PPO
environment:
  name: CartPole-v1
network:
  simba: true
"""


def _simba(**encoder: object) -> NetworkArch:
    config = {"arch": "simba", "hidden_size": 32, "num_blocks": 2, **encoder}
    return _arch(SPACES["vector"], encoder_config=config)


def test_arch_from_spec_picks_simba_for_either_spelling() -> None:
    space = SPACES["vector"]
    flagged = _arch(space, simba=True)
    assert flagged.encoder == SimBaArch(hidden_size=128, num_blocks=2)
    assert flagged.describe() == "simba[128x2] -> 64 -> mlp[64]"
    assert _arch(space, arch="simba").encoder == flagged.encoder
    configured = _simba(hidden_size=48, num_blocks=3, scale_factor=2, output_activation="Tanh")
    assert configured.encoder == SimBaArch(48, 3, "Tanh", scale_factor=2)
    fields = {"hidden_size": 48, "num_blocks": 3, "scale_factor": 2, "output_activation": "Tanh"}
    assert _arch(space, simba=True, encoder_config=fields).encoder == configured.encoder
    # Discrete observations are one-hot vectors: SimBa reads them too.
    discrete = gym.spaces.Discrete(5)
    _check_shapes(_net(_arch(discrete, simba=True), discrete), _batch(discrete))


def test_simba_encoder_offers_node_mutations_only() -> None:
    names = [method.name for method in _simba().mutation_methods()]
    encoder = [name for name in names if name.startswith("encoder.")]
    assert encoder == ["encoder.add_node", "encoder.remove_node"]
    assert {"head.add_layer", "head.remove_layer"} <= set(names)
    with pytest.raises(ValueError, match="unknown architecture mutation"):
        _simba().apply("encoder.add_block", np.random.default_rng(0))


def test_simba_module_layout() -> None:
    arch = _simba(scale_factor=3, output_activation="Tanh")
    encoder = _net(arch, SPACES["vector"]).encoder
    assert encoder.embed.weight.shape == (32, 6)
    assert len(encoder.blocks) == 2
    assert encoder.blocks[1].up.weight.shape == (96, 32)
    assert encoder.blocks[1].down.weight.shape == (32, 96)
    assert encoder.blocks[0].norm.normalized_shape == (32,)
    assert encoder.out.weight.shape == (arch.latent_dim, 32)
    assert isinstance(encoder.out_act, torch.nn.Tanh)
    latent = encoder(_batch(SPACES["vector"]))
    assert latent.abs().max() < 1  # the output activation is applied
    block, x = encoder.blocks[0], torch.randn(3, 32)
    with torch.no_grad():
        assert torch.allclose(block(x), x + block.down(torch.relu(block.up(block.norm(x)))))


def test_every_simba_mutation_gives_a_working_network() -> None:
    space, obs = SPACES["vector"], _batch(SPACES["vector"])
    arch = _simba(num_blocks=2, max_blocks=3)
    net = _net(arch, space)
    rng = np.random.default_rng(4)
    methods = ["add_node", "remove_node", "add_block", "remove_block"]
    for name in methods * 2:  # twice, so mutations also apply to mutated networks
        encoder, _ = getattr(net.arch.encoder, name)(rng)
        new_arch = replace(net.arch, encoder=encoder)
        net = net.rebuilt(new_arch, torch.Generator().manual_seed(2))
        assert net.arch == new_arch and len(net.encoder.blocks) == encoder.num_blocks
        assert net.encoder.embed.out_features == encoder.hidden_size
        _check_shapes(net, obs)
    for method in net.arch.mutation_methods():
        mutated, _ = net.arch.apply(method.name, rng)
        _check_shapes(net.rebuilt(mutated), obs)


def _simba_params(net: EvolvableNetwork) -> dict[str, torch.Tensor]:
    return {name: p for name, p in net.named_parameters() if name.startswith("encoder.")}


def _same_outputs(first: EvolvableNetwork, second: EvolvableNetwork, obs: object) -> bool:
    with torch.no_grad():
        a, b = first(obs), second(obs)
    return a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


def test_simba_add_node_keeps_the_old_weights_in_the_corner() -> None:
    net = _net(_simba(), SPACES["vector"])
    arch, args = net.arch.apply("encoder.add_node", np.random.default_rng(0))
    assert arch.encoder.hidden_size == 32 + args["nodes"]
    new = net.rebuilt(arch, torch.Generator().manual_seed(1))
    old_params, new_params = _simba_params(net), _simba_params(new)
    assert old_params.keys() == new_params.keys()
    for name, old in old_params.items():
        corner = tuple(slice(0, size) for size in old.shape)
        assert torch.equal(new_params[name][corner], old), name
    width = arch.encoder.hidden_size
    assert new.encoder.blocks[0].up.weight.shape == (4 * width, width)
    # and the shrunk network keeps the corner it still has
    small = new.rebuilt(net.arch)
    assert all(torch.equal(p, old_params[n]) for n, p in _simba_params(small).items())


def test_simba_blocks_keep_their_weights_when_a_block_comes_or_goes() -> None:
    space, obs = SPACES["vector"], _batch(SPACES["vector"])
    net = _net(_simba(num_blocks=2), space)
    rng = np.random.default_rng(0)
    deeper_encoder, args = net.arch.encoder.add_block(rng)
    assert args == {"block": 2} and deeper_encoder.num_blocks == 3
    deeper = net.rebuilt(replace(net.arch, encoder=deeper_encoder))
    old = _simba_params(net)
    for name, tensor in _simba_params(deeper).items():
        if name.startswith("encoder.blocks.2."):
            assert name not in old
        else:
            assert torch.equal(tensor, old[name]), name
    shallower_encoder, args = deeper_encoder.remove_block(rng)
    assert args == {"block": 2} and shallower_encoder == net.arch.encoder
    shallower = deeper.rebuilt(replace(net.arch, encoder=shallower_encoder))
    assert _same_outputs(net, shallower, obs)  # dropping the block it gained undoes it


def test_simba_block_methods_at_their_bounds_add_nodes() -> None:
    rng = np.random.default_rng(0)
    top = SimBaArch(32, 4, max_blocks=4)
    grown, args = top.add_block(rng)
    assert grown.num_blocks == 4 and grown.hidden_size == 32 + args["nodes"]
    bottom = SimBaArch(32, 1, min_blocks=1)
    widened, args = bottom.remove_block(rng)
    assert widened.num_blocks == 1 and widened.hidden_size == 32 + args["nodes"]
    narrowest = SimBaArch(16, 2, min_mlp_nodes=16)
    assert narrowest.remove_node(rng)[0] == narrowest
    widest = SimBaArch(500, 2, max_mlp_nodes=500)
    assert widest.add_node(rng)[0] == widest


def test_random_simba_mutations_respect_the_bounds() -> None:
    encoder = SimBaArch(32, 2, min_blocks=1, max_blocks=3, min_mlp_nodes=16, max_mlp_nodes=96)
    rng = np.random.default_rng(11)
    methods = [*SimBaArch.node_methods, *SimBaArch.layer_methods]
    seen = set()
    for _ in range(800):
        encoder, _ = getattr(encoder, str(rng.choice(methods)))(rng)
        assert 1 <= encoder.num_blocks <= 3 and 16 <= encoder.hidden_size <= 96
        seen.add((encoder.num_blocks, encoder.hidden_size))
    assert {blocks for blocks, _ in seen} == {1, 2, 3}
    assert min(size for _, size in seen) <= 32 and max(size for _, size in seen) >= 80
    arch = _simba(min_mlp_nodes=16, max_mlp_nodes=64)
    names = [method.name for method in arch.mutation_methods()]
    for _ in range(300):
        arch, _ = arch.apply(str(rng.choice(names)), rng)
        assert 16 <= arch.encoder.hidden_size <= 64 and arch.encoder.num_blocks == 2


def test_simba_arch_round_trips_through_json() -> None:
    arch = _simba(num_blocks=3, output_activation="Tanh", scale_factor=2, max_mlp_nodes=200)
    arch, _ = arch.apply("encoder.add_node", np.random.default_rng(0))
    data = json.loads(json.dumps(arch.to_dict()))
    assert data["encoder"]["kind"] == "simba"
    assert NetworkArch.from_dict(data) == arch


def test_simba_on_images_is_a_manifest_error_naming_the_field() -> None:
    image = SPACES["image_hwc"]
    with pytest.raises(ManifestError) as caught:
        _arch(image, simba=True)
    (line,) = caught.value.lines()
    assert line.startswith("network.simba: SimBa is an encoder for vector observations")
    assert "'cnn'" in line
    with pytest.raises(ManifestError, match=r"encoder_config\.arch: SimBa is an encoder for vec"):
        _arch(image, encoder_config={"arch": "simba"})
    with pytest.raises(ManifestError, match="vector observations"):
        _arch(SPACES["dict"], arch="simba")
    with pytest.raises(ManifestError, match=r"network\.encoder_config: describes an MLP"):
        _arch(SPACES["vector"], simba=True, encoder_config={"hidden_size": [16]})


def test_simba_activation_mutation_keeps_relu_blocks() -> None:
    arch = _simba(output_activation="Tanh").with_activation("GELU")
    assert arch.encoder == _simba(output_activation="Tanh").encoder
    assert arch.head.activation == "GELU"
    net = _net(arch, SPACES["vector"])
    assert isinstance(net.encoder.blocks[0].act, torch.nn.ReLU)
    assert isinstance(net.heads["policy"].acts[0], torch.nn.GELU)
    with pytest.raises(ValueError, match="unknown activation"):
        arch.encoder.with_activation("Swish")


def test_simba_weights_come_from_the_generator_only() -> None:
    space = SPACES["vector"]
    arch = _simba()
    torch.manual_seed(0)
    first = _net(arch, space, 5).state_dict()
    torch.manual_seed(1)  # the global state plays no part
    second = _net(arch, space, 5).state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[name], second[name]) for name in first)
    other = _net(arch, space, 6).state_dict()
    for name in ("encoder.embed.weight", "encoder.blocks.1.up.weight", "encoder.out.weight"):
        assert not torch.equal(first[name], other[name])


def test_simba_network_checkpoints_through_state_dict() -> None:
    space, obs = SPACES["vector"], _batch(SPACES["vector"])
    net, fresh = _net(_simba(), space, 0), _net(_simba(), space, 1)
    fresh.load_state_dict(net.state_dict())
    assert _same_outputs(net, fresh, obs)


def test_agile_validate_accepts_simba(run, write) -> None:
    result = run("validate", str(write("simba.yaml", SIMBA_MANIFEST)))
    assert result.exit_code == 0, result.output
    assert ": ok (" in result.output
    result = run("validate", "--json", str(write("simba.yaml", SIMBA_MANIFEST)))
    assert json.loads(result.output)["network"]["simba"] is True


def test_ppo_trains_a_simba_population(tmp_path) -> None:
    from agile_cli.testing import smoke_train, tiny_manifest

    network = {
        "simba": True,
        "latent_dim": 16,
        "head_config": {"hidden_size": [16]},
        "encoder_config": {"arch": "simba", "hidden_size": 32, "num_blocks": 1},
    }
    manifest = tiny_manifest("PPO", network=network)
    result = smoke_train(manifest, tmp_path / "run")
    assert len(result.population) == 2
    assert all(np.isfinite(result.fitnesses))
    for member in result.population:
        assert isinstance(member.arch.encoder, SimBaArch)
        assert all(isinstance(net.encoder, SimBa) for net in member.networks.values())
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert all("simba[" in json.dumps(json.loads(line)["members"]) for line in lines)


# -- noisy layers ------------------------------------------------------------------------------


def _noisy(seed: int = 0) -> NoisyLinear:
    return NoisyLinear(5, 3, 0.5, generator=torch.Generator().manual_seed(seed))


def test_noisy_linear_starts_with_sigma_std_over_root_fan_in_and_no_noise() -> None:
    layer, x = _noisy(), torch.randn(BATCH, 5)
    assert torch.allclose(layer.weight_sigma, torch.full((3, 5), 0.5 / 5**0.5))
    assert torch.allclose(layer.bias_sigma, torch.full((3,), 0.5 / 5**0.5))
    mean = torch.nn.functional.linear(x, layer.weight_mu, layer.bias_mu)
    assert torch.equal(layer(x), mean)  # no noise drawn yet
    assert "eps_in" not in layer.state_dict()  # noise is not checkpointed


def test_noisy_linear_noise_changes_training_outputs_not_evaluation_ones() -> None:
    layer, x = _noisy(), torch.randn(BATCH, 5)
    generator = torch.Generator().manual_seed(1)
    mean = torch.nn.functional.linear(x, layer.weight_mu, layer.bias_mu)
    layer.reset_noise(generator)
    first = layer(x)
    layer.reset_noise(generator)
    second = layer(x)
    assert not torch.allclose(first, mean) and not torch.allclose(first, second)
    eps_w = torch.outer(layer.eps_out, layer.eps_in)  # factorised: rank one
    expected = x @ (layer.weight_mu + layer.weight_sigma * eps_w).T
    assert torch.allclose(second, expected + layer.bias_mu + layer.bias_sigma * layer.eps_out)
    layer.eval()
    assert torch.equal(layer(x), mean)
    layer.train()
    with mean_weights(torch.nn.Sequential(layer)):
        assert torch.equal(layer(x), mean)
    assert layer.training and torch.equal(layer(x), second)


def test_noisy_linear_noise_comes_from_the_generator_only() -> None:
    first, second = _noisy(), _noisy()
    state = torch.get_rng_state()
    first.reset_noise(torch.Generator().manual_seed(7))
    second.reset_noise(torch.Generator().manual_seed(7))
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(first.eps_in, second.eps_in) and torch.equal(first.eps_out, second.eps_out)
    second.reset_noise(torch.Generator().manual_seed(8))
    assert not torch.equal(first.eps_in, second.eps_in)
    network = torch.nn.Sequential(_noisy(), torch.nn.ReLU(), _noisy(1))
    reset_noise(network, torch.Generator().manual_seed(7))
    assert torch.equal(torch.get_rng_state(), state)
    assert all(layer.eps_in.abs().sum() > 0 for layer in noisy_layers(network))


def _assert_overlap_kept(old: EvolvableNetwork, new: EvolvableNetwork) -> None:
    old_params = dict(old.named_parameters())
    for name, param in new.named_parameters():
        if name in old_params:
            shapes = zip(param.shape, old_params[name].shape, strict=True)
            region = tuple(slice(0, min(a, b)) for a, b in shapes)
            assert torch.equal(param[region], old_params[name][region]), name


def test_noisy_network_survives_every_mutation_keeping_overlapping_weights() -> None:
    space = SPACES["vector"]
    obs = _batch(space)
    rng = np.random.default_rng(3)
    net = EvolvableNetwork(
        _arch(space), space, HEADS, generator=torch.Generator().manual_seed(0), noisy_std=0.5
    )
    names = {name for name, _ in net.named_parameters()}
    assert {"heads.policy.layers.0.weight_mu", "heads.value.out.bias_sigma"} <= names
    assert "encoder.out.weight" in names  # only the heads are noisy
    for _ in range(2):
        for method in net.arch.mutation_methods():
            arch, _ = net.arch.apply(method.name, rng)
            new = net.rebuilt(arch, torch.Generator().manual_seed(2))
            assert new.noisy_std == 0.5
            assert len(noisy_layers(new)) == 2 * (len(arch.head.hidden_size) + 1)
            _assert_overlap_kept(net, new)
            _check_shapes(new, obs)  # the noise buffers were resized along with the layers
            reset_noise(new, torch.Generator().manual_seed(3))
            _check_shapes(new, obs)
            net = new


# -- a normalised latent (DQN's) -----------------------------------------------------------------


def test_a_normalised_latent_has_zero_mean_and_unit_variance_per_row() -> None:
    space = SPACES["vector"]
    arch = arch_from_spec(NetworkSpec(), space, latent_norm=True)
    assert arch.encoder.latent_norm and not arch.head.latent_norm
    network = _net(arch, space)
    encoder = network.encoder
    with torch.no_grad():
        pre_activation = encoder.out_norm(encoder.out(torch.relu(torch.randn(7, 64))))
    torch.testing.assert_close(pre_activation.mean(-1), torch.zeros(7), atol=1e-5, rtol=0)
    variance = pre_activation.var(-1, unbiased=False)
    torch.testing.assert_close(variance, torch.ones(7), atol=1e-3, rtol=0)
    assert not list(encoder.out_norm.parameters())  # no learned scale or shift: no new state


def test_only_the_algorithms_that_ask_normalise_their_latent_and_old_archs_do_not() -> None:
    space = SPACES["vector"]
    assert not arch_from_spec(NetworkSpec(), space).encoder.latent_norm
    no_norm = NetworkSpec(encoder_config={"hidden_size": [32], "layer_norm": False})
    assert not arch_from_spec(no_norm, space, latent_norm=True).encoder.latent_norm
    arch = arch_from_spec(NetworkSpec(), space, latent_norm=True)
    saved = arch.to_dict()
    del saved["encoder"]["latent_norm"]  # as an architecture saved before the field existed
    old = replace(arch, encoder=replace(arch.encoder, latent_norm=False))
    assert NetworkArch.from_dict(saved) == old
