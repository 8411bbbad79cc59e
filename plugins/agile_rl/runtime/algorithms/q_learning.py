"""The frame of deep Q-learning: Mnih et al., "Human-level control through deep reinforcement
learning", Nature 2015, with the double-Q target of van Hasselt, Guez and Silver, "Deep
Reinforcement Learning with Double Q-learning", AAAI 2016."""

from __future__ import annotations

from typing import Any, TypeVar, cast

import gymnasium as gym
import numpy as np
import torch

from agile_rl.runtime.agent import OffPolicyAlgorithm
from agile_rl.runtime.buffers import Transitions
from agile_rl.runtime.exported import GreedyPolicy, NetworkHead, greedy_action
from agile_rl.runtime.group import GroupLearner
from agile_rl.runtime.stacked import flat_rows, stacked_observations
from agile_rl.spec import EpsilonGreedyTraining


class QLearning(OffPolicyAlgorithm):
    """The frame of deep Q-learning over Discrete actions (DQN, CQN): an online Q-network
    ``q`` (the policy) and its target network ``target``, the epsilon schedule and checkpoint
    state; prioritised replay's exponent is the default of
    :meth:`~agile_rl.OffPolicyAlgorithm.importance_exponent`. Acting and the TD terms of an
    update are :class:`QLearningGroup`'s; a subclass names a ``group_learner`` deriving from it
    that adds the update. Its spec has the fields ``lr``, ``gamma``, ``tau`` and ``double``.

    Exploration is epsilon-greedy: epsilon starts at ``training.eps_start`` and is multiplied by
    ``training.eps_decay`` after every vector step, down to ``training.eps_end``. With
    ``replay_buffer.n_step_buffer`` the TD targets bootstrap from n-step returns.
    """

    spec: Any  # a spec with the fields lr, learn_step, gamma, tau and double
    policy_network = "q"

    def build(self) -> None:
        if not isinstance(self.action_space, gym.spaces.Discrete):
            raise NotImplementedError(
                f"{type(self).__name__} does not support {type(self.action_space).__name__} "
                "action spaces (it needs Discrete actions; DDPG, TD3 or PPO take Box actions)"
            )
        actions = int(self.action_space.n)
        online = self.add_network("q", {"q": actions})
        target = self.add_network("target", {"q": actions})
        target.load_state_dict(online.state_dict())
        target.requires_grad_(False)
        self.add_optimizer("q", ("q",), "lr")
        self.epsilon = self.schedule.eps_start

    def export_policy(self) -> GreedyPolicy:
        """The argmax of the online Q-network's values."""
        body = NetworkHead(self.networks["q"], "q")
        return GreedyPolicy(self.observation_space, body, greedy_action(self.action_space))

    def epsilon_greedy(self, greedy: np.ndarray) -> np.ndarray:
        """Epsilon-greedy choices among ``greedy`` actions (one per environment), drawn from
        the member's generator; epsilon then decays one step."""
        schedule = self.schedule
        random = np.asarray(self.rng.random(greedy.shape[0]) < self.epsilon)
        self.epsilon = max(schedule.eps_end, self.epsilon * schedule.eps_decay)
        if random.any():
            actions = int(cast(gym.spaces.Discrete, self.action_space).n)  # build checked it
            greedy[random] = self.rng.integers(0, actions, size=int(random.sum()))
        return greedy

    @property
    def schedule(self) -> EpsilonGreedyTraining:
        """The ``training`` section's epsilon schedule (which algorithms of this frame call for)."""
        return cast(EpsilonGreedyTraining, self.context.training)

    def extra_state(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.epsilon = state["epsilon"]


#: The members of a :class:`QLearningGroup`.
QLearningT = TypeVar("QLearningT", bound=QLearning, covariant=True)


class QLearningGroup(GroupLearner[QLearningT]):
    """Epsilon-greedy acting and the TD terms of :class:`QLearning`, for a group of members
    (each drawing its exploration from its own generator); a subclass adds
    :meth:`~agile_rl.GroupLearner.learn_batch`."""

    def act(self, obs: Any, *, explore: bool) -> np.ndarray:
        first = self.members[0]
        with torch.no_grad():
            stacked = stacked_observations(first.obs_tensor(obs), self.group.size)
            greedy = self.group.net("q")(stacked)["q"].argmax(dim=2).cpu().numpy()
        if not explore:
            return greedy.reshape(-1)
        rows = zip(self.members, greedy, strict=True)
        return np.concatenate([member.epsilon_greedy(row) for member, row in rows])

    def td_terms(self, batch: Transitions) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The online Q-values of every action ``[k, B, actions]``, those of the actions taken
        ``[k, B]``, and their TD targets ``[k, B]``: double-Q when ``double`` (the online
        network chooses the next action, the target network values it), with each member's
        ``gamma``, or the batch's n-step discounts when the buffer holds n-step returns."""
        online, target = self.group.net("q"), self.group.net("target")
        first = self.members[0]
        members = self.group.size
        obs = stacked_observations(first.obs_tensor(flat_rows(batch.obs)), members)
        next_obs = stacked_observations(first.obs_tensor(flat_rows(batch.next_obs)), members)
        q_values = online(obs)["q"]
        q_taken = q_values.gather(2, batch.actions.long().unsqueeze(2)).squeeze(2)
        with torch.no_grad():  # a pass of its own: backward then runs over obs's rows only
            next_q = target(next_obs)["q"]
            if first.spec.double:
                choice = online(next_obs)["q"].argmax(dim=2, keepdim=True)
                next_value = next_q.gather(2, choice).squeeze(2)
            else:
                next_value = next_q.max(dim=2).values
            gamma = self.group.hp("gamma").unsqueeze(1)
            discount = gamma if batch.discounts is None else batch.discounts
            td_target = batch.rewards + discount * (1.0 - batch.terminated) * next_value
        return q_values, q_taken, td_target
