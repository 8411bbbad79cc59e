"""Independent Proximal Policy Optimization.

de Witt et al., "Is Independent Learning All You Need in the StarCraft Multi-Agent
Challenge?", 2020: every agent runs PPO (Schulman et al., 2017) with generalised advantage
estimation (Schulman et al., ICLR 2016) on its own observations and rewards; agents alike
share their networks (Yu et al., "The Surprising Effectiveness of PPO in Cooperative
Multi-Agent Games", NeurIPS 2022 Datasets and Benchmarks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
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
    TeamOnPolicyGroupLearner,
    TeamPolicy,
    clipped_surrogate,
    greedy_action,
    masked_mean,
    normalised_advantages,
    preprocess,
    row_minibatches,
    run_epochs,
    stack_batches,
)

if TYPE_CHECKING:
    from agile_rl import TeamRollout

Observation = torch.Tensor | dict[str, torch.Tensor]


class IPPOGroup(TeamOnPolicyGroupLearner["IPPO"]):
    """IPPO's acting and update, written once for a group of teams (a team alone is a group
    of one). Tensors carry the members along their first dimension, then a group of agents'
    rows, agent after agent: ``[k, A * E, ...]``. Every member samples from its own
    generator, draws its own epoch permutations, takes minibatches of its own
    ``batch_size``, clips with its own ``clip_coef`` and ``max_grad_norm`` and stops at its
    own ``target_kl`` (:func:`agile_rl.run_epochs`)."""

    # -- acting --------------------------------------------------------------------------------

    def act(self, obs: Mapping[str, Any], *, explore: bool) -> dict[str, np.ndarray]:
        own = self._member_observations(obs)
        if explore:
            return self.policy_step(own)[0]
        actions: list[dict[str, np.ndarray]] = [{} for _ in self.members]
        with torch.no_grad():
            for group in self.members[0].groups:
                out = self._policy_out(group, _stacked(own, group))
                for member, taken, member_out in zip(self.members, actions, out, strict=True):
                    head = member.heads[group]
                    taken.update(member.split(group, head.to_env(head.greedy(member_out))))
        return _joined(actions)

    def _member_observations(self, obs: Mapping[str, Any]) -> list[dict[str, Observation]]:
        """Raw observations ``[k * E, ...]`` per agent as each member's ``obs_tensor``."""
        rows = _count(next(iter(obs.values()))) // self.group.size
        return [
            member.obs_tensor({agent: _slice(value, i * rows, (i + 1) * rows)
                               for agent, value in obs.items()})
            for i, member in enumerate(self.members)
        ]  # fmt: skip

    def policy_step(
        self, obs: Sequence[Mapping[str, Observation]]
    ) -> tuple[dict[str, np.ndarray], list[dict[str, PolicyRecord]]]:
        actions: list[dict[str, np.ndarray]] = [{} for _ in self.members]
        records: list[dict[str, PolicyRecord]] = [{} for _ in self.members]
        with torch.no_grad():
            for group in self.members[0].groups:
                stacked = _stacked(obs, group)
                out, values = self._policy_out(group, stacked), self._values(group, stacked)
                log_std = self._log_std(group)
                for row, member in enumerate(self.members):
                    head = member.heads[group]
                    own_std = None if log_std is None else log_std[row]
                    sampled, log_probs = head.sample(out[row], own_std, member.generator)
                    records[row][group] = PolicyRecord(sampled, log_probs, values[row])
                    actions[row].update(member.split(group, head.to_env(sampled)))
        return _joined(actions), records

    def _policy_out(self, group: str, obs: Observation) -> torch.Tensor:
        """The actor's output on a group's rows ``[k, R, ...]``, ``action_batch_size`` rows of
        each member at a time."""
        actor = self.group.net(f"actor.{group}")
        size = self.members[0].spec.action_batch_size
        rows = _length(obs)
        if size is None or rows <= size:
            return actor(obs)["policy"]
        parts = [actor(_columns(obs, slice(i, i + size)))["policy"] for i in range(0, rows, size)]
        return torch.cat(parts, dim=1)

    def _values(self, group: str, obs: Observation) -> torch.Tensor:
        return self.group.net(f"critic.{group}")(obs)["value"].squeeze(-1)

    def _log_std(self, group: str) -> torch.Tensor | None:
        """Each member's log standard deviation of a Box group, ``[k, width]``."""
        name = f"log_std.{group}"
        if name not in self.members[0].networks:
            return None
        return self.group.net(name).views["log_std"]

    # -- learning ------------------------------------------------------------------------------

    def learn_rollouts(
        self,
        rollouts: Sequence[TeamRollout | None],
        last_obs: Sequence[Mapping[str, Observation] | None],
    ) -> list[float | None]:
        """Group of agents after group: each learning member's valid rows with its own
        advantages, then its epochs of minibatches."""
        learning = [rollout is not None for rollout in rollouts]
        if not any(learning):
            return [None] * len(rollouts)
        present = next(obs for obs in last_obs if obs is not None)
        filled = [present if obs is None else obs for obs in last_obs]
        totals = torch.zeros(self.group.size, dtype=torch.float64, device=self.group.device)
        updates = torch.zeros_like(totals)
        for group in self.members[0].groups:
            with torch.no_grad():
                last_values = self._values(group, _stacked(filled, group))
            batches = [
                None if rollout is None
                else rollout.finish(group, values, member.spec.gamma, member.spec.gae_lambda)
                for member, rollout, values in zip(self.members, rollouts, last_values, strict=True)
            ]  # fmt: skip
            batch, counts = stack_batches(batches)
            epochs = [int(m.spec.update_epochs) if on else 0
                      for m, on in zip(self.members, learning, strict=True)]  # fmt: skip
            cut, update = row_minibatches(self, batch, counts), partial(self._update, group)
            group_totals, group_updates = run_epochs(self, epochs, cut, update)
            totals += group_totals
            updates += group_updates
        means = (totals / updates.clamp(min=1.0)).tolist()
        return [mean if on else None for mean, on in zip(means, learning, strict=True)]

    def _update(
        self, group: str, minibatch: tuple[RolloutBatch, torch.Tensor], active: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One clipped-objective gradient step of a group of agents for the active members on
        their minibatches ``[k, S]``: the clipped surrogate plus ``vf_coef`` times half the
        squared value error minus ``ent_coef`` times the entropy, advantages normalised per
        minibatch; returns each member's loss and approximate KL ``[k]``."""
        batch, rows = minibatch
        hp, head = self.group.hp, self.members[0].heads[group]
        out = self.group.net(f"actor.{group}")(batch.obs)["policy"]
        values = self._values(group, batch.obs)
        log_std = self._log_std(group)
        log_probs, entropy = head.evaluate(
            out, None if log_std is None else log_std.unsqueeze(1), batch.actions
        )
        advantages = normalised_advantages(batch.advantages, rows)
        policy_loss, approx_kl = clipped_surrogate(
            log_probs - batch.log_probs, advantages, hp("clip_coef"), rows
        )
        value_loss = 0.5 * masked_mean((values - batch.returns).pow(2), rows)
        entropy_bonus = hp("ent_coef") * masked_mean(entropy, rows)
        losses = policy_loss + hp("vf_coef") * value_loss - entropy_bonus
        self.group.gradient_step(group, losses, active, max_grad_norm=hp("max_grad_norm"))
        return losses.detach(), approx_kl


class IPPO(MultiAgentOnPolicyAlgorithm):
    """Independent clipped-objective actor-critics, one per group of alike agents.

    **Parameter sharing.** The agents of a group (``agent_0``, ``agent_1``, ... form group
    ``agent``) share one actor ``actor.<group>`` and one critic ``critic.<group>``, each reading
    one agent's observation; a Box group also has a log standard deviation
    ``log_std.<group>``. A group whose agents differ in observation or action space is split
    into one group per agent (``groups`` then names the agent), each with its own networks.
    Each group has one optimizer over its networks, following ``lr``.

    **Acting and learning** are written once, for a group of teams, in :class:`IPPOGroup` (a
    team alone runs it as a group of one). All agents of a group act in one forward pass of
    ``A * N`` rows (``A`` agents, ``N`` environments; ``action_batch_size`` caps the rows of
    one pass). Discrete, MultiDiscrete, MultiBinary and Box actions are sampled while
    training; evaluation takes the most likely action (the Gaussian's mean, clipped into the
    bounds, or squashed with ``network.squash_output``).

    **Learning.** Each agent's advantages come from its own rewards and episode ends (see the
    multi-agent on-policy runner for the rollout layout). Then, per group, ``update_epochs``
    passes over minibatches of ``batch_size`` samples (one agent's step each) minimise the
    clipped surrogate plus ``vf_coef`` times the value loss minus ``ent_coef`` times the
    entropy, with advantages normalised per minibatch; ``target_kl`` ends a group's passes
    early. Activation mutation is skipped, as in the reference implementation.
    """

    spec: IPPOSpec
    supports_activation_mutation = False
    group_learner = IPPOGroup
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
                name = f"log_std.{group}"
                self.networks[name] = log_std  # type: ignore[assignment]  # a plain nn.Module
                trained = (*trained, name)
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

    # -- acting (the group learner acts; these are each member's own part) ---------------------

    def obs_tensor(  # type: ignore[override]  # a team's, by group: the base's is one agent's
        self, obs: Mapping[str, Any]
    ) -> dict[str, Observation]:
        """Each group's observations, its agents' batches one after another: ``[A * N, ...]``."""
        tensors: dict[str, Observation] = {}
        for group, agents in self.groups.items():
            space = self.observation_spaces[agents[0]]
            if isinstance(space, spaces.Dict):
                parts = [preprocess(space, obs[agent], self.device) for agent in agents]
                entries = cast(list[dict[str, torch.Tensor]], parts)  # a Dict space's: dicts
                tensors[group] = {key: torch.cat([p[key] for p in entries]) for key in space}
            else:
                joined = np.concatenate([np.asarray(obs[agent]) for agent in agents])
                tensors[group] = preprocess(space, joined, self.device)
        return tensors

    def split(self, group: str, actions: np.ndarray) -> dict[str, np.ndarray]:
        """A group's ``[A * N, ...]`` actions by agent."""
        agents = self.groups[group]
        n = len(actions) // len(agents)
        return {agent: actions[i * n : (i + 1) * n] for i, agent in enumerate(agents)}

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

    def policy_step(  # type: ignore[override]  # a team's, by agent: the base's is one agent's
        self, obs: Mapping[str, Observation]
    ) -> tuple[dict[str, np.ndarray], dict[str, PolicyRecord]]:
        """Sampled actions by agent, and by group the record the rollout keeps: the group
        learner's, as a group of one."""
        actions, records = self._solo().policy_step([obs])
        return actions, records[0]

    def learn(  # type: ignore[override]  # a team's, by agent: the base's is one agent's
        self, rollout: TeamRollout, last_obs: Mapping[str, Observation]
    ) -> LearnResult:
        """The group learner's update, as a group of one."""
        [loss] = self._solo().learn_rollouts([rollout], [last_obs])
        return LearnResult(float(loss or 0.0))

    def _solo(self) -> IPPOGroup:
        learner = self.solo_learner()
        assert isinstance(learner, IPPOGroup)
        return learner


def _joined(actions: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Each member's actions by agent, joined in member order."""
    return {agent: np.concatenate([own[agent] for own in actions]) for agent in actions[0]}


def _stacked(obs: Sequence[Mapping[str, Observation]], group: str) -> Observation:
    """The members' observations of one group of agents, stacked: ``[k, A * E, ...]``."""
    parts = [own[group] for own in obs]
    first = parts[0]
    if isinstance(first, dict):  # then every member's is: their spaces are the same
        dicts = cast(list[dict[str, torch.Tensor]], parts)
        return {key: torch.stack([part[key] for part in dicts]) for key in first}
    return torch.stack(cast(list[torch.Tensor], parts))


def _count(value: Any) -> int:
    """Rows of raw observations (a dict's: its first entry's)."""
    return len(next(iter(value.values()))) if isinstance(value, dict) else len(value)


def _slice(value: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of raw observations (dicts entry by entry)."""
    if isinstance(value, dict):
        return {key: entry[start:stop] for key, entry in value.items()}
    return value[start:stop]


def _length(obs: Observation) -> int:
    """Rows per member of stacked observations ``[k, R, ...]``."""
    first = next(iter(obs.values())) if isinstance(obs, dict) else obs
    return int(first.shape[1])


def _columns(obs: Observation, rows: slice) -> Observation:
    """Some rows of every member's stacked observations."""
    if isinstance(obs, dict):
        return {key: value[:, rows] for key, value in obs.items()}
    return obs[:, rows]
