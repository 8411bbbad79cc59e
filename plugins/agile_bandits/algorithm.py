"""NeuralUCB and NeuralTS: neural contextual bandits that explore along gradient features.

Zhou, Li and Gu, "Neural Contextual Bandits with UCB-based Exploration", ICML 2020;
Zhang, Zhou, Li and Gu, "Neural Thompson Sampling", ICLR 2021.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch.func import functional_call, jacrev

from agile_rl import (
    GreedyPolicy,
    GroupLearner,
    NetworkArch,
    NetworkHead,
    OffPolicyAlgorithm,
    Transitions,
    flat_rows,
    greedy_action,
    masked_mean,
    stacked_observations,
)

# Up to this many network parameters the inverse design matrix is kept whole; above, only its
# diagonal (the approximation the NeuralUCB paper uses in its experiments).
FULL_COVARIANCE_LIMIT = 2048


class NeuralBanditGroup(GroupLearner):
    """NeuralUCB's and NeuralTS's update for a group of members (a member alone is a group of
    one): the played arm's predicted reward regressed on its reward, plus ``reg`` times the
    squared weights. Acting stays each member's own (:meth:`NeuralUCB.act`): its exploration
    reads and updates its own inverse design matrix."""

    def act(self, obs: Any, *, explore: bool) -> np.ndarray:
        """Each member's arms for its own rows of ``obs`` (``[k * E, ...]``, member order)."""
        parts = np.split(np.asarray(obs), len(self.members))
        return np.concatenate(
            [m.act(part, explore=explore) for m, part in zip(self.members, parts, strict=True)]
        )

    def learn_batch(
        self, batch: Transitions, rows: torch.Tensor, active: torch.Tensor
    ) -> tuple[torch.Tensor, None]:
        first = self.members[0]
        x = stacked_observations(first.obs_tensor(flat_rows(batch.obs)), rows.shape[0])
        network = self.group.net("q")
        values = network(x)["value"]  # [k, B, arms]
        predicted = values.gather(-1, batch.actions.long().unsqueeze(-1)).squeeze(-1)
        decay = torch.stack([v.pow(2).flatten(1).sum(1) for v in network.views.values()]).sum(0)
        losses = masked_mean((predicted - batch.rewards) ** 2, rows) + self.group.hp("reg") * decay
        self.group.gradient_step("q", losses, active)
        return losses.detach(), None


class NeuralUCB(OffPolicyAlgorithm):
    """A network f(x) with one predicted reward per arm, fitted by regression on the rewards
    seen, and an upper confidence bound from its gradient features.

    For context x and arm a, g = d f(x)_a / d theta (every parameter, flattened). With the
    inverse design matrix A^-1 (lamb * I at first, plus g g^T for every arm played, kept by
    Sherman-Morrison), the arm played maximises f(x)_a + gamma * sqrt(g^T A^-1 g). Networks
    of more than ``FULL_COVARIANCE_LIMIT`` parameters keep only the diagonal of A.
    """

    policy_network = "q"
    group_learner = NeuralBanditGroup

    def build(self) -> None:
        if not isinstance(self.action_space, gym.spaces.Discrete):
            raise NotImplementedError(f"{type(self).__name__} plays Discrete arms only")
        self.add_network("q", {"value": int(self.action_space.n)})
        self.add_optimizer("q", ("q",), "lr")
        self.a_inv = self._initial_inverse(self._parameter_count())

    # -- acting ------------------------------------------------------------------------------

    def act(self, obs: Any, *, explore: bool) -> np.ndarray:
        if not explore:
            with torch.no_grad():
                values = self.networks["q"](self.obs_tensor(obs))["value"]
            return values.argmax(dim=1).cpu().numpy()
        values, features = self.gradient_features(obs)
        scores = self.explore_scores(values, self.uncertainty(features))
        arms = scores.argmax(dim=1)
        for row, arm in enumerate(arms.tolist()):
            self.update_inverse(features[row, arm])
        return arms.cpu().numpy()

    def export_policy(self) -> GreedyPolicy:
        """The arm of the highest predicted reward (no exploration bonus)."""
        body = NetworkHead(self.networks["q"], "value")
        return GreedyPolicy(self.observation_space, body, greedy_action(self.action_space))

    def explore_scores(self, values: torch.Tensor, variance: torch.Tensor) -> torch.Tensor:
        """The upper confidence bound of every arm."""
        return values + self.spec.gamma * variance.sqrt()

    def gradient_features(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Predicted rewards ``(batch, arms)`` and their gradients ``(batch, arms, params)``,
        every arm's gradient from one batched Jacobian."""
        network = self.networks["q"]
        params = {name: p.detach() for name, p in network.named_parameters()}
        x = self.obs_tensor(obs)

        def outputs(p: dict[str, torch.Tensor]) -> torch.Tensor:
            return functional_call(network, p, (x,))["value"]

        with torch.no_grad():
            values = outputs(params)
        jacobian = jacrev(outputs)(params)
        features = torch.cat([j.reshape(*values.shape, -1) for j in jacobian.values()], dim=-1)
        return values, features

    def uncertainty(self, features: torch.Tensor) -> torch.Tensor:
        """g^T A^-1 g for every gradient feature ``(..., params)``."""
        if self.a_inv.dim() == 1:
            return (features * features * self.a_inv).sum(-1)
        return torch.einsum("...p,pq,...q->...", features, self.a_inv, features)

    def update_inverse(self, g: torch.Tensor) -> None:
        """A <- A + g g^T, kept as its inverse (Sherman-Morrison; elementwise on a diagonal)."""
        if self.a_inv.dim() == 1:
            self.a_inv = 1.0 / (1.0 / self.a_inv + g * g)
            return
        a_g = self.a_inv @ g
        self.a_inv = self.a_inv - torch.outer(a_g, a_g) / (1.0 + g @ a_g)

    # -- evolution and checkpoints -------------------------------------------------------------

    def set_architecture(self, arch: NetworkArch) -> None:
        """Rebuild the network, and A^-1 for its parameters: entries between parameters that
        survive are kept, new parameters start at lamb on the diagonal of A."""
        old_shapes = self._parameter_shapes()
        old_inverse = self.a_inv
        super().set_architecture(arch)
        new_shapes = self._parameter_shapes()
        new_rows, old_rows = surviving_indices(old_shapes, new_shapes)
        inverse = self._initial_inverse(sum(int(np.prod(s)) for s in new_shapes.values()))
        new_index, old_index = torch.as_tensor(new_rows), torch.as_tensor(old_rows)
        if inverse.dim() == 1:
            kept = old_inverse if old_inverse.dim() == 1 else old_inverse.diagonal()
            inverse[new_index] = kept[old_index]
        elif old_inverse.dim() == 1:
            inverse[new_index, new_index] = old_inverse[old_index]
        else:
            inverse[new_index[:, None], new_index] = old_inverse[old_index[:, None], old_index]
        self.a_inv = inverse

    def extra_state(self) -> dict[str, Any]:
        return {"a_inv": self.a_inv.clone()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.a_inv = state["a_inv"].to(self.device)

    def _parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: tuple(p.shape) for name, p in self.networks["q"].named_parameters()}

    def _parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameter_list("q"))

    def _initial_inverse(self, size: int) -> torch.Tensor:
        if size > FULL_COVARIANCE_LIMIT:
            return torch.full((size,), 1.0 / self.spec.lamb, device=self.device)
        return torch.eye(size, device=self.device) / self.spec.lamb


class NeuralTS(NeuralUCB):
    """NeuralUCB's regression and gradient features, exploring by Thompson sampling: each
    arm's score is drawn from N(f(x)_a, gamma^2 g^T A^-1 g), and the best draw is played."""

    def explore_scores(self, values: torch.Tensor, variance: torch.Tensor) -> torch.Tensor:
        noise = torch.randn(values.shape, generator=self.generator).to(values.device)
        return values + self.spec.gamma * variance.sqrt() * noise


def surviving_indices(
    old: dict[str, tuple[int, ...]], new: dict[str, tuple[int, ...]]
) -> tuple[np.ndarray, np.ndarray]:
    """Flat positions of the parameter entries present in both layouts (same parameter name,
    same position within it), in the new and the old flattening."""
    new_parts, old_parts = [], []
    new_offset, old_offsets = 0, {}
    offset = 0
    for name, shape in old.items():
        old_offsets[name] = offset
        offset += int(np.prod(shape))
    for name, shape in new.items():
        if name in old and len(old[name]) == len(shape):
            common = tuple(slice(0, min(a, b)) for a, b in zip(old[name], shape, strict=True))
            new_parts.append(new_offset + np.arange(int(np.prod(shape))).reshape(shape)[common])
            old_grid = np.arange(int(np.prod(old[name]))).reshape(old[name])
            old_parts.append(old_offsets[name] + old_grid[common])
        new_offset += int(np.prod(shape))
    if not new_parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return (
        np.concatenate([p.ravel() for p in new_parts]),
        np.concatenate([p.ravel() for p in old_parts]),
    )
