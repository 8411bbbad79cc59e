"""Is agile's DQN update AgileRL 2.58's? The same weights, the same batches, both updates.

AgileRL's DQN (every default, CartPole's spaces) takes N gradient steps on N fixed random
batches of 64 transitions, in a subprocess of an interpreter that has agilerl 2.58.0; agile's
DQN member (``benchmarks/defaults/dqn_cartpole_reference.yaml``) starts from AgileRL's initial
weights (online and target) and takes the same N steps. The script prints both losses and, per
parameter, the largest difference between the two networks afterwards and how far each moved.

AgileRL takes the mean squared TD error without clipping; agile the Huber loss with its
gradient norm clipped at 10. ``--loss reference`` gives agile's update AgileRL's loss (the
update then agrees to float rounding); ``--loss agile`` keeps agile's own::

    python -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install agilerl==2.58.0
    .venv/bin/python benchmarks/dqn_update_check.py --python /tmp/refvenv/bin/python
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "benchmarks" / "defaults" / "dqn_cartpole_reference.yaml"

#: Run by the reference's interpreter: argv is (updates, output file).
REFERENCE_SIDE = """
import sys, numpy as np, torch, gymnasium as gym
from tensordict import TensorDict
from agilerl.algorithms.dqn import DQN
torch.manual_seed(0)
env = gym.make_vec("CartPole-v1", num_envs=8, vectorization_mode="sync")
agent = DQN(env.single_observation_space, env.single_action_space)
rng = np.random.default_rng(0)
size, updates = 64, int(sys.argv[1])
batches = [dict(obs=rng.normal(size=(size, 4)).astype(np.float32),
                next_obs=rng.normal(size=(size, 4)).astype(np.float32),
                action=rng.integers(0, 2, size=(size, 1)),
                reward=np.ones((size, 1), np.float32),
                done=(rng.random((size, 1)) < 0.05).astype(np.float32)) for _ in range(updates)]
online = {k: v.clone() for k, v in agent.actor.state_dict().items()}
target = {k: v.clone() for k, v in agent.actor_target.state_dict().items()}
losses = [agent.learn(TensorDict({k: torch.as_tensor(v) for k, v in b.items()},
                                 batch_size=[size])) for b in batches]
torch.save(dict(online=online, target=target, after=agent.actor.state_dict(),
                batches=batches, losses=losses), sys.argv[2])
"""

#: AgileRL's layer names -> agile's.
LAYERS = {
    "encoder_linear_layer_1": "encoder.layers.0", "encoder_layer_norm_1": "encoder.norms.0",
    "encoder_linear_layer_2": "encoder.layers.1", "encoder_layer_norm_2": "encoder.norms.1",
    "encoder_linear_layer_output": "encoder.out", "value_linear_layer_1": "heads.q.layers.0",
    "value_layer_norm_1": "heads.q.norms.0", "value_linear_layer_output": "heads.q.out",
}  # fmt: skip


def renamed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """AgileRL's QNetwork state dict under agile's parameter names."""
    out = {}
    for key, value in state.items():
        parts = key.split(".")
        layer = next(part for part in parts if part in LAYERS)
        out[f"{LAYERS[layer]}.{parts[-1]}"] = value
    return out


def reference_run(python: str, updates: int, folder: Path) -> dict[str, Any]:
    path = folder / "reference.pt"
    subprocess.run([python, "-c", REFERENCE_SIDE, str(updates), str(path)], check=True)
    return torch.load(path, weights_only=False)


def use_reference_loss() -> None:
    """agile's DQN update with AgileRL's loss: the squared TD error, no gradient clipping."""
    import agile_dqn.algorithm as dqn

    class SquaredError:
        @staticmethod
        def smooth_l1_loss(q: torch.Tensor, target: torch.Tensor, reduction: str) -> torch.Tensor:
            return (q - target) ** 2

    dqn.F = SquaredError  # this experiment's loss, in this process only
    dqn.MAX_GRAD_NORM = 0.0


def agile_run(reference: dict[str, Any]) -> tuple[Any, list[float]]:
    from agile_cli.manifest import TrainingManifest
    from agile_cli.testing import tiny_population
    from agile_rl import Transitions

    [member] = tiny_population(TrainingManifest.get_validated(MANIFEST), size=1)
    member.networks["q"].load_state_dict(renamed(reference["online"]))
    member.networks["target"].load_state_dict(renamed(reference["target"]))
    losses = []
    for batch in reference["batches"]:
        rows = len(batch["obs"])
        transitions = Transitions(
            obs=torch.as_tensor(batch["obs"]), actions=torch.as_tensor(batch["action"][:, 0]),
            rewards=torch.as_tensor(batch["reward"][:, 0]),
            next_obs=torch.as_tensor(batch["next_obs"]),
            terminated=torch.as_tensor(batch["done"][:, 0]), discounts=None,
            weights=torch.ones(rows), indices=torch.arange(rows),
        )  # fmt: skip
        losses.append(member.learn(transitions).loss)
    return member, losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="an interpreter with agilerl")
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--loss", choices=("reference", "agile"), default="reference")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        reference = reference_run(args.python, args.updates, Path(folder))
    if args.loss == "reference":
        use_reference_loss()
    member, losses = agile_run(reference)
    print(f"losses, first and last: AgileRL {reference['losses'][0]:.6f} "
          f"{reference['losses'][-1]:.6f}, agile {losses[0]:.6f} {losses[-1]:.6f}")  # fmt: skip
    start, after = renamed(reference["online"]), renamed(reference["after"])
    for name, value in member.networks["q"].state_dict().items():
        gap = (value - after[name]).abs().max().item()
        moved = (after[name] - start[name]).norm().item(), (value - start[name]).norm().item()
        print(f"{name:26s} largest difference {gap:.1e}   moved: AgileRL {moved[0]:.4e}, "
              f"agile {moved[1]:.4e}")  # fmt: skip


if __name__ == "__main__":
    main()
