"""Deep Q-Network.

Mnih et al., "Human-level control through deep reinforcement learning", Nature 2015; the
double-Q target of van Hasselt, Guez and Silver, "Deep Reinforcement Learning with Double
Q-learning", AAAI 2016.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from agile_dqn.spec import DQNSpec
from agile_rl import QLearning, QLearningGroup, Transitions, masked_mean

#: The gradient norm each update is clipped to.
MAX_GRAD_NORM = 10.0


class DQNGroup(QLearningGroup["DQN"]):
    """DQN's update, for a group of members (a member alone is a group of one): the Huber
    loss between the taken actions' Q-values and their TD targets, weighted by the
    importance weights, one clipped Adam step, then the target network follows by ``tau``."""

    def learn_batch(
        self, batch: Transitions, rows: torch.Tensor, active: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        _, q_taken, td_target = self.td_terms(batch)
        errors = F.smooth_l1_loss(q_taken, td_target, reduction="none")
        losses = masked_mean(batch.weights * errors, rows)
        self.group.gradient_step("q", losses, active, max_grad_norm=MAX_GRAD_NORM)
        self.group.soft_update([("target", "q")], self.group.hp("tau"), active)
        return losses.detach(), (q_taken - td_target).detach().abs() + 1e-6


class DQN(QLearning):
    """Q-learning with a neural network, a replay buffer and a slowly tracking target network.

    Exploration is epsilon-greedy: epsilon starts at ``training.eps_start`` and is multiplied by
    ``training.eps_decay`` after every vector step, down to ``training.eps_end``. With
    ``replay_buffer.n_step_buffer`` it bootstraps from n-step returns; with
    ``replay_buffer.per_buffer`` it learns from prioritised replay (Schaul et al., 2016),
    weighting the loss by importance weights whose exponent anneals from 0.4 to 1. The
    networks, acting and TD terms come from :class:`agile_rl.QLearning`; a batched
    population trains members of one architecture together; the update, written once for a
    group of members, is :class:`DQNGroup`'s.
    """

    spec: DQNSpec
    group_learner = DQNGroup
