"""Conservative Q-Network.

Kumar, Zhou, Tucker and Levine, "Conservative Q-Learning for Offline Reinforcement Learning",
NeurIPS 2020 (the CQL(H) penalty on a discrete-action Q-network); the Q-network, target
network and double-Q target are DQN's (:class:`agile_rl.QLearning`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from agile_cqn.spec import CQNSpec
from agile_rl import QLearning, QLearningGroup, Transitions, masked_mean

#: The gradient norm each update is clipped to.
MAX_GRAD_NORM = 10.0


class CQNGroup(QLearningGroup["CQN"]):
    """CQN's update, for a group of members (a member alone is a group of one)."""

    def learn_batch(
        self, batch: Transitions, rows: torch.Tensor, active: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        q_values, q_taken, td_target = self.td_terms(batch)
        td_losses = masked_mean(F.smooth_l1_loss(q_taken, td_target, reduction="none"), rows)
        penalties = conservative_penalty(q_values, q_taken, rows)
        losses = td_losses + self.group.hp("cql_alpha") * penalties
        self.group.gradient_step("q", losses, active, max_grad_norm=MAX_GRAD_NORM)
        self.group.soft_update([("target", "q")], self.group.hp("tau"), active)
        return losses.detach(), None


class CQN(QLearning):
    """DQN trained from a fixed dataset, with a penalty that keeps Q-values of actions the
    dataset never took from rising above those it did.

    The loss is the TD loss plus ``cql_alpha * mean(logsumexp_a Q(s, a) - Q(s, a_data))``.
    Acting is greedy (the dataset, not exploration, supplies the experience).
    """

    spec: CQNSpec
    group_learner = CQNGroup


def conservative_penalty(
    q_values: torch.Tensor, q_taken: torch.Tensor, rows: torch.Tensor
) -> torch.Tensor:
    """CQL(H): each member's batch mean of ``logsumexp_a Q(s, a) - Q(s, a_data)``, ``[k]``.

    :param q_values: ``[k, B, actions]`` Q-values of every action.
    :param q_taken: ``[k, B]`` Q-values of the actions in the dataset.
    :param rows: ``[k, B]``, 1 where the row is the member's.
    """
    return masked_mean(torch.logsumexp(q_values, dim=2) - q_taken, rows)
