"""mpe2's speaker-listener and simple spread, every copy stepped as one NumPy computation.

mpe2 steps each copy in Python, entity by entity, so its cost is per copy (about 10k env steps/s
for speaker-listener, 4.6k for simple spread, however many copies a population trains on).
These vectors hold every copy's state in arrays and make the same episodes as mpe2's own
copies, step for step and bit for bit: the same seeded draws at reset, the same float64
arithmetic in the same order (forces are summed pair by pair as mpe2 sums them), observations
cast to float32 as mpe2 casts them. ``tests/test_mpe_vector.py`` holds them against mpe2.

Only the configurations whose dynamics are written here are vectorised (:func:`world_for`);
rendering, mpe2's benchmark data, simple spread's curriculum and partial observability, and
every other scenario step mpe2's own copies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding

from agile_cli import TrainingError
from agile_pettingzoo.vector import Batch, _Vector

# mpe2's world constants (core.World, SimpleEnv._set_action).
_DT = 0.1
_DAMPING = 0.25
_CONTACT_FORCE = 1e2
_CONTACT_MARGIN = 1e-3
_SENSITIVITY = 5.0
# Keys an mpe2 maker takes that change nothing here when set to these values.
_NEUTRAL: dict[str, Any] = {
    "benchmark_data": False,
    "curriculum": False,
    "num_agent_neighbors": None,
    "num_landmark_neighbors": None,
}


class World:
    """Every copy's state of one scenario, and its rules, batched over copies (axis 0).

    Subclasses set ``agents`` and write :meth:`reset_copy` (mpe2's draws, in its order),
    :meth:`act`, :meth:`advance`, :meth:`rewards`, :meth:`terminal` and :meth:`observations`.
    """

    agents: tuple[str, ...]

    def __init__(self, num_envs: int, *, continuous: bool, max_cycles: int) -> None:
        self.num_envs = num_envs
        self.continuous = continuous
        self.max_cycles = max_cycles

    def reset_copy(self, index: int, rng: np.random.Generator) -> None:
        raise NotImplementedError

    def act(self, actions: Mapping[str, np.ndarray]) -> None:
        """Set every copy's controls from a batch of actions (already checked and clipped)."""
        raise NotImplementedError

    def advance(self) -> None:
        """One step of mpe2's physics for every copy."""
        raise NotImplementedError

    def rewards(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def terminal(self) -> np.ndarray:
        """Per copy, whether the scenario ends its episode (before the step limit)."""
        return np.zeros(self.num_envs, dtype=bool)

    def observations(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def movement(self, action: np.ndarray) -> np.ndarray:
        """A movable agent's control force, ``(n, 2)``, from its batch of actions."""
        u = np.zeros((len(action), 2))
        if self.continuous:  # mpe2 subtracts in the action's float32, then widens
            u[:, 0] += action[:, 2] - action[:, 1]
            u[:, 1] += action[:, 4] - action[:, 3]
        else:
            u[:, 0] = np.where(action == 1, -1.0, np.where(action == 2, 1.0, 0.0))
            u[:, 1] = np.where(action == 3, -1.0, np.where(action == 4, 1.0, 0.0))
        return u * _SENSITIVITY

    def utterance(self, action: np.ndarray, dim_c: int) -> np.ndarray:
        """A speaking agent's communication state, ``(n, dim_c)``, from its actions."""
        if self.continuous:
            return np.asarray(action, dtype=np.float64)
        return (action[:, None] == np.arange(dim_c)).astype(np.float64)


def integrate(pos: np.ndarray, vel: np.ndarray, force: np.ndarray) -> None:
    """mpe2's ``integrate_state`` for movable entities of unit mass and no speed limit, in
    place: position from the old velocity, then damping, then the force."""
    pos += vel * _DT
    vel *= 1 - _DAMPING
    vel += (force / 1.0) * _DT


def distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distance over the last axis, as mpe2 computes it."""
    return np.sqrt(np.sum(np.square(a - b), axis=-1))


class SpeakerListener(World):
    """``simple_speaker_listener_v4``: a speaker that sees the goal's colour and talks, a
    listener that hears it and moves; both rewarded by the listener's squared distance to
    the goal landmark."""

    agents = ("speaker_0", "listener_0")
    _COLOURS = np.array([[0.65, 0.15, 0.15], [0.15, 0.65, 0.15], [0.15, 0.15, 0.65]])

    def __init__(self, num_envs: int, *, continuous: bool, max_cycles: int = 25) -> None:
        super().__init__(num_envs, continuous=continuous, max_cycles=max_cycles)
        self.goal = np.zeros(num_envs, dtype=np.int64)
        self.speaker = np.zeros((num_envs, 2))
        self.listener = np.zeros((num_envs, 2))
        self.velocity = np.zeros((num_envs, 2))
        self.landmarks = np.zeros((num_envs, 3, 2))
        self.said = np.zeros((num_envs, 3))
        self._force = np.zeros((num_envs, 2))

    def reset_copy(self, index: int, rng: np.random.Generator) -> None:
        self.goal[index] = int(rng.integers(3))
        self.speaker[index] = rng.uniform(-1, +1, 2)
        self.listener[index] = rng.uniform(-1, +1, 2)
        self.velocity[index] = 0.0
        for landmark in range(3):
            self.landmarks[index, landmark] = rng.uniform(-1, +1, 2)
        self.said[index] = 0.0

    def act(self, actions: Mapping[str, np.ndarray]) -> None:
        self.said = self.utterance(actions["speaker_0"], 3)
        self._force = self.movement(actions["listener_0"]) + 0.0

    def advance(self) -> None:
        integrate(self.listener, self.velocity, self._force)

    def rewards(self) -> dict[str, np.ndarray]:
        goal = self.landmarks[np.arange(self.num_envs), self.goal]
        reward = -np.sum(np.square(self.listener - goal), axis=-1)
        return {"speaker_0": reward, "listener_0": reward}

    def observations(self) -> dict[str, np.ndarray]:
        relative = self.landmarks - self.listener[:, None, :]
        listener = np.concatenate(
            [self.velocity, relative.reshape(self.num_envs, -1), self.said], axis=1
        )
        return {
            "speaker_0": self._COLOURS[self.goal].astype(np.float32),
            "listener_0": listener.astype(np.float32),
        }


class Spread(World):
    """``simple_spread_v3``: ``N`` agents cover ``N`` landmarks, rewarded globally by each
    landmark's nearest agent and locally by collisions (mixed by ``local_ratio``)."""

    _SIZE = 0.15
    _CAPTURE_RADIUS = 0.1

    def __init__(
        self,
        num_envs: int,
        *,
        continuous: bool,
        N: int = 3,
        local_ratio: float = 0.5,
        terminate_on_success: bool = False,
        max_cycles: int = 25,
    ) -> None:
        super().__init__(num_envs, continuous=continuous, max_cycles=max_cycles)
        self.count = N
        self.local_ratio = local_ratio
        self.terminate_on_success = terminate_on_success
        self.agents = tuple(f"agent_{i}" for i in range(N))
        self.position = np.zeros((num_envs, N, 2))
        self.velocity = np.zeros((num_envs, N, 2))
        self.landmarks = np.zeros((num_envs, N, 2))
        self._force = np.zeros((num_envs, N, 2))

    def reset_copy(self, index: int, rng: np.random.Generator) -> None:
        for agent in range(self.count):
            self.position[index, agent] = rng.uniform(-1, +1, 2)
        self.velocity[index] = 0.0
        for landmark in range(self.count):
            self.landmarks[index, landmark] = rng.uniform(-1, +1, 2)

    def act(self, actions: Mapping[str, np.ndarray]) -> None:
        for i, agent in enumerate(self.agents):
            self._force[:, i] = self.movement(actions[agent]) + 0.0

    def advance(self) -> None:
        force = self._force
        dist_min = self._SIZE + self._SIZE
        for a in range(self.count):  # mpe2's order of pairs, so sums round as its do
            for b in range(a + 1, self.count):
                delta = self.position[:, a] - self.position[:, b]
                dist = np.sqrt(np.sum(np.square(delta), axis=-1))[:, None]
                penetration = np.logaddexp(0, -(dist - dist_min) / _CONTACT_MARGIN)
                push = _CONTACT_FORCE * delta / dist * (penetration * _CONTACT_MARGIN)
                force[:, a] = push + force[:, a]
                force[:, b] = -push + force[:, b]
        integrate(self.position, self.velocity, force)

    def _nearest(self) -> np.ndarray:
        """Per copy and landmark, the distance of its nearest agent, ``(n, N)``."""
        return distance(self.position[:, :, None, :], self.landmarks[:, None, :, :]).min(axis=1)

    def rewards(self) -> dict[str, np.ndarray]:
        nearest = self._nearest()
        shared = -nearest[:, 0]
        for landmark in range(1, self.count):
            shared = shared - nearest[:, landmark]
        apart = distance(self.position[:, :, None, :], self.position[:, None, :, :])
        touching = apart < self._SIZE + self._SIZE
        touching[:, np.arange(self.count), np.arange(self.count)] = False
        collisions = -touching.sum(axis=1).astype(np.float64)
        mixed = shared[:, None] * (1 - self.local_ratio) + collisions * self.local_ratio
        return {agent: mixed[:, i] for i, agent in enumerate(self.agents)}

    def terminal(self) -> np.ndarray:
        if not self.terminate_on_success:
            return super().terminal()
        return np.all(self._nearest() < self._CAPTURE_RADIUS, axis=1)

    def observations(self) -> dict[str, np.ndarray]:
        n, count = self.num_envs, self.count
        silent = np.zeros((n, 2 * (count - 1)))  # the others' utterances: they are silent
        out = {}
        for i, agent in enumerate(self.agents):
            own = self.position[:, i]
            others = np.delete(self.position, i, axis=1) - own[:, None, :]
            parts = [
                self.velocity[:, i],
                own,
                (self.landmarks - own[:, None, :]).reshape(n, -1),
                others.reshape(n, -1),
                silent,
            ]
            out[agent] = np.concatenate(parts, axis=1).astype(np.float32)
        return out


_WORLDS: dict[str, tuple[Callable[..., World], frozenset[str]]] = {
    "mpe2.simple_speaker_listener_v4": (SpeakerListener, frozenset({"max_cycles"})),
    "mpe2.simple_spread_v3": (
        Spread,
        frozenset({"N", "local_ratio", "terminate_on_success", "max_cycles"}),
    ),
}


def world_for(name: str, config: Mapping[str, Any]) -> Callable[[int], World] | None:
    """A maker of ``num_envs`` copies' world for mpe2 environment ``name`` made with
    ``config``, or None when its dynamics are not written here (another scenario, rendering,
    benchmark data, a curriculum, partial observability)."""
    if name not in _WORLDS:
        return None
    make, accepted = _WORLDS[name]
    options: dict[str, Any] = {}
    for key, value in config.items():
        if key in accepted:
            options[key] = value
        elif key == "continuous_actions":
            options["continuous"] = bool(value)
        elif key == "dynamic_rescaling":  # how mpe2 draws, nothing else
            continue
        elif key not in _NEUTRAL or _NEUTRAL[key] != value:
            return None
    options.setdefault("continuous", False)
    return lambda num_envs: make(num_envs, **options)


class MPEVectorEnv(_Vector):
    """``num_envs`` copies of an mpe2 scenario in arrays, with the
    :class:`agile_cli.MultiAgentVectorEnv` contract and the episodes
    :class:`~agile_pettingzoo.vector.SyncParallelVectorEnv` makes of mpe2's copies (copy ``i``
    seeded with ``seed + i``, next-step autoreset).

    :param world: makes the copies' :class:`World`.
    :param template: one copy made by mpe2 with the same config, for its spaces.
    """

    def __init__(self, world: Callable[[int], World], template: Any, num_envs: int) -> None:
        self.world = world(num_envs)
        agents = list(template.possible_agents)
        if agents != list(self.world.agents):
            raise TrainingError(f"mpe2 made agents {agents}, not {list(self.world.agents)}")
        self._set_spaces(
            agents,
            {agent: template.observation_space(agent) for agent in agents},
            {agent: template.action_space(agent) for agent in agents},
        )
        self.num_envs = num_envs
        self._rngs = [seeding.np_random()[0] for _ in range(num_envs)]
        self._steps = np.zeros(num_envs, dtype=np.int64)
        self._ended = np.zeros(num_envs, dtype=bool)
        for index in range(num_envs):
            self.world.reset_copy(index, self._rngs[index])

    def reset(self, *, seed: int | None = None) -> tuple[Batch, dict[str, Any]]:
        for index in range(self.num_envs):
            if seed is not None:
                self._rngs[index] = seeding.np_random(seed + index)[0]
            self.world.reset_copy(index, self._rngs[index])
        self._steps[:] = 0
        self._ended[:] = False
        return self.world.observations(), {}

    def step(self, actions: dict[str, Any]) -> tuple[Any, ...]:
        restart = self._ended
        self.world.act(self._checked(actions, ~restart))
        self.world.advance()
        self._steps += 1
        rewards = {agent: r.astype(np.float32) for agent, r in self.world.rewards().items()}
        truncated = self._steps >= self.world.max_cycles
        terminated = ~truncated & self.world.terminal()
        for index in np.flatnonzero(restart):
            self.world.reset_copy(int(index), self._rngs[index])
        for reward in rewards.values():
            reward[restart] = 0.0
        truncated[restart] = terminated[restart] = False
        self._steps[restart] = 0
        self._ended = truncated | terminated
        return (
            self.world.observations(),
            rewards,
            {agent: terminated.copy() for agent in self.agents},
            {agent: truncated.copy() for agent in self.agents},
            {},
        )

    def close(self) -> None:
        pass

    def _checked(self, actions: Mapping[str, Any], live: np.ndarray) -> dict[str, np.ndarray]:
        """Actions as mpe2's wrappers take them: Box actions clipped to the space, Discrete
        ones refused out of range (for copies that act this step)."""
        checked = {}
        for agent in self.agents:
            space = self.single_action_spaces[agent]
            if isinstance(space, spaces.Discrete):
                action = np.asarray(actions[agent], dtype=np.int64).reshape(self.num_envs)
                wrong = live & ((action < 0) | (action >= space.n))
                if wrong.any():
                    raise TrainingError(
                        f"agent '{agent}' took action {action[wrong][0]}, outside Discrete"
                        f"({space.n})"
                    )
            else:
                action = np.asarray(actions[agent], dtype=space.dtype)
                action = np.clip(action.reshape(self.num_envs, -1), space.low, space.high)
            checked[agent] = action
        return checked
