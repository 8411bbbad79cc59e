"""Proximal Policy Optimization.

Schulman et al., "Proximal Policy Optimization Algorithms", 2017, with generalised advantage
estimation (Schulman et al., "High-Dimensional Continuous Control Using Generalized Advantage
Estimation", ICLR 2016). Recurrent PPO keeps an LSTM's state per environment and trains on
sequences re-run from the state stored at their start, as in CleanRL's ``ppo_atari_lstm`` and
SB3-contrib's ``RecurrentPPO``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from agile_ppo.episodes import Episodes
from agile_ppo.group import PPOGroup
from agile_ppo.spec import PPOSpec
from agile_rl import (
    GreedyPolicy,
    LogStd,
    NetworkArch,
    NetworkHead,
    OnPolicyAlgorithm,
    RecurrentState,
    Rollout,
    RolloutBatch,
    SequenceBatch,
    greedy_action,
)


class PPO(OnPolicyAlgorithm):
    """Clipped-objective actor-critic for Discrete and Box action spaces.

    With ``recurrent`` the encoder is an LSTM (on images, after convolutions). The member keeps
    its hidden state for each environment it steps, forgets it where an episode starts
    (:meth:`reset_state`), and hands it to the rollout with every step; it learns on sequences
    of ``max_seq_len`` steps, each re-run from the state it started from while collecting, with
    the state reset at episode starts inside it, and a minibatch holds
    ``batch_size // max_seq_len`` of them. With ``max_seq_len: null`` the sequences are whole
    episodes instead, and a minibatch holds episodes while they fit in ``batch_size`` steps
    (:mod:`agile_ppo.episodes`).

    Acting, the policy step and the update are written once, for a group of members
    (:class:`~agile_ppo.group.PPOGroup`): a batched population trains members of one network
    layout together (recurrent ones too: their LSTMs stack, a smaller hidden state padded
    gate by gate, and each keeps its own state, sequences and minibatches; CNN-LSTMs do not
    stack), and a member alone runs the same code as a group of one.
    """

    spec: PPOSpec
    group_learner = PPOGroup
    supports_activation_mutation = False
    stores_pixel_bytes = True  # PPOGroup preprocesses its minibatches

    def build(self) -> None:
        self.continuous = isinstance(self.action_space, gym.spaces.Box)
        if isinstance(self.action_space, gym.spaces.Box):  # that is, self.continuous
            outputs = int(np.prod(self.action_space.shape))
        elif isinstance(self.action_space, gym.spaces.Discrete):
            outputs = int(self.action_space.n)
        else:
            raise NotImplementedError(f"PPO does not handle {type(self.action_space).__name__}")
        self.policy_network = "actor_critic" if self.spec.share_encoders else "actor"
        if self.spec.share_encoders:
            self.add_network("actor_critic", {"policy": outputs, "value": 1})
            trained: tuple[str, ...] = ("actor_critic",)
        else:
            self.add_network("actor", {"policy": outputs})
            self.add_network("critic", {"value": 1})
            trained = ("actor", "critic")
        self.recurrent = self.policy.recurrent
        if self.recurrent != self.spec.recurrent:
            raise ValueError(
                "recurrent PPO needs a recurrent encoder (lstm, cnn_lstm), and one needs it"
            )
        self._trunks = trained
        self._state: RecurrentState | None = None
        if self.continuous:
            log_std = LogStd(outputs, self.spec.action_std_init)
            self.networks["log_std"] = log_std  # type: ignore[assignment]  # a plain nn.Module
            trained = (*trained, "log_std")
        self.add_optimizer("policy", trained, "lr")

    # -- acting ----------------------------------------------------------------------------------

    def to_env(self, actions: torch.Tensor) -> np.ndarray:
        """Sampled actions as the environment takes them (continuous ones squashed or
        clipped into the action bounds)."""
        array = actions.cpu().numpy()
        space = self.action_space
        if not isinstance(space, gym.spaces.Box):  # that is, not self.continuous
            return array
        if getattr(self.context.network, "squash_output", False):
            array = np.tanh(array)
            return space.low + (array + 1.0) * 0.5 * (space.high - space.low)
        return np.clip(array, space.low, space.high)

    def export_policy(self) -> GreedyPolicy:
        """The most likely action: the argmax of the logits, or the Gaussian's mean clipped
        into the bounds (squashed into them with ``network.squash_output``).

        :raises NotImplementedError: for a recurrent policy, whose LSTM state is an input too.
        """
        if self.recurrent:
            raise NotImplementedError("a recurrent policy also carries its LSTM state")
        squash = bool(getattr(self.context.network, "squash_output", False))
        action = greedy_action(self.action_space, squash=squash)
        body = NetworkHead(self.policy, "policy")
        return GreedyPolicy(self.observation_space, body, action)

    # -- hidden state (recurrent) ------------------------------------------------------------------

    @property
    def hidden_state(self) -> RecurrentState | None:
        """The state the member acts from next, one column per environment: each network's
        ``(h, c)`` in turn; None until it first acts after a reset."""
        return self._state

    @hidden_state.setter
    def hidden_state(self, state: RecurrentState | None) -> None:
        self._state = state

    @property
    def trunks(self) -> tuple[str, ...]:
        """The networks that read observations (each with its own state, when recurrent)."""
        return self._trunks

    def reset_state(self, envs: np.ndarray | None = None) -> None:
        if envs is None or self._state is None:
            self._state = None
            return
        keep = torch.as_tensor(~envs, device=self.device).to(torch.float32).view(1, -1, 1)
        self._state = tuple(part * keep for part in self._state)

    def set_architecture(self, arch: NetworkArch) -> None:
        super().set_architecture(arch)
        self._state = None  # the hidden state's size may have changed

    def current_state(self, batch: int) -> RecurrentState:
        """The state to act from in ``batch`` environments (zeros for a new batch)."""
        if self._state is None or self._state[0].shape[1] != batch:
            self._state = tuple(
                part for name in self._trunks for part in self.networks[name].initial_state(batch)
            )
        return self._state

    # -- learning --------------------------------------------------------------------------------

    def minibatch_rows(
        self, batch: RolloutBatch | SequenceBatch | Episodes, size: int
    ) -> list[torch.Tensor]:
        """One epoch's minibatches: the rows (steps or sequences) of each, in an order drawn
        from the member's generator; episodes are grouped until ``size`` steps."""
        order = torch.randperm(len(batch), generator=self.generator).to(self.device)
        if isinstance(batch, Episodes):
            return batch.minibatches(order, size)
        return [order[start : start + size] for start in range(0, len(batch), size)]

    def sequences(
        self, rollout: Rollout, last_values: torch.Tensor
    ) -> tuple[SequenceBatch | Episodes, int]:
        """A recurrent member's rollout with advantages (``last_values``: the values after its
        last step), as sequences, and how many of them (steps, for whole episodes) a minibatch
        holds."""
        length = self.spec.max_seq_len
        gamma, gae_lambda = self.spec.gamma, self.spec.gae_lambda
        if length is None:  # whole episodes, from steps that keep the state each acted from
            steps = rollout.finish_sequences(last_values, gamma, gae_lambda, 1)
            return Episodes.of(steps, last_values.shape[0]), int(self.spec.batch_size)
        strides = {"chunked": length, "maximum": 1, "fifty_percent_overlap": max(1, length // 2)}
        stride = strides[self.spec.bptt_sequence_type]
        sequences = rollout.finish_sequences(last_values, gamma, gae_lambda, length, stride)
        return sequences, max(1, int(self.spec.batch_size) // length)
