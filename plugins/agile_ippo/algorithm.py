"""Independent Proximal Policy Optimization.

de Witt et al., "Is Independent Learning All You Need in the StarCraft Multi-Agent
Challenge?", 2020: every agent runs PPO (Schulman et al., 2017) with generalised advantage
estimation (Schulman et al., ICLR 2016) on its own observations and rewards; agents alike
share their networks (Yu et al., "The Surprising Effectiveness of PPO in Cooperative
Multi-Agent Games", NeurIPS 2022 Datasets and Benchmarks).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from gymnasium import spaces

from agile_ippo.distributions import ActionHead, action_head
from agile_ippo.spec import IPPOSpec
from agile_rl import (
    GreedyPolicy,
    LearnResult,
    LogStd,
    MultiAgentOnPolicyAlgorithm,
    NetworkHead,
    PolicyRecord,
    RolloutBatch,
    TeamPolicy,
    greedy_action,
    preprocess,
)

if TYPE_CHECKING:
    from agile_rl import TeamRollout

Observation = torch.Tensor | dict[str, torch.Tensor]


class IPPO(MultiAgentOnPolicyAlgorithm):
    """Independent clipped-objective actor-critics, one per group of alike agents.

    **Parameter sharing.** The agents of a group (``agent_0``, ``agent_1``, ... form group
    ``agent``) share one actor ``actor.<group>`` and one critic ``critic.<group>``, each reading
    one agent's observation; a Box group also has a log standard deviation
    ``log_std.<group>``. A group whose agents differ in observation or action space is split
    into one group per agent (``groups`` then names the agent), each with its own networks.
    Each group has one optimizer over its networks, following ``lr``.

    **Acting.** All agents of a group act in one forward pass of ``A * N`` rows (``A`` agents,
    ``N`` environments; ``action_batch_size`` caps the rows of one pass). Discrete,
    MultiDiscrete, MultiBinary and Box actions are sampled while training; evaluation takes
    the most likely action (the Gaussian's mean, clipped into the bounds, or squashed with
    ``network.squash_output``).

    **Learning.** Each agent's advantages come from its own rewards and episode ends (see the
    multi-agent on-policy runner for the rollout layout). Then, per group, ``update_epochs``
    passes over minibatches of ``batch_size`` samples (one agent's step each) minimise the
    clipped surrogate plus ``vf_coef`` times the value loss minus ``ent_coef`` times the
    entropy, with advantages normalised per minibatch; ``target_kl`` ends a group's passes
    early. Activation mutation is skipped, as in the reference implementation.
    """

    spec: IPPOSpec
    supports_activation_mutation = False
    policy_role = "actor"  # parameter mutation perturbs every actor.<group>

    def build(self) -> None:
        self.groups = self._sharing_groups()
        self.policy_network = f"actor.{next(iter(self.groups))}"
        squash = bool(getattr(self.context.network, "squash_output", False))
        self.heads: dict[str, ActionHead] = {}
        for group, agents in self.groups.items():
            head = self.heads[group] = action_head(self.action_spaces[agents[0]], squash=squash)
            observed = self.observation_spaces[agents[0]]
            self.add_network(f"actor.{group}", {"policy": head.width}, observation_space=observed)
            self.add_network(f"critic.{group}", {"value": 1}, observation_space=observed)
            trained: tuple[str, ...] = (f"actor.{group}", f"critic.{group}")
            if isinstance(head.space, spaces.Box):
                log_std = LogStd(head.width, self.spec.action_std_init).to(self.device)
                self.networks[f"log_std.{group}"] = log_std  # type: ignore[assignment]
                trained = (*trained, f"log_std.{group}")
            self.add_optimizer(group, trained, "lr")

    def _sharing_groups(self) -> dict[str, list[str]]:
        """The groups of agents that share networks: each name group whose agents are alike,
        and one group per agent of a name group whose agents differ."""
        groups: dict[str, list[str]] = {}
        for group, agents in self.groups.items():
            first = agents[0]
            alike = all(
                self.observation_spaces[agent] == self.observation_spaces[first]
                and self.action_spaces[agent] == self.action_spaces[first]
                for agent in agents
            )
            groups.update({group: agents} if alike else {agent: [agent] for agent in agents})
        return groups

    # -- acting ----------------------------------------------------------------------------------

    def obs_tensor(self, obs: Mapping[str, Any]) -> dict[str, Observation]:  # type: ignore[override]
        """Each group's observations, its agents' batches one after another: ``[A * N, ...]``."""
        tensors: dict[str, Observation] = {}
        for group, agents in self.groups.items():
            space = self.observation_spaces[agents[0]]
            if isinstance(space, spaces.Dict):
                parts = [preprocess(space, obs[agent], self.device) for agent in agents]
                tensors[group] = {key: torch.cat([p[key] for p in parts]) for key in space}  # type: ignore[index]
            else:
                joined = np.concatenate([np.asarray(obs[agent]) for agent in agents])
                tensors[group] = preprocess(space, joined, self.device)
        return tensors

    def _policy_out(self, group: str, obs: Observation) -> torch.Tensor:
        """The actor's output on a group's rows, ``action_batch_size`` rows at a time."""
        actor = self.networks[f"actor.{group}"]
        size = self.spec.action_batch_size
        rows = _length(obs)
        if size is None or rows <= size:
            return actor(obs)["policy"]
        return torch.cat([actor(_rows(obs, slice(i, i + size)))["policy"]
                          for i in range(0, rows, size)])  # fmt: skip

    def _values(self, group: str, obs: Observation) -> torch.Tensor:
        return self.networks[f"critic.{group}"](obs)["value"].squeeze(-1)

    def _log_std(self, group: str) -> torch.Tensor | None:
        module = self.networks.get(f"log_std.{group}")
        return None if module is None else cast(LogStd, module).log_std

    def _split(self, group: str, actions: np.ndarray) -> dict[str, np.ndarray]:
        """A group's ``[A * N, ...]`` actions by agent."""
        agents = self.groups[group]
        n = len(actions) // len(agents)
        return {agent: actions[i * n : (i + 1) * n] for i, agent in enumerate(agents)}

    def act(self, obs: Mapping[str, Any], *, explore: bool) -> dict[str, np.ndarray]:  # type: ignore[override]
        if explore:
            return self.policy_step(self.obs_tensor(obs))[0]
        actions: dict[str, np.ndarray] = {}
        with torch.no_grad():
            for group, group_obs in self.obs_tensor(obs).items():
                head = self.heads[group]
                greedy = head.greedy(self._policy_out(group, group_obs))
                actions.update(self._split(group, head.to_env(greedy)))
        return actions

    def export_policy(self) -> TeamPolicy:
        """Each agent's most likely action from its group's actor (see :meth:`act`)."""
        squash = bool(getattr(self.context.network, "squash_output", False))
        policies = {}
        for group, agents in self.groups.items():
            body = NetworkHead(self.networks[f"actor.{group}"], "policy")
            for agent in agents:
                action = greedy_action(self.action_spaces[agent], squash=squash)
                policies[agent] = GreedyPolicy(self.observation_spaces[agent], body, action)
        return TeamPolicy({agent: policies[agent] for agent in self.agents})

    def policy_step(  # type: ignore[override]
        self, obs: Mapping[str, Observation]
    ) -> tuple[dict[str, np.ndarray], dict[str, PolicyRecord]]:
        """Sampled actions by agent, and by group the record the rollout keeps."""
        actions: dict[str, np.ndarray] = {}
        records: dict[str, PolicyRecord] = {}
        with torch.no_grad():
            for group, group_obs in obs.items():
                head = self.heads[group]
                out = self._policy_out(group, group_obs)
                sampled, log_probs = head.sample(out, self._log_std(group), self.generator)
                records[group] = PolicyRecord(sampled, log_probs, self._values(group, group_obs))
                actions.update(self._split(group, head.to_env(sampled)))
        return actions, records

    # -- learning --------------------------------------------------------------------------------

    def learn(self, rollout: TeamRollout, last_obs: Mapping[str, Observation]) -> LearnResult:  # type: ignore[override]
        losses: list[float] = []
        for group in self.groups:
            with torch.no_grad():
                last_values = self._values(group, last_obs[group])
            batch = rollout.finish(group, last_values, self.spec.gamma, self.spec.gae_lambda)
            losses += self._learn_group(group, batch)
        return LearnResult(float(np.mean(losses)) if losses else 0.0)

    def _learn_group(self, group: str, batch: RolloutBatch) -> list[float]:
        """``update_epochs`` passes over one group's samples; the loss of each minibatch."""
        size = int(self.spec.batch_size)
        losses = []
        for _ in range(int(self.spec.update_epochs)):
            order = torch.randperm(len(batch), generator=self.generator).to(self.device)
            approx_kl = 0.0
            for start in range(0, len(batch), size):
                minibatch = RolloutBatch(*(_rows(f, order[start : start + size]) for f in batch))
                loss, approx_kl = self._update(group, minibatch)
                losses.append(loss)
            if self.spec.target_kl is not None and approx_kl > self.spec.target_kl:
                break
        return losses

    def _update(self, group: str, batch: RolloutBatch) -> tuple[float, float]:
        """One clipped-objective gradient step of a group on a minibatch; returns its loss and
        approximate KL divergence from the policy that collected it."""
        out = self.networks[f"actor.{group}"](batch.obs)["policy"]
        values = self._values(group, batch.obs)
        log_probs, entropy = self.heads[group].evaluate(out, self._log_std(group), batch.actions)
        log_ratio = log_probs - batch.log_probs
        ratio = log_ratio.exp()
        advantages = batch.advantages
        if advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        clip = float(self.spec.clip_coef)
        policy_loss = -torch.min(
            ratio * advantages, ratio.clamp(1.0 - clip, 1.0 + clip) * advantages
        ).mean()
        value_loss = 0.5 * (values - batch.returns).pow(2).mean()
        loss = policy_loss + self.spec.vf_coef * value_loss - self.spec.ent_coef * entropy.mean()
        self.gradient_step(group, loss, max_grad_norm=self.spec.max_grad_norm)
        with torch.no_grad():
            approx_kl = float(((ratio - 1.0) - log_ratio).mean())  # Schulman's k3 estimator
        return float(loss.detach()), approx_kl


def _length(obs: Observation) -> int:
    first = next(iter(obs.values())) if isinstance(obs, dict) else obs
    return int(first.shape[0])


def _rows(field: Any, rows: torch.Tensor | slice) -> Any:
    if isinstance(field, dict):
        return {key: value[rows] for key, value in field.items()}
    return field[rows]
