"""The arithmetic floor of an on-policy image run: how long its networks' floating-point
operations alone take at the rate this machine achieves on them, whatever the tool.

For a PPO manifest (one member of it, built by agile) it counts, with torch's FLOP counter,
the operations of one forward pass of the policy network on one observation (acting) and of
one forward and backward pass per observation in an update (``update_epochs`` of them for
every collected step), times a forward and backward pass on a minibatch of ``batch_size``
observations to get the achieved FLOP/s, and prints the seconds the training's arithmetic
takes for ``max_steps`` per member and the whole population, evaluation left out:

    python benchmarks/arithmetic_floor.py benchmarks/workloads/ppo_breakout.yaml

A tool cannot train the manifest faster than that floor on this machine; a target speed above
``steps / floor`` needs fewer operations (smaller frames, another network) or faster hardware.
The rate is checked against plain torch: the same layers (copied) as an ``nn.Sequential``
without agile's network around them, timed the same way. Torch's own thread count is used
(``--threads`` to change it); the median of ``--repeats``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def member_of(manifest: Path) -> tuple[Any, Any]:
    """One member of ``manifest`` (built by agile on the CPU) and the validated manifest,
    whose population is then one member."""
    from agile_cli.manifest import TrainingManifest
    from agile_cli.testing import installed_host, tiny_population

    data = yaml.safe_load(manifest.read_text())
    data["training"]["pop_size"] = 1
    validated = TrainingManifest.get_validated(data, registry=installed_host().registry)
    return tiny_population(validated, size=1)[0], validated


def flops(run: Any) -> int:
    """Floating-point operations of ``run()`` (matrix products and convolutions)."""
    with FlopCounterMode(display=False) as counter:
        run()
    return int(counter.get_total_flops())


def median_seconds(run: Any, repeats: int) -> float:
    """The median time of ``run()`` over ``repeats`` calls after one to warm up."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def plain_layers(network: Any) -> tuple[nn.Module, dict[str, nn.Module]]:
    """A CNN-encoded network's layers, copied, as plain ``nn.Sequential`` modules: the
    encoder (images channels-first) and each head."""
    encoder = copy.deepcopy(network.encoder)
    layers: list[nn.Module] = []
    for conv, act in zip(encoder.convs, encoder.acts, strict=True):
        layers += [conv, act]
    trunk = nn.Sequential(*layers, nn.Flatten(), encoder.out, encoder.out_act)
    heads = {}
    for name, head in copy.deepcopy(network.heads).items():
        hidden = [m for pair in zip(head.layers, head.acts, strict=True) for m in pair]
        heads[name] = nn.Sequential(*hidden, head.out, head.out_act)
    return trunk, heads


def observations(member: Any, rows: int) -> torch.Tensor:
    space = member.observation_space
    frames = torch.randint(0, 256, (rows, *space.shape), dtype=torch.uint8)
    return member.obs_tensor(frames.numpy())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    member, manifest = member_of(args.manifest)
    network = member.networks[member.policy_network]
    if not hasattr(network.encoder, "convs") or not hasattr(manifest.algorithm, "update_epochs"):
        parser.error("the manifest must be an on-policy one (update_epochs) with a cnn encoder")
    batch = int(manifest.algorithm.batch_size)
    epochs = int(manifest.algorithm.update_epochs)
    obs = observations(member, batch)

    def forward() -> None:
        with torch.no_grad():
            network(obs[:1])

    def update() -> None:
        outputs = network(obs)
        sum(out.sum() for out in outputs.values()).backward()

    trunk, heads = plain_layers(network)
    images = obs.permute(0, 3, 1, 2) if network.encoder.channels_last else obs

    def plain() -> None:
        latent = trunk(images)
        sum(head(latent).sum() for head in heads.values()).backward()

    acting, learning = flops(forward), flops(update) / batch
    seconds = median_seconds(update, args.repeats)
    plain_seconds = median_seconds(plain, args.repeats)
    rate = learning * batch / seconds
    steps = int(manifest.training.max_steps)
    members = int(yaml.safe_load(args.manifest.read_text())["training"]["pop_size"])
    per_step = acting + epochs * learning
    floor = members * steps * per_step / rate
    print(f"{args.manifest}: {network.arch.describe()} on {tuple(member.observation_space.shape)}")
    print(f"  acting: {acting / 1e6:,.1f} MFLOP a step; learning: {learning / 1e6:,.1f} MFLOP "
          f"a sample a pass, x {epochs} epochs")  # fmt: skip
    print(f"  forward+backward on {batch}: {seconds * 1e3:,.1f} ms, {rate / 1e9:,.1f} GFLOP/s "
          f"({torch.get_num_threads()} threads)")  # fmt: skip
    print(f"  the same layers in plain torch: {plain_seconds * 1e3:,.1f} ms")
    print(f"  floor: {per_step / 1e9:,.2f} GFLOP an env step; {members} x {steps:,} steps: "
          f"{floor:,.1f} s, at most {members * steps / floor:,.0f} env steps/s")  # fmt: skip


if __name__ == "__main__":
    main()
