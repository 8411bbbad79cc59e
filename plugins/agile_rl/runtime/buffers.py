"""Replay memory shared by a population of off-policy agents.

:class:`ReplayBuffer` samples uniformly, :class:`PrioritizedReplayBuffer` in proportion to
priorities (Schaul et al., 2016), and :class:`NStepAccumulator` turns 1-step transitions from a
vector environment into n-step ones (Sutton & Barto, 2018, ch. 7) before they are added.

Storage is preallocated torch tensors, so sampling only gathers rows. Observations keep a
compact dtype: uint8 images stay uint8, other boxes become float32, Discrete observations are
int64 indices, and Dict observations are stored key by key. ``next_obs`` is stored explicitly
next to ``obs`` rather than derived from the following slot: it doubles observation memory, but
stays correct across vector-env autoresets, masked rows and several envs writing interleaved
rows, with no bookkeeping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, TypeAlias, cast

import numpy as np
import torch
from gymnasium import spaces

from agile_cli import UsageError

Stored: TypeAlias = torch.Tensor | dict[str, torch.Tensor]
ArrayObs: TypeAlias = np.ndarray | Mapping[str, np.ndarray]

_COLUMNS = ("obs", "actions", "rewards", "next_obs", "terminated", "discounts")


class Transitions(NamedTuple):
    """A sampled batch, batch dimension first, on the buffer's device.

    Observations come in their stored dtype (uint8 images, int64 Discrete indices, float32
    otherwise); ``obs_tensor`` makes them network input (see
    :func:`~agile_rl.runtime.stacked.stacked_observations` for stacked batches). ``rewards``
    are n-step returns for n-step transitions, ``terminated`` is 1.0 where the episode really
    ended, ``weights`` are importance weights (ones unless prioritised) and ``indices`` the
    slots drawn, for priority updates.

    ``discounts`` multiplies the bootstrap value when the buffer holds n-step returns
    (``gamma**k`` for a k-step transition, ``gamma`` the manifest's); it is None for a buffer of
    one-step transitions, where the algorithm discounts with its own, possibly mutated, gamma.
    """

    obs: torch.Tensor | dict[str, torch.Tensor]
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor | dict[str, torch.Tensor]
    terminated: torch.Tensor
    discounts: torch.Tensor | None
    weights: torch.Tensor
    indices: torch.Tensor
    #: The first step of each n-step transition, where the buffer keeps it (:class:`FirstSteps`):
    #: its reward, next observation and termination; None otherwise.
    step_rewards: torch.Tensor | None = None
    step_next_obs: torch.Tensor | dict[str, torch.Tensor] | None = None
    step_terminated: torch.Tensor | None = None


class FirstSteps(NamedTuple):
    """The one-step transition each n-step transition starts with (what RainbowDQN's
    ``combined_reward`` learns from besides the n-step return), batch dimension first."""

    rewards: np.ndarray
    next_obs: np.ndarray | dict[str, np.ndarray]
    terminated: np.ndarray


class NStepBatch(NamedTuple):
    """n-step transitions leaving an :class:`NStepAccumulator`, batch dimension first, and the
    one-step transition each starts with."""

    obs: np.ndarray | dict[str, np.ndarray]
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray | dict[str, np.ndarray]
    terminated: np.ndarray
    discounts: np.ndarray
    first: FirstSteps


def _layout(space: spaces.Space) -> tuple[torch.dtype, tuple[int, ...]]:
    """Storage dtype and per-row shape of one (non-Dict) space."""
    if isinstance(space, spaces.Discrete):
        return torch.int64, ()
    if isinstance(space, spaces.MultiDiscrete):
        return torch.int64, tuple(space.shape)
    if isinstance(space, spaces.MultiBinary):
        return torch.float32, tuple(space.shape)
    if isinstance(space, spaces.Box):
        dtype = torch.uint8 if space.dtype == np.uint8 else torch.float32
        return dtype, tuple(space.shape)
    raise UsageError(
        f"the replay buffer cannot store a {type(space).__name__} space",
        "use Box, Discrete, MultiDiscrete, MultiBinary or a Dict of those; "
        "gymnasium.wrappers.FlattenObservation flattens the others",
    )


def _allocate(space: spaces.Space, capacity: int, device: torch.device) -> Stored:
    """Zeroed storage for ``capacity`` rows of ``space``, one tensor per key for Dict spaces."""
    if isinstance(space, spaces.Dict):
        return {key: _allocate_one(sub, capacity, device) for key, sub in space.spaces.items()}
    return _allocate_one(space, capacity, device)


def _allocate_one(space: spaces.Space, capacity: int, device: torch.device) -> torch.Tensor:
    dtype, shape = _layout(space)
    return torch.zeros((capacity, *shape), dtype=dtype, device=device)


def _take(value: Any, rows: np.ndarray | None) -> Any:
    """The selected rows of an array or of every array of a dict (all rows for ``None``)."""
    if rows is None:
        return value
    if isinstance(value, Mapping):
        return {key: np.asarray(array)[rows] for key, array in value.items()}
    return np.asarray(value)[rows]


def _write(store: Stored, start: int, value: Any) -> None:
    """Copy rows into a ring of storage from slot ``start``, wrapping around at the end."""
    if isinstance(store, dict):
        for key, tensor in store.items():
            _write_tensor(tensor, start, value[key])
    else:
        _write_tensor(store, start, value)


def _write_tensor(tensor: torch.Tensor, start: int, value: Any) -> None:
    data = torch.from_numpy(np.ascontiguousarray(value).reshape(-1, *tensor.shape[1:]))
    count = data.shape[0]
    first = min(count, tensor.shape[0] - start)
    tensor[start : start + first] = data[:first]
    if first < count:
        tensor[: count - first] = data[first:]


def _gather(store: Stored, index: torch.Tensor) -> Stored:
    if isinstance(store, dict):
        return {key: tensor.index_select(0, index) for key, tensor in store.items()}
    return store.index_select(0, index)


def _unflatten(field: Any, members: int) -> Any:
    """A gathered field ``[k * B, ...]`` as ``[k, B, ...]`` (dicts key by key; None stays)."""
    if field is None:
        return None
    if isinstance(field, dict):
        return {key: _unflatten(value, members) for key, value in field.items()}
    return field.reshape(members, -1, *field.shape[1:])


def _on_cpu(store: Stored) -> Stored:
    if isinstance(store, dict):
        return {key: tensor.cpu() for key, tensor in store.items()}
    return store.cpu()


def _last_rows(store: Any, count: int) -> Any:
    """The last ``count`` rows of a column (of each tensor of a dict column)."""
    if isinstance(store, Mapping):
        return {key: tensor[-count:] for key, tensor in store.items()}
    return store[-count:]


def _snapshot(store: Stored, size: int) -> Stored:
    if isinstance(store, dict):
        return {key: tensor[:size].clone() for key, tensor in store.items()}
    return store[:size].clone()


def _check_fits(store: Stored, saved: Any, name: str) -> None:
    """Refuse saved rows made for another space or dtype."""
    if isinstance(store, dict):
        if not isinstance(saved, Mapping) or set(saved) != set(store):
            raise _mismatch(f"{name} keys")
        for key, tensor in store.items():
            _check_fits(tensor, saved[key], f"{name}.{key}")
    elif not isinstance(saved, torch.Tensor) or saved.shape[1:] != store.shape[1:]:
        raise _mismatch(f"{name} shape")
    elif saved.dtype != store.dtype:
        raise _mismatch(f"{name} dtype")


def _saved(columns: Mapping[str, Any], name: str) -> Any:
    """Column ``name`` of saved rows, which a buffer that keeps fewer columns lacks."""
    if name not in columns:
        raise _mismatch(f"the {name} column and the columns kept")
    return columns[name]


def _restore(store: Stored, saved: Any) -> None:
    if isinstance(store, dict):
        for key, tensor in store.items():
            tensor[: saved[key].shape[0]] = saved[key]
    else:
        store[: saved.shape[0]] = saved


def _mismatch(what: str) -> UsageError:
    return UsageError(
        f"the saved replay buffer does not fit this one ({what} differ)",
        "resume with the environment and replay_buffer settings the checkpoint was made with",
    )


def _kept_rows(count: int, mask: np.ndarray | None, capacity: int) -> np.ndarray | None:
    """Indices of the rows to store (``None`` for all): masked-in rows, at most the last
    ``capacity`` of them, since older ones would be overwritten within the same batch."""
    mask = None if mask is None else np.asarray(mask, dtype=bool)
    rows = None if mask is None or mask.all() else np.flatnonzero(mask)
    kept = count if rows is None else rows.size
    if kept <= capacity:
        return rows
    return (np.arange(count) if rows is None else rows)[-capacity:]


class ReplayBuffer:
    """A ring buffer of transitions, sampled uniformly with replacement.

    :param capacity: transitions kept; when full, each new one overwrites the oldest.
    :param observation_space: space of one environment's observations (not the vector env's).
    :param action_space: space of one environment's actions.
    :param gamma: discount stored with transitions added without explicit ``discounts`` to a
        buffer that holds n-step returns.
    :param device: where the storage lives and sampled batches are returned.
    :param first_steps: also keep the one-step transition each n-step row starts with
        (:class:`FirstSteps`, given to every :meth:`add`); sampled batches then carry it.

    The buffer holds n-step returns once rows were added with explicit ``discounts``; then
    sampled batches carry ``discounts``, otherwise it is None.
    """

    def __init__(
        self,
        capacity: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        *,
        gamma: float,
        device: str | torch.device = "cpu",
        first_steps: bool = False,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.gamma = gamma
        self.device = torch.device(device)
        self._obs = _allocate(observation_space, capacity, self.device)
        self._next_obs = _allocate(observation_space, capacity, self.device)
        # Stored: the multi-agent buffer keeps these per agent.
        self._actions: Stored = _allocate_one(action_space, capacity, self.device)
        self._rewards: Stored = torch.zeros(capacity, dtype=torch.float32, device=self.device)
        self._terminated: Stored = torch.zeros(capacity, dtype=torch.float32, device=self.device)
        self._discounts = torch.zeros(capacity, dtype=torch.float32, device=self.device)
        self._first: dict[str, Stored] = {}
        if first_steps:
            self._first = {
                "step_rewards": torch.zeros(capacity, dtype=torch.float32, device=self.device),
                "step_next_obs": _allocate(observation_space, capacity, self.device),
                "step_terminated": torch.zeros(capacity, dtype=torch.float32, device=self.device),
            }
        self.n_step = False
        self._position = 0
        self._size = 0
        #: Rows ever stored (it only grows; see :meth:`rows_since`).
        self.added = 0

    def __len__(self) -> int:
        return self._size

    def add(
        self,
        obs: ArrayObs,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: ArrayObs,
        terminated: np.ndarray,
        *,
        discounts: np.ndarray | None = None,
        mask: np.ndarray | None = None,
        first: FirstSteps | None = None,
    ) -> None:
        """Store a batch of transitions, one row per environment of a vector env.

        :param obs: observations acted on, ``[N, ...]`` (a dict of such arrays for Dict spaces).
        :param actions: actions taken, ``[N]`` for Discrete, ``[N, *shape]`` otherwise.
        :param rewards: ``[N]`` rewards (n-step returns for n-step transitions).
        :param next_obs: observations reached, the final ones where an episode ended.
        :param terminated: ``[N]`` true where the episode really ended (not truncated).
        :param discounts: ``[N]`` multipliers of the bootstrap value of n-step transitions
            (from then on the buffer holds n-step returns); ``gamma`` by default.
        :param mask: ``[N]`` bool, the rows to store; all of them by default.
        :param first: the one-step transition each row starts with: required by a buffer
            that keeps them, ignored by one that does not.
        """
        if self._first and first is None:
            raise ValueError("this buffer keeps each row's first step: pass first=")
        rows = _kept_rows(len(rewards), mask, self.capacity)
        count = len(rewards) if rows is None else rows.size
        if count == 0:
            return
        if discounts is None:
            discounts = np.full(count, self.gamma, dtype=np.float32)
        else:
            discounts = _take(discounts, rows)
            self.n_step = True
        start = self._position
        _write(self._obs, start, _take(obs, rows))
        _write(self._next_obs, start, _take(next_obs, rows))
        _write(self._actions, start, _take(actions, rows))
        _write(self._rewards, start, _take(rewards, rows))
        _write(self._terminated, start, _take(terminated, rows))
        _write(self._discounts, start, discounts)
        if self._first and first is not None:
            for name, value in zip(self._first, first, strict=True):
                _write(self._first[name], start, _take(value, rows))
        self._advance(start, count)

    def _advance(self, start: int, count: int) -> None:
        """Count ``count`` rows just stored from slot ``start`` (ring order)."""
        self._position = (start + count) % self.capacity
        self._size = min(self._size + count, self.capacity)
        self.added += count
        self._written(start, count)

    def _written(self, start: int, count: int) -> None:
        """Called after ``count`` rows were stored from slot ``start`` (ring order)."""

    def rows_since(self, mark: int) -> dict[str, Any]:
        """The rows stored since :attr:`added` was ``mark`` (at most the ring's size: the
        latest ones), column by column on the CPU, in the order they were stored: what
        another buffer of the same spaces takes with :meth:`add_rows` (the ray backend's
        workers share their experience so)."""
        count = max(0, min(self.added - mark, self._size))
        slots = (self._position - count + torch.arange(count)) % self.capacity
        slots = slots.to(self.device)
        columns = {name: _on_cpu(_gather(store, slots)) for name, store in self._columns().items()}
        return {"count": count, "n_step": self.n_step, "columns": columns}

    def add_rows(self, rows: dict[str, Any]) -> None:
        """Store rows another buffer of the same spaces gave with :meth:`rows_since`.

        :raises UsageError: the rows do not fit this buffer's columns (nothing is stored).
        """
        count = int(rows["count"])
        if count == 0:
            return
        keep = min(count, self.capacity)
        start = self._position
        columns = self._columns()
        for name, store in columns.items():
            _check_fits(store, _saved(rows["columns"], name), name)
        for name, store in columns.items():
            _write(store, start, _last_rows(rows["columns"][name], keep))
        self.n_step = self.n_step or bool(rows["n_step"])
        self._advance(start, keep)

    def sample(self, batch_size: int, generator: torch.Generator) -> Transitions:
        """Draw ``batch_size`` stored transitions uniformly, with replacement.

        :param batch_size: transitions in the batch.
        :param generator: the only source of randomness used.
        """
        self._check_not_empty()
        return self._batch(*self._draw(batch_size, generator))

    def _draw(
        self, batch_size: int, generator: torch.Generator, beta: float = 0.4
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The slots of a batch and their importance weights (uniform: ones)."""
        index = torch.randint(
            self._size, (batch_size,), generator=generator, device=generator.device
        )
        return index.to(self.device), torch.ones(batch_size, device=self.device)

    def sample_stacked(
        self,
        batch_sizes: Sequence[int],
        generators: Sequence[torch.Generator],
        betas: Sequence[float] | None = None,
    ) -> tuple[Transitions, torch.Tensor]:
        """One batch per member, drawn as :meth:`sample` draws it from that member's
        generator (and, prioritised, its exponent), gathered at once and stacked: every field
        is ``[k, B, ...]`` for ``B`` the largest batch size, the rows past a member's own size
        repeating slot 0 with weight 0. Also returns the ``[k, B]`` float mask of real rows.
        """
        self._check_not_empty()
        width = max(batch_sizes)
        slots = torch.zeros(len(batch_sizes), width, dtype=torch.int64, device=self.device)
        weights = torch.zeros(len(batch_sizes), width, device=self.device)
        for row, (size, generator) in enumerate(zip(batch_sizes, generators, strict=True)):
            if size:  # a member that does not learn now draws nothing
                drawn, drawn_weights = self._draw(size, generator, betas[row] if betas else 0.4)
                slots[row, :size], weights[row, :size] = drawn, drawn_weights
        rows = (torch.arange(width, device=self.device) < self._sizes(batch_sizes)).float()
        flat = self._batch(slots.reshape(-1), weights.reshape(-1))
        return Transitions(*(_unflatten(field, len(batch_sizes)) for field in flat)), rows

    def _sizes(self, batch_sizes: Sequence[int]) -> torch.Tensor:
        return torch.tensor(batch_sizes, device=self.device).unsqueeze(1)

    def _check_not_empty(self) -> None:
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer")

    def _batch(self, index: torch.Tensor, weights: torch.Tensor) -> Transitions:
        # Tensors here: the multi-agent buffer, which keeps dicts, has its own _batch.
        actions = cast(torch.Tensor, self._actions)
        rewards = cast(torch.Tensor, self._rewards)
        terminated = cast(torch.Tensor, self._terminated)
        return Transitions(
            obs=_gather(self._obs, index),
            actions=actions.index_select(0, index),
            rewards=rewards.index_select(0, index),
            next_obs=_gather(self._next_obs, index),
            terminated=terminated.index_select(0, index),
            discounts=self._discounts.index_select(0, index) if self.n_step else None,
            weights=weights,
            indices=index,
            **self._first_rows(index),
        )

    def _first_rows(self, index: torch.Tensor) -> dict[str, Any]:
        """The kept first steps of slots ``index`` (none where the buffer keeps none)."""
        return {name: _gather(store, index) for name, store in self._first.items()}

    def _columns(self) -> dict[str, Stored]:
        stores = (self._obs, self._actions, self._rewards, self._next_obs)
        columns = zip(_COLUMNS, (*stores, self._terminated, self._discounts), strict=True)
        return {**dict(columns), **self._first}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to restore the buffer exactly: stored rows, position, size and
        whether it holds n-step returns."""
        state: dict[str, Any] = {
            "capacity": self.capacity,
            "position": self._position,
            "size": self._size,
            "n_step": self.n_step,
        }
        for name, store in self._columns().items():
            state[name] = _snapshot(store, self._size)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned, into a buffer built with the same spaces
        and capacity.

        :param state: a state from :meth:`state_dict`.
        """
        if state["capacity"] != self.capacity:
            raise _mismatch(f"capacities {state['capacity']} and {self.capacity}")
        columns = self._columns()
        for name, store in columns.items():
            _check_fits(store, _saved(state, name), name)
        for name, store in columns.items():
            _restore(store, state[name])
        self._position = int(state["position"])
        self._size = int(state["size"])
        self.n_step = bool(state.get("n_step", self._holds_other_discounts()))

    def _holds_other_discounts(self) -> bool:
        """Whether a stored discount is not ``gamma``: how a buffer saved before it recorded
        ``n_step`` tells that it holds n-step returns."""
        stored = self._discounts[: self._size]
        return bool((stored != torch.tensor(self.gamma, dtype=torch.float32)).any())


class MultiAgentReplayBuffer(ReplayBuffer):
    """A replay buffer for teams: each column holds one tensor per agent.

    :meth:`add` takes dicts keyed by agent for observations, actions, rewards, next
    observations and terminations (one row per environment of the vector env); sampled
    :class:`Transitions` carry the same dicts, drawn at the same rows for every agent, so a
    centralised critic sees what the whole team saw and did. It holds one-step transitions:
    their ``discounts`` is None.

    :param capacity: team transitions kept.
    :param observation_spaces: each agent's (single-environment) observation space.
    :param action_spaces: each agent's action space.
    """

    def __init__(
        self,
        capacity: int,
        observation_spaces: Mapping[str, spaces.Space],
        action_spaces: Mapping[str, spaces.Space],
        *,
        gamma: float,
        device: str | torch.device = "cpu",
    ) -> None:
        observations = spaces.Dict(dict(observation_spaces))
        super().__init__(capacity, observations, spaces.Discrete(1), gamma=gamma, device=device)
        self._actions = _allocate(spaces.Dict(dict(action_spaces)), capacity, self.device)
        self._rewards = self._per_agent(observation_spaces)
        self._terminated = self._per_agent(observation_spaces)

    def _per_agent(self, agents: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        return {
            agent: torch.zeros(self.capacity, dtype=torch.float32, device=self.device)
            for agent in agents
        }

    def add(  # type: ignore[override]  # a team's rows come as dicts by agent, one-step only
        self,
        obs: Mapping[str, Any],
        actions: Mapping[str, np.ndarray],
        rewards: Mapping[str, np.ndarray],
        next_obs: Mapping[str, Any],
        terminated: Mapping[str, np.ndarray],
        *,
        mask: np.ndarray | None = None,
    ) -> None:
        """Store one row per environment; ``mask`` (``[N]`` bool) picks the rows to keep."""
        count_all = len(next(iter(rewards.values())))
        rows = _kept_rows(count_all, mask, self.capacity)
        count = count_all if rows is None else rows.size
        if count == 0:
            return
        start = self._position
        for store, value in (
            (self._obs, obs), (self._next_obs, next_obs), (self._actions, actions),
            (self._rewards, rewards), (self._terminated, terminated),
        ):  # fmt: skip
            _write(store, start, _take(value, rows))
        _write(self._discounts, start, np.full(count, self.gamma, dtype=np.float32))
        self._advance(start, count)

    def _batch(self, index: torch.Tensor, weights: torch.Tensor) -> Transitions:
        # Transitions types these columns as one agent's tensors; a team's are dicts by agent,
        # which the team algorithms read as such.
        return Transitions(
            obs=_gather(self._obs, index),
            actions=_gather(self._actions, index),  # type: ignore[arg-type]  # dict by agent
            rewards=_gather(self._rewards, index),  # type: ignore[arg-type]  # dict by agent
            next_obs=_gather(self._next_obs, index),
            terminated=_gather(self._terminated, index),  # type: ignore[arg-type]  # dict by agent
            discounts=None,
            weights=weights,
            indices=index,
        )


class SumTree:
    """A binary tree whose nodes hold the sum of their children; leaves hold slot priorities.

    Stored as one array: the root is node 1, node ``i`` has children ``2i`` and ``2i + 1``, and
    the leaves (padded to a power of two) follow the inner nodes. Updates and searches take a
    whole batch of slots at once and cost O(log capacity) numpy operations.

    :param capacity: number of leaves used.
    """

    def __init__(self, capacity: int) -> None:
        self.leaves = 1 << (capacity - 1).bit_length()
        self.depth = self.leaves.bit_length() - 1
        self.nodes = np.zeros(2 * self.leaves, dtype=np.float64)

    @property
    def total(self) -> float:
        """Sum of every leaf."""
        return float(self.nodes[1])

    def get(self, slots: np.ndarray) -> np.ndarray:
        """The leaf values of ``slots``."""
        return self.nodes[slots + self.leaves]

    def set(self, slots: np.ndarray, values: np.ndarray) -> None:
        """Set leaves and recompute their ancestors (from the children, so no drift builds up).

        :param slots: leaf indices; for a repeated slot the last value wins.
        :param values: non-negative leaf values.
        """
        nodes = np.asarray(slots, dtype=np.int64) + self.leaves
        self.nodes[nodes] = values
        for _ in range(self.depth):
            nodes = nodes // 2
            self.nodes[nodes] = self.nodes[2 * nodes] + self.nodes[2 * nodes + 1]

    def find(self, targets: np.ndarray) -> np.ndarray:
        """For each target in ``[0, total)``, the slot whose cumulative-sum interval holds it.

        Zero leaves are never returned while the tree holds a positive value, even when
        rounding puts a target at or past the total.
        """
        nodes = np.ones(len(targets), dtype=np.int64)
        targets = np.asarray(targets, dtype=np.float64)
        for _ in range(self.depth):
            left = 2 * nodes
            left_sum = self.nodes[left]
            right = (targets >= left_sum) & (self.nodes[left + 1] > 0)
            targets = np.where(right, targets - left_sum, targets)
            nodes = left + right
        return nodes - self.leaves


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritised replay (Schaul et al., 2016).

    Slot ``i`` is drawn with probability ``p_i^alpha / sum_j p_j^alpha``; new transitions get
    the largest priority seen so far (1.0 at first) so each is likely replayed at least once.

    :param alpha: priority exponent; 0 samples uniformly.
    """

    def __init__(
        self,
        capacity: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        *,
        gamma: float,
        alpha: float = 0.5,
        device: str | torch.device = "cpu",
        first_steps: bool = False,
    ) -> None:
        super().__init__(
            capacity, observation_space, action_space, gamma=gamma, device=device,
            first_steps=first_steps,
        )  # fmt: skip
        self.alpha = alpha
        self._tree = SumTree(capacity)
        self._max_priority = 1.0

    def _written(self, start: int, count: int) -> None:
        slots = (start + np.arange(count)) % self.capacity
        self._tree.set(slots, np.full(count, self._max_priority**self.alpha))

    def sample(self, batch_size: int, generator: torch.Generator, beta: float = 0.4) -> Transitions:
        """Draw ``batch_size`` transitions in proportion to priority, one per equal segment of
        the total priority (stratified sampling).

        :param batch_size: transitions in the batch.
        :param generator: the only source of randomness used.
        :param beta: importance-sampling exponent; ``weights`` are ``(N * P(i))^-beta``
            divided by their largest value in the batch.
        """
        self._check_not_empty()
        return self._batch(*self._draw(batch_size, generator, beta))

    def _draw(
        self, batch_size: int, generator: torch.Generator, beta: float = 0.4
    ) -> tuple[torch.Tensor, torch.Tensor]:
        uniforms = torch.rand(
            batch_size, generator=generator, dtype=torch.float64, device=generator.device
        )
        segment = self._tree.total / batch_size
        targets = (np.arange(batch_size) + uniforms.cpu().numpy()) * segment
        slots = self._tree.find(targets)
        probabilities = self._tree.get(slots) / self._tree.total
        weights = (self._size * probabilities) ** -beta
        weights /= weights.max()
        return (
            torch.from_numpy(slots).to(self.device),
            torch.as_tensor(weights, dtype=torch.float32, device=self.device),
        )

    def update_priorities(
        self, indices: torch.Tensor, priorities: torch.Tensor | np.ndarray
    ) -> None:
        """Set new priorities, e.g. ``|td_error| + eps``, for sampled slots.

        :param indices: ``Transitions.indices`` of the batch.
        :param priorities: one positive, finite priority per index.
        """
        slots = np.asarray(indices.detach().cpu(), dtype=np.int64).reshape(-1)
        if isinstance(priorities, torch.Tensor):
            priorities = priorities.detach().cpu().numpy()
        values = np.asarray(priorities, dtype=np.float64).reshape(-1)
        if not (np.all(values > 0) and np.all(np.isfinite(values))):
            raise ValueError("priorities must be positive and finite; add a small epsilon")
        if slots.size and (slots.min() < 0 or slots.max() >= self._size):
            raise ValueError(f"indices must name stored slots, in [0, {self._size})")
        self._max_priority = max(self._max_priority, float(values.max(initial=0.0)))
        self._tree.set(slots, values**self.alpha)

    def state_dict(self) -> dict[str, Any]:
        """The uniform buffer's state plus the sum tree and the largest priority seen."""
        state = super().state_dict()
        state["tree"] = torch.from_numpy(self._tree.nodes.copy())
        state["max_priority"] = self._max_priority
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned.

        :param state: a state from :meth:`state_dict`.
        """
        super().load_state_dict(state)
        self._tree.nodes[:] = state["tree"].numpy()
        self._max_priority = float(state["max_priority"])


def _ring(value: Any, n_step: int) -> Any:
    """Empty storage of ``n_step`` vector steps shaped like ``value`` ``[N, ...]``."""
    if isinstance(value, Mapping):
        return {key: _ring(array, n_step) for key, array in value.items()}
    array = np.asarray(value)
    return np.zeros((n_step, *array.shape), dtype=array.dtype)


def _put(ring: Any, slots: np.ndarray, rows: np.ndarray, value: Any) -> None:
    if isinstance(ring, dict):
        for key, array in ring.items():
            array[slots, rows] = np.asarray(value[key])[rows]
    else:
        ring[slots, rows] = np.asarray(value)[rows]


def _get(ring: Any, slots: np.ndarray, rows: np.ndarray) -> Any:
    if isinstance(ring, dict):
        return {key: array[slots, rows] for key, array in ring.items()}
    return ring[slots, rows]


class NStepAccumulator:
    """Turns 1-step transitions of a vector env into n-step ones.

    Each environment keeps its last ``n_step`` steps. Once it holds ``n_step`` of them, the
    oldest leaves as ``(obs_t, a_t, sum_i gamma^i r_{t+i}, next_obs_{t+n}, 0, gamma^n)``.
    When an episode ends, every pending step leaves with the shorter window ``k`` it has:
    ``terminated`` is set when the episode really ended, while a truncated one still
    bootstraps from its final observation with discount ``gamma^k``.

    The windows are rings of ``n_step`` rows per environment, updated for all environments at
    once; transitions leave environment by environment, oldest first.

    :param n_step: steps summed into each return.
    :param gamma: discount factor.
    :param num_envs: environments of the vector env.
    """

    def __init__(self, n_step: int, gamma: float, num_envs: int) -> None:
        if n_step < 1:
            raise ValueError(f"n_step must be at least 1, got {n_step}")
        self.n_step = n_step
        self.gamma = gamma
        self.num_envs = num_envs
        self._pushes = np.zeros(num_envs, dtype=np.int64)  # steps each env has pushed
        self._pending = np.zeros(num_envs, dtype=np.int64)  # of which still in its window
        self._rings: tuple[Any, Any, np.ndarray] | None = None  # obs, actions, rewards

    def reset(self) -> None:
        """Forget every pending step (the environments were reset: windows end here)."""
        self._pending[:] = 0

    def push(
        self,
        obs: ArrayObs,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: ArrayObs,
        terminated: np.ndarray,
        truncated: np.ndarray,
        mask: np.ndarray | None = None,
    ) -> NStepBatch | None:
        """Add one vector-env step; return the n-step transitions it completes, if any.

        :param obs: observations acted on, ``[N, ...]`` (a dict of arrays for Dict spaces).
        :param actions: ``[N, ...]`` actions taken.
        :param rewards: ``[N]`` rewards.
        :param next_obs: observations reached, the final ones where an episode ended.
        :param terminated: ``[N]`` true where the episode really ended.
        :param truncated: ``[N]`` true where it was cut short (time limit).
        :param mask: ``[N]`` bool, rows to use; rows set False (e.g. autoreset steps) are ignored.
        """
        rows = np.arange(self.num_envs) if mask is None else np.flatnonzero(mask)
        if rows.size == 0:
            return None
        if self._rings is None:
            self._rings = (_ring(obs, self.n_step), _ring(actions, self.n_step),
                           np.zeros((self.n_step, self.num_envs)))  # fmt: skip
        ring_obs, ring_actions, ring_rewards = self._rings
        slots = self._pushes[rows] % self.n_step
        _put(ring_obs, slots, rows, obs)
        _put(ring_actions, slots, rows, actions)
        ring_rewards[slots, rows] = np.asarray(rewards, dtype=np.float64)[rows]
        self._pushes[rows] += 1
        self._pending[rows] += 1
        terminated = np.asarray(terminated, dtype=bool)
        ended = (terminated | np.asarray(truncated, dtype=bool))[rows]
        pending = self._pending[rows]
        counts = np.where(ended, pending, (pending == self.n_step).astype(np.int64))
        self._pending[rows] = np.where(ended, 0, pending - counts)
        if not counts.any():
            return None
        return self._leaving(rows, counts, next_obs, terminated)

    def _leaving(
        self, rows: np.ndarray, counts: np.ndarray, next_obs: ArrayObs, terminated: np.ndarray
    ) -> NStepBatch:
        """The transitions leaving: ``counts[i]`` oldest pending steps of env ``rows[i]``."""
        assert self._rings is not None
        ring_obs, ring_actions, ring_rewards = self._rings
        envs = np.repeat(rows, counts)
        offsets = np.arange(envs.size) - np.repeat(np.cumsum(counts) - counts, counts)
        windows = np.repeat(self._pending[rows] + counts, counts)  # pending before they left
        starts = self._pushes[envs] - windows + offsets  # push number of each first step
        lengths = self._pushes[envs] - starts  # steps from it to the latest
        returns = np.zeros(envs.size)
        for j in range(self.n_step):
            present = j < lengths
            step_rewards = ring_rewards[(starts + j) % self.n_step, envs]
            returns += np.where(present, self.gamma**j * step_rewards, 0.0)
        first = starts % self.n_step
        reached = _take(next_obs, envs)
        return NStepBatch(
            obs=_get(ring_obs, first, envs),
            actions=_get(ring_actions, first, envs),
            rewards=returns.astype(np.float32),
            next_obs=reached,
            terminated=terminated[envs].astype(np.float32),
            discounts=np.power(self.gamma, lengths).astype(np.float32),
            first=self._first_steps(envs, starts, lengths, reached, terminated[envs]),
        )

    def _first_steps(
        self,
        envs: np.ndarray,
        starts: np.ndarray,
        lengths: np.ndarray,
        reached: ArrayObs,
        terminated: np.ndarray,
    ) -> FirstSteps:
        """The one-step transition each leaving window starts with: the step after it is
        the window's second (its observation is in the ring) or, for a window of one step,
        what the vector step ``reached``; only the latter may have ended the episode."""
        assert self._rings is not None
        ring_obs, _, ring_rewards = self._rings
        alone = lengths == 1
        following = _get(ring_obs, (starts + 1) % self.n_step, envs)
        return FirstSteps(
            rewards=ring_rewards[starts % self.n_step, envs].astype(np.float32),
            next_obs=_where(alone, reached, following),
            terminated=(alone & terminated.astype(bool)).astype(np.float32),
        )


def _where(rows: np.ndarray, chosen: Any, other: Any) -> Any:
    """Row by row, ``chosen`` where ``rows`` is true, else ``other`` (dicts key by key)."""
    if isinstance(chosen, Mapping):
        return {key: _where(rows, chosen[key], other[key]) for key in chosen}
    chosen, other = np.asarray(chosen), np.asarray(other)
    return np.where(rows.reshape(-1, *([1] * (chosen.ndim - 1))), chosen, other)
