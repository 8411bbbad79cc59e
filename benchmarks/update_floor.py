"""How close agile's batched updates are to the floor: milliseconds and GFLOP/s per update.

For each population size it builds the manifest's members (alike: one stacked group) and
times one gradient step of the whole group, on random data of the right shapes:

- ``agile``: the group learner's update: DQN's, TD3's or SAC's ``learn_batch`` on a batch
  already drawn from a replay buffer, or PPO's clipped-objective step on one minibatch;
- ``agile+compiled`` (with ``--compile``): the same with the group's forward passes compiled
  (``agile train --compile on``, see ``agile_rl.runtime.compiled``);
- ``agile+sample`` (DQN): the same with drawing each member's batch from the buffer
  (``learn_stacked``, what training calls);
- ``plain``: a plain stacked update of the same networks written here, with nothing but the
  arithmetic: ``baddbmm`` layers, layer norms, the loss (DQN: double-Q Huber; PPO: clipped
  surrogate, value error and entropy), one ``autograd.grad``, per-member gradient clipping,
  one ``foreach`` Adam step and, DQN, a ``lerp`` soft update;
- ``plain+compile`` (with ``--compile``): the plain update's loss under ``torch.compile``.

TD3 and SAC have no plain update written here: their rows compare with ``agile`` (the last
column is the ratio to ``plain`` where there is one, else to ``agile``).

GFLOP/s counts the update's matrix products (the forward pass on the batch and its backward;
DQN also the two no-grad passes on the next observations: the target network and, double-Q,
the online network choosing the next action; TD3 and SAC: see :func:`actor_critic_steps`):
what an update cannot do without.

    python benchmarks/update_floor.py configs/training/dqn/cartpole.yaml --populations 4 16 64
    python benchmarks/update_floor.py configs/training/ppo/cartpole.yaml --populations 4 16 64
    python benchmarks/update_floor.py configs/training/td3/halfcheetah.yaml --populations 4 16

Times are medians over ``--repeats`` timings of ``--updates`` updates each, after a warm-up,
with ``--threads`` torch threads (1 by default: the shared 2-core machines). ``--device
cuda`` times on a GPU (synchronising before each clock read).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import yaml
from torch import nn

DQN_MAX_GRAD_NORM = 10.0  # DQN's
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
    acts = member.action_space
    if hasattr(acts, "n"):
        actions = rng.integers(acts.n, size=rows)
    else:  # a Box: the agile members' actions are scaled to [-1, 1]
        actions = rng.uniform(-1.0, 1.0, size=(rows, *acts.shape)).astype(np.float32)
    buffer.add(obs, actions, rng.normal(size=rows), next_obs, rng.random(rows) < 0.05)
    return buffer


def agile_steps(
    members: list[Any], buffer: Any, compiled: bool = False
) -> dict[str, Callable[[], Any]]:
    """Closures taking one gradient step of the whole group: on a drawn batch, and drawing
    (``compiled``: the group's forward passes compiled, ``agile --compile on``)."""
    from agile_rl.runtime.group import MemberGroup
    from agile_rl.training.groups import learn_stacked

    learner = type(members[0]).group_learner(MemberGroup(members, compiled=compiled))
    active = [True] * len(members)
    sizes = [int(m.spec.batch_size) for m in members]
    batch, rows = buffer.sample_stacked(sizes, [m.generator for m in members], None)
    mask = torch.tensor(active, device=rows.device)
    if compiled:
        return {"agile+compiled": lambda: learner.learn_batch(batch, rows, mask)}
    return {
        "agile": lambda: learner.learn_batch(batch, rows, mask),
        "agile+sample": lambda: learn_stacked(learner, buffer, active),
    }


# -- a plain stacked update of the same networks ------------------------------------------------


class PlainNetwork:
    """A member network's layers stacked over ``k`` members, as plain tensors: its encoder,
    then each head on the encoder's output."""

    def __init__(self, template: nn.Module, size: int, device: str) -> None:
        self.size, self.device = size, device
        self.encoder = self._layers(template.encoder)  # type: ignore[union-attr]
        heads = template.heads.items()  # type: ignore[union-attr]
        self.heads = {name: self._layers(head) for name, head in heads}

    def _layers(self, mlp: Any) -> list[tuple[torch.Tensor, torch.Tensor, Any, Any]]:
        norms = list(getattr(mlp, "norms", []))
        layers = [
            self._layer(mlp.layers[i], norms[i] if i < len(norms) else None, act)
            for i, act in enumerate(mlp.acts)
        ]
        return [*layers, self._layer(mlp.out, mlp.out_norm, mlp.out_act)]

    def _layer(self, linear: nn.Linear, norm: Any, act: Any) -> tuple[Any, Any, Any, Any]:
        def stacked(p: torch.Tensor) -> torch.Tensor:
            return p.detach().to(self.device).expand(self.size, *p.shape).clone()

        affine = None
        if isinstance(norm, nn.LayerNorm):
            affine = () if norm.weight is None else (stacked(norm.weight), stacked(norm.bias))
        return stacked(linear.weight), stacked(linear.bias), affine, act

    def all_layers(self) -> list[tuple[Any, Any, Any, Any]]:
        return [*self.encoder, *(layer for head in self.heads.values() for layer in head)]

    def parameters(self) -> list[torch.Tensor]:
        return [t for w, b, affine, _ in self.all_layers() for t in (w, b, *(affine or ()))]

    def __call__(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        latent = _run(self.encoder, x)
        return {name: _run(layers, latent) for name, layers in self.heads.items()}

    def flops_per_row(self) -> tuple[int, int]:
        """Matrix-product FLOPs per batch row: forward, and backward (no input gradient for
        the first layer)."""
        shapes = [weight.shape[1:] for weight, *_ in self.all_layers()]
        forward = sum(2 * out * inp for out, inp in shapes)
        return forward, 2 * forward - 2 * shapes[0][0] * shapes[0][1]


def _run(layers: list[tuple[Any, Any, Any, Any]], x: torch.Tensor) -> torch.Tensor:
    for weight, bias, affine, act in layers:
        x = torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))
        if affine is not None:
            x = F.layer_norm(x, x.shape[-1:])
            if affine:
                x = torch.addcmul(affine[1].unsqueeze(1), x, affine[0].unsqueeze(1))
        x = act(x)
    return x


def clipped_step(
    params: list[torch.Tensor], loss: torch.Tensor, max_norm: float, optimizer: Any
) -> None:
    """One Adam step on ``loss`` (a sum over members), each member's gradient norm clipped."""
    size = params[0].shape[0]
    grads = torch.autograd.grad(loss, params)
    norms = torch.stack([g.reshape(size, -1).pow(2).sum(1) for g in grads]).sum(0).sqrt()
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for param, grad in zip(params, grads, strict=True):
        param.grad = grad * scale.view(-1, *([1] * (grad.dim() - 1)))
    optimizer.step()


def trained(network: PlainNetwork) -> tuple[list[torch.Tensor], Any]:
    params = network.parameters()
    for param in params:
        param.requires_grad_(True)
    return params, torch.optim.Adam(params, lr=5e-4, betas=BETAS, eps=EPS, foreach=True)


def plain_dqn_step(members: list[Any], buffer: Any, device: str, compile_loss: bool) -> Any:
    """A closure taking one plain DQN step of the group; and the update's FLOPs."""
    size = len(members)
    template = members[0].networks["q"]
    online, target = PlainNetwork(template, size, device), PlainNetwork(template, size, device)
    params, optimizer = trained(online)
    batch_size = int(members[0].spec.batch_size)
    batch, _ = buffer.sample_stacked([batch_size] * size, [m.generator for m in members], None)
    obs, next_obs = batch.obs.float(), batch.next_obs.float()
    actions = batch.actions.long().unsqueeze(2)
    gamma, tau = 0.99, 0.005

    def loss_of(obs: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        q_taken = online(obs)["q"].gather(2, actions).squeeze(2)
        with torch.no_grad():
            choice = online(next_obs)["q"].argmax(dim=2, keepdim=True)
            next_value = target(next_obs)["q"].gather(2, choice).squeeze(2)
            td_target = batch.rewards + gamma * (1.0 - batch.terminated) * next_value
        return F.smooth_l1_loss(q_taken, td_target, reduction="none").mean(1).sum()

    loss_fn = torch.compile(loss_of) if compile_loss else loss_of

    def step() -> None:
        clipped_step(params, loss_fn(obs, next_obs), DQN_MAX_GRAD_NORM, optimizer)
        with torch.no_grad():
            torch._foreach_lerp_(target.parameters(), params, tau)

    forward, backward = online.flops_per_row()
    return step, size * batch_size * (3 * forward + backward)


def dqn_steps(members: list[Any], device: str, compile_loss: bool) -> tuple[dict[str, Any], int]:
    buffer = filled_buffer(members[0], 4096, device)
    plain, flops = plain_dqn_step(members, buffer, device, compile_loss=False)
    steps = {"plain": plain, **agile_steps(members, buffer)}
    if compile_loss:
        steps.update(agile_steps(members, buffer, compiled=True))
        steps["plain+compile"] = plain_dqn_step(members, buffer, device, True)[0]
    return steps, flops


# -- PPO --------------------------------------------------------------------------------------


def ppo_minibatch(members: list[Any], device: str) -> tuple[Any, torch.Tensor]:
    """A random stacked minibatch ``[k, batch_size, ...]`` of rollout steps, all rows real."""
    from agile_rl.runtime.rollout import RolloutBatch

    size, rows = len(members), int(members[0].spec.batch_size)
    generator = torch.Generator().manual_seed(0)

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(size, rows, *shape, generator=generator).to(device)

    space = members[0].observation_space
    actions = torch.randint(members[0].action_space.n, (size, rows), generator=generator)
    batch = RolloutBatch(
        obs=normal(*space.shape), actions=actions.to(device),
        log_probs=normal().clamp(max=0.0) - 0.7, values=normal(), advantages=normal(),
        returns=normal(),
    )  # fmt: skip
    return batch, torch.ones(size, rows, device=device)


def plain_ppo_step(members: list[Any], device: str, compile_loss: bool) -> Any:
    """A closure taking one plain clipped-objective step of the group; and its FLOPs."""
    spec = members[0].spec
    network = PlainNetwork(members[0].networks[members[0].policy_network], len(members), device)
    params, optimizer = trained(network)
    batch, _ = ppo_minibatch(members, device)
    clip, vf, ent = float(spec.clip_coef), float(spec.vf_coef), float(spec.ent_coef)

    def loss_of(obs: torch.Tensor) -> torch.Tensor:
        out = network(obs)
        log_all = torch.log_softmax(out["policy"], dim=-1)
        log_prob = log_all.gather(2, batch.actions.unsqueeze(2)).squeeze(2)
        ratio = (log_prob - batch.log_probs).exp()
        adv = batch.advantages
        adv = (adv - adv.mean(1, keepdim=True)) / (adv.std(1, keepdim=True) + 1e-8)
        surrogate = -torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean(1)
        value = 0.5 * (out["value"].squeeze(2) - batch.returns).pow(2).mean(1)
        entropy = -(log_all.exp() * log_all).sum(2).mean(1)
        return (surrogate + vf * value - ent * entropy).sum()

    loss_fn = torch.compile(loss_of) if compile_loss else loss_of

    def step() -> None:
        clipped_step(params, loss_fn(batch.obs), float(spec.max_grad_norm), optimizer)

    forward, backward = network.flops_per_row()
    return step, len(members) * int(spec.batch_size) * (forward + backward)


def ppo_steps(members: list[Any], device: str, compile_loss: bool) -> tuple[dict[str, Any], int]:
    from agile_rl.runtime.group import MemberGroup

    learner = type(members[0]).group_learner(MemberGroup(members))
    minibatch = ppo_minibatch(members, device)
    active = torch.ones(len(members), dtype=torch.bool, device=device)
    plain, flops = plain_ppo_step(members, device, compile_loss=False)
    steps = {"plain": plain, "agile": lambda: learner._update(minibatch, active)}
    if compile_loss:
        compiled = type(members[0]).group_learner(MemberGroup(members, compiled=True))
        steps["agile+compiled"] = lambda: compiled._update(minibatch, active)
        steps["plain+compile"] = plain_ppo_step(members, device, True)[0]
    return steps, flops


# -- TD3 and SAC (agile's update only: no plain reference written for them) ----------------------


def actor_critic_steps(
    members: list[Any], device: str, compile_loss: bool
) -> tuple[dict[str, Any], int]:
    """TD3's or SAC's stacked update, eager (and compiled with ``--compile``), and its FLOPs:
    the twin critics' forward and backward, the target actor's and target critics' forward on
    the next observations, and every ``policy_freq``-th call the actor's forward and backward
    through one critic (TD3) or both (SAC), spread over the calls."""
    buffer = filled_buffer(members[0], 4096, device)
    steps = dict(list(agile_steps(members, buffer).items())[:1])
    if compile_loss:
        steps.update(agile_steps(members, buffer, compiled=True))
    networks = members[0].networks
    actor = PlainNetwork(networks["actor"], 1, device).flops_per_row()
    critic = PlainNetwork(networks["critic_1"], 1, device).flops_per_row()
    spec = members[0].spec
    critics_read = 2 if type(members[0]).__name__ == "SAC" else 1
    targets = actor[0] + 2 * critic[0]
    learning = 2 * (critic[0] + critic[1])
    policy = sum(actor) + critics_read * 2 * critic[0]  # through the critics, to the actions
    per_row = targets + learning + policy / int(spec.policy_freq)
    return steps, len(members) * int(spec.batch_size) * per_row


BUILDERS = {
    "DQN": dqn_steps,
    "PPO": ppo_steps,
    "TD3": actor_critic_steps,
    "SAC": actor_critic_steps,
}


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
        "manifest",
        type=Path,
        help="A DQN, PPO, TD3 or SAC manifest (e.g. configs/training/dqn/cartpole.yaml).",
    )
    parser.add_argument("--populations", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="Also time agile's update with compiled forward passes, and the plain loss compiled.",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{'pop':>4} {'update':<14} {'ms/update':>10} {'GFLOP/s':>8} {'x base':>8}")
    for size in args.populations:
        members = agile_population(args.manifest, size, args.device)
        name = type(members[0]).__name__
        if name not in BUILDERS:
            sys.exit(f"update_floor.py times DQN, PPO, TD3 and SAC manifests, not {name}")
        build = BUILDERS[name]
        steps, flops = build(members, args.device, args.compile)
        times = {name: timed(step, args.updates, args.repeats, args.device)
                 for name, step in steps.items()}  # fmt: skip
        baseline = times.get("plain", times["agile"])
        for name, ms in times.items():
            rate = flops / (ms / 1000) / 1e9
            print(f"{size:>4} {name:<14} {ms:>10.2f} {rate:>8.2f} {ms / baseline:>8.2f}")


if __name__ == "__main__":
    main()
