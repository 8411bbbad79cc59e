"""How close agile's batched DQN update is to the floor: milliseconds and GFLOP/s per update.

For each population size it builds the manifest's members (alike: one stacked group), fills a
replay buffer with random transitions and times, per gradient step of the whole group:

- ``agile``: the group learner's update (``DQNGroup.learn_batch``) on a batch already drawn;
- ``agile+sample``: the same with drawing each member's batch from the buffer
  (``learn_stacked``, what training calls);
- ``plain``: a plain stacked update of the same networks written here, with nothing but the
  arithmetic: ``baddbmm`` layers, layer norms, the double-Q Huber loss, one ``autograd.grad``,
  per-member gradient clipping, one ``foreach`` Adam step and a ``lerp`` soft update;
- ``plain+compile`` (with ``--compile``): the plain update's loss under ``torch.compile``.

GFLOP/s counts the matrix products of the update (forward on the batch, its backward, and the
two no-grad passes on the next observations: the target network and, double-Q, the online
network choosing the next action): what an update cannot do without.

    python benchmarks/update_floor.py configs/training/dqn/cartpole.yaml --populations 4 16 64

Times are medians over ``--repeats`` timings of ``--updates`` updates each, after a warm-up,
with ``--threads`` torch threads (1 by default: the shared 2-core machines). ``--device
cuda`` times on a GPU (synchronising before each clock read).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import yaml
from torch import nn

MAX_GRAD_NORM = 10.0  # DQN's
BETAS, EPS = (0.9, 0.999), 1e-8


# -- agile's update ---------------------------------------------------------------------------


def agile_population(manifest: Path, size: int, device: str) -> list[Any]:
    """``size`` fresh members of ``manifest`` on ``device``."""
    from agile_cli.manifest import TrainingManifest
    from agile_cli.testing import installed_host, tiny_population

    data = yaml.safe_load(manifest.read_text())
    data["training"]["pop_size"] = size
    validated = TrainingManifest.get_validated(data, registry=installed_host().registry)
    return tiny_population(validated, size=size, device=device)


def filled_buffer(member: Any, rows: int, device: str) -> Any:
    from agile_rl.runtime.buffers import ReplayBuffer

    rng = np.random.default_rng(0)
    space = member.observation_space
    buffer = ReplayBuffer(rows, space, member.action_space, gamma=0.99, device=device)
    obs = rng.normal(size=(rows, *space.shape)).astype(np.float32)
    next_obs = (obs + rng.normal(scale=0.1, size=obs.shape)).astype(np.float32)
    actions = rng.integers(member.action_space.n, size=rows)
    buffer.add(obs, actions, rng.normal(size=rows), next_obs, rng.random(rows) < 0.05)
    return buffer


def agile_steps(members: list[Any], buffer: Any) -> dict[str, Callable[[], Any]]:
    """Closures taking one gradient step of the whole group: on a drawn batch, and drawing."""
    from agile_rl.runtime.group import MemberGroup
    from agile_rl.training.batched import learn_stacked

    learner = type(members[0]).group_learner(MemberGroup(members))
    active = [True] * len(members)
    sizes = [int(m.spec.batch_size) for m in members]
    batch, rows = buffer.sample_stacked(sizes, [m.generator for m in members], None)
    mask = torch.tensor(active, device=rows.device)
    return {
        "agile": lambda: learner.learn_batch(batch, rows, mask),
        "agile+sample": lambda: learn_stacked(learner, buffer, active),
    }


# -- a plain stacked update of the same networks ------------------------------------------------


class PlainNetwork:
    """A member network's layers stacked over ``k`` members, as plain tensors."""

    def __init__(self, template: nn.Module, size: int, device: str) -> None:
        self.layers: list[tuple[torch.Tensor, torch.Tensor, Any, Any]] = []
        mlps = [template.encoder, *template.heads.values()]  # type: ignore[union-attr]
        for mlp in mlps:
            norms = list(getattr(mlp, "norms", []))
            for index, act in enumerate(mlp.acts):
                norm = norms[index] if index < len(norms) else None
                self._add(mlp.layers[index], norm, act, size, device)
            self._add(mlp.out, mlp.out_norm, mlp.out_act, size, device)

    def _add(self, linear: nn.Linear, norm: Any, act: Any, size: int, device: str) -> None:
        weight = linear.weight.detach().to(device).expand(size, -1, -1).clone()
        bias = linear.bias.detach().to(device).expand(size, -1).clone()
        affine = None
        if isinstance(norm, nn.LayerNorm):
            affine = () if norm.weight is None else tuple(
                p.detach().to(device).expand(size, -1).clone() for p in (norm.weight, norm.bias)
            )  # fmt: skip
        self.layers.append((weight, bias, affine, act))

    def parameters(self) -> list[torch.Tensor]:
        return [t for w, b, affine, _ in self.layers for t in (w, b, *(affine or ()))]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        for weight, bias, affine, act in self.layers:
            x = torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))
            if affine is not None:
                x = F.layer_norm(x, x.shape[-1:])
                if affine:
                    x = torch.addcmul(affine[1].unsqueeze(1), x, affine[0].unsqueeze(1))
            x = act(x)
        return x

    def flops_per_row(self) -> tuple[int, int]:
        """Matrix-product FLOPs per batch row: forward, and backward (no input gradient for
        the first layer)."""
        shapes = [weight.shape[1:] for weight, *_ in self.layers]
        forward = sum(2 * out * inp for out, inp in shapes)
        return forward, 2 * forward - 2 * shapes[0][0] * shapes[0][1]


def plain_step(members: list[Any], buffer: Any, device: str, compile_loss: bool) -> Any:
    """A closure taking one plain gradient step of the group; and the update's FLOPs."""
    size = len(members)
    template = members[0].networks["q"]
    online, target = PlainNetwork(template, size, device), PlainNetwork(template, size, device)
    params = online.parameters()
    for param in params:
        param.requires_grad_(True)
    optimizer = torch.optim.Adam(params, lr=5e-4, betas=BETAS, eps=EPS, foreach=True)
    batch_size = int(members[0].spec.batch_size)
    batch, _ = buffer.sample_stacked([batch_size] * size, [m.generator for m in members], None)
    obs, next_obs = batch.obs.float(), batch.next_obs.float()
    actions = batch.actions.long().unsqueeze(2)
    gamma, tau = 0.99, 0.005

    def loss_of(obs: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        q_taken = online(obs).gather(2, actions).squeeze(2)
        with torch.no_grad():
            choice = online(next_obs).argmax(dim=2, keepdim=True)
            next_value = target(next_obs).gather(2, choice).squeeze(2)
            td_target = batch.rewards + gamma * (1.0 - batch.terminated) * next_value
        return F.smooth_l1_loss(q_taken, td_target, reduction="none").mean(1).sum()

    loss_fn = torch.compile(loss_of) if compile_loss else loss_of

    def step() -> None:
        grads = torch.autograd.grad(loss_fn(obs, next_obs), params)
        norms = torch.stack([g.reshape(size, -1).pow(2).sum(1) for g in grads]).sum(0).sqrt()
        scale = (MAX_GRAD_NORM / (norms + 1e-6)).clamp(max=1.0)
        for param, grad in zip(params, grads, strict=True):
            param.grad = grad * scale.view(-1, *([1] * (grad.dim() - 1)))
        optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(target.parameters(), params, tau)

    forward, backward = online.flops_per_row()
    return step, size * batch_size * (3 * forward + backward)


# -- timing ---------------------------------------------------------------------------------------


def timed(step: Callable[[], Any], updates: int, repeats: int, device: str) -> float:
    """Median milliseconds per call of ``step`` over ``repeats`` timings of ``updates``."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(max(10, updates // 5)):
        step()
    sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(updates):
            step()
        sync()
        samples.append(1000 * (time.perf_counter() - start) / updates)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "manifest", type=Path, help="A DQN manifest (e.g. configs/training/dqn/cartpole.yaml)."
    )
    parser.add_argument("--populations", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--compile", action="store_true", help="Also time the plain loss compiled.")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{'pop':>4} {'update':<14} {'ms/update':>10} {'GFLOP/s':>8} {'x plain':>8}")
    for size in args.populations:
        members = agile_population(args.manifest, size, args.device)
        buffer = filled_buffer(members[0], 4096, args.device)
        plain, flops = plain_step(members, buffer, args.device, compile_loss=False)
        steps: dict[str, Callable[[], Any]] = {"plain": plain, **agile_steps(members, buffer)}
        if args.compile:
            steps["plain+compile"] = plain_step(members, buffer, args.device, True)[0]
        times = {name: timed(step, args.updates, args.repeats, args.device)
                 for name, step in steps.items()}  # fmt: skip
        for name, ms in times.items():
            rate = flops / (ms / 1000) / 1e9
            print(f"{size:>4} {name:<14} {ms:>10.2f} {rate:>8.2f} {ms / times['plain']:>8.2f}")


if __name__ == "__main__":
    main()
