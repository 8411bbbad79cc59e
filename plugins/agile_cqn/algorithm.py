"""Conservative Q-Network.

Kumar, Zhou, Tucker and Levine, "Conservative Q-Learning for Offline Reinforcement Learning",
NeurIPS 2020 (the CQL(H) penalty on a discrete-action Q-network); the Q-network, target
network and double-Q target are DQN's (:class:`agile_cli.QLearning`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from gymnasium import spaces

from agile_cli import LearnResult, QLearning, Transitions
from agile_cqn.spec import CQNSpec


class CQN(QLearning):
    """DQN trained from a fixed dataset, with a penalty that keeps Q-values of actions the
    dataset never took from rising above those it did.

    The loss is the TD loss plus ``cql_alpha * mean(logsumexp_a Q(s, a) - Q(s, a_data))``.
    Acting is greedy (the dataset, not exploration, supplies the experience).
    """

    spec: CQNSpec

    def build(self) -> None:
        if not isinstance(self.action_space, spaces.Discrete):
            raise NotImplementedError(
                f"CQN needs Discrete actions, not {type(self.action_space).__name__}"
            )
        super().build()

    def learn(self, batch: Transitions) -> LearnResult:
        q_values, q_taken, td_target = self.td_terms(batch)
        td_loss = F.smooth_l1_loss(q_taken, td_target)
        loss = td_loss + self.spec.cql_alpha * conservative_penalty(q_values, q_taken)
        self.gradient_step("q", loss, max_grad_norm=10.0)
        self.soft_update([("target", "q")], self.spec.tau)
        return LearnResult(float(loss.detach()))


def conservative_penalty(q_values: torch.Tensor, q_taken: torch.Tensor) -> torch.Tensor:
    """CQL(H): the batch mean of ``logsumexp_a Q(s, a) - Q(s, a_data)``.

    :param q_values: ``[B, actions]`` Q-values of every action.
    :param q_taken: ``[B]`` Q-values of the actions in the dataset.
    """
    return (torch.logsumexp(q_values, dim=1) - q_taken).mean()
