"""Copies of a PettingZoo parallel environment stepped together, in this process or in workers.

Both vectors follow :class:`agile_cli.MultiAgentVectorEnv`: every agent in every output, arrays
batched over copies, next-step autoreset, absent agents reported terminated with zero reward.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from typing import Any

import numpy as np
from gymnasium import spaces

from agile_cli import EnvironmentNotFoundError, MultiAgentVectorEnv, TrainingError
from agile_cli.helpers import can_fork

MakeEnv = Callable[[], Any]
Batch = dict[str, np.ndarray]

_SUPPORTED = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


class _Vector(MultiAgentVectorEnv):
    """What both vectors share: the spaces, and use as a context manager."""

    def _set_spaces(self, agents: list[str], observations: dict, actions: dict) -> None:
        self.agents = list(agents)
        self.single_observation_spaces = dict(observations)
        self.single_action_spaces = dict(actions)

    def __enter__(self) -> _Vector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncParallelVectorEnv(_Vector):
    """``num_envs`` copies stepped one after another in this process.

    Outputs are written into arrays allocated once, all in one buffer, :attr:`buffer` (how a
    worker sends them down its pipe). ``copy=False`` returns those arrays themselves,
    overwritten by the next call; the default returns copies.

    :param make_env: makes one PettingZoo ``ParallelEnv``; called ``num_envs`` times.
    """

    def __init__(self, make_env: MakeEnv, num_envs: int, *, copy: bool = True) -> None:
        first = make_env()
        agents = list(first.possible_agents)
        self._set_spaces(
            agents,
            {agent: first.observation_space(agent) for agent in agents},
            {agent: first.action_space(agent) for agent in agents},
        )
        try:
            _check_spaces(self.single_observation_spaces, self.single_action_spaces)
        except EnvironmentNotFoundError:
            first.close()
            raise
        self.envs = [first, *(make_env() for _ in range(num_envs - 1))]
        self.num_envs = num_envs
        self._copy = copy
        layout = _outputs_layout(agents, self.single_observation_spaces, num_envs)
        self.buffer = bytearray(layout.nbytes)
        self._obs, self._rewards, self._terminated, self._truncated = layout.split(self.buffer)
        self._discrete = {
            agent: isinstance(space, spaces.Discrete)
            for agent, space in self.single_action_spaces.items()
        }
        self._ended = [False] * num_envs  # copies to reset on the next step
        self._closed = False

    def reset(self, *, seed: int | None = None) -> tuple[Batch, dict[str, Any]]:
        for index in range(self.num_envs):
            self._reset_copy(index, None if seed is None else seed + index)
            self._ended[index] = False
        return self._out(self._obs), {}

    def step(self, actions: dict[str, Any]) -> tuple[Any, ...]:
        per_agent = self._unbatch(actions)
        for agent in self.agents:  # what an absent agent reports; live agents overwrite it
            self._rewards[agent].fill(0.0)
            self._terminated[agent].fill(True)
            self._truncated[agent].fill(False)
        for index, env in enumerate(self.envs):
            if self._ended[index]:
                self._reset_copy(index, None)
                self._ended[index] = False
            else:
                self._ended[index] = self._step_copy(index, env, per_agent)
        out = self._out
        return (out(self._obs), out(self._rewards), out(self._terminated), out(self._truncated), {})

    def render(self) -> tuple[Any, ...]:
        """Each copy's ``render()``: an RGB frame for copies made with
        ``render_mode="rgb_array"``."""
        return tuple(env.render() for env in self.envs)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for env in self.envs:
            env.close()

    def _reset_copy(self, index: int, seed: int | None) -> None:
        observations, _ = self.envs[index].reset(seed=seed)
        for agent in self.agents:
            present = agent in observations
            self._obs[agent][index] = observations[agent] if present else 0
            self._rewards[agent][index] = 0.0
            self._terminated[agent][index] = not present  # not spawned yet: absent
            self._truncated[agent][index] = False

    def _step_copy(self, index: int, env: Any, per_agent: dict[str, Any]) -> bool:
        """Step one copy; whether its episode ended."""
        live = tuple(env.agents)
        observations, rewards, terminated, truncated, _ = env.step(
            {agent: per_agent[agent][index] for agent in live}
        )
        for agent, observation in observations.items():
            self._obs[agent][index] = observation
        after = env.agents
        ended = True
        for agent in _present(live, after):
            done_now = terminated.get(agent, False)
            cut = truncated.get(agent, False)
            self._rewards[agent][index] = rewards.get(agent, 0.0)
            self._terminated[agent][index] = done_now
            self._truncated[agent][index] = cut
            ended = ended and (done_now or cut)
        return ended or not after

    def _unbatch(self, actions: dict[str, Any]) -> dict[str, Any]:
        """Per agent, something indexable by copy: Python ints for Discrete, rows otherwise."""
        per_agent: dict[str, Any] = {}
        for agent in self.agents:
            if self._discrete[agent]:
                per_agent[agent] = np.asarray(actions[agent], np.int64).reshape(-1).tolist()
            else:
                dtype = self.single_action_spaces[agent].dtype
                per_agent[agent] = np.asarray(actions[agent], dtype)
        return per_agent

    def _out(self, arrays: Batch) -> Batch:
        if not self._copy:
            return arrays
        return {agent: array.copy() for agent, array in arrays.items()}


class SubprocessParallelVectorEnv(_Vector):
    """``num_envs`` copies in worker processes, each owning a contiguous chunk of copies and
    stepping it as a :class:`SyncParallelVectorEnv`; one message per worker per call.

    :param make_env: makes one copy; must be picklable where workers are spawned, not forked.
    :param workers: how many processes (default: one per CPU, at most one per copy).
    :param context: multiprocessing start method (default: fork where available, else spawn).
    """

    def __init__(
        self,
        make_env: MakeEnv,
        num_envs: int,
        *,
        workers: int | None = None,
        context: str | None = None,
    ) -> None:
        self.num_envs = num_envs
        count = min(num_envs, workers or os.cpu_count() or 1)
        size, extra = divmod(num_envs, count)
        starts = [k * size + min(k, extra) for k in range(count + 1)]
        self._chunks = list(itertools.pairwise(starts))
        mp = multiprocessing.get_context(context or ("fork" if can_fork() else "spawn"))
        self._pipes: list[Any] = []
        self._processes: list[Any] = []
        self._closed = False
        try:
            for number, (start, stop) in enumerate(self._chunks):
                self._start_worker(mp, number, make_env, stop - start)
        except BaseException:  # e.g. make_env cannot be pickled for a spawned worker
            self.close()
            raise
        self._set_spaces(*self._gather("start")[0])
        self._outputs = [
            _outputs_layout(self.agents, self.single_observation_spaces, stop - start)
            for start, stop in self._chunks
        ]
        self._messages = []  # per worker: a buffer for its actions, and views into it
        for start, stop in self._chunks:
            layout = _actions_layout(self.agents, self.single_action_spaces, stop - start)
            message = bytearray(layout.nbytes)
            self._messages.append((message, layout.split(message)[0]))

    def reset(self, *, seed: int | None = None) -> tuple[Batch, dict[str, Any]]:
        for pipe, (start, _) in zip(self._pipes, self._chunks, strict=True):
            self._send(pipe, ("reset", None if seed is None else seed + start))
        return self._join(self._gather("reset"))[0], {}

    def step(self, actions: dict[str, Any]) -> tuple[Any, ...]:
        batched = {agent: np.asarray(actions[agent]) for agent in self.agents}
        for pipe, (start, stop), (message, views) in zip(
            self._pipes, self._chunks, self._messages, strict=True
        ):
            for agent, view in views.items():
                view[...] = batched[agent][start:stop].reshape(view.shape)
            self._send(pipe, ("step", message))
        return (*self._join(self._gather("step")), {})

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for pipe in self._pipes:
            with suppress(OSError):
                pipe.send(("close", None))
        for process in self._processes:
            process.join(timeout=2)
            if process.is_alive():
                process.terminate()
                process.join()
        for pipe in self._pipes:
            pipe.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            with suppress(Exception):
                self.close()

    def _start_worker(self, mp: Any, number: int, make_env: MakeEnv, num_envs: int) -> None:
        ours, theirs = mp.Pipe()
        process = mp.Process(
            target=_work,
            args=(theirs, ours, make_env, num_envs),
            name=f"agile-env-worker-{number}",
            daemon=True,  # ended when this process exits
        )
        self._pipes.append(ours)
        process.start()
        theirs.close()
        self._processes.append(process)

    def _send(self, pipe: Any, message: tuple[str, Any]) -> None:
        if self._closed:
            raise TrainingError("the environment vector is closed")
        with suppress(OSError):  # a worker that is gone is reported by _gather
            pipe.send(message)

    def _gather(self, what: str) -> list[Any]:
        """One answer from every worker (so the pipes stay in step), then the first failure."""
        results, failure = [], None
        for number, pipe in enumerate(self._pipes):
            try:
                status, payload = pipe.recv()
            except (EOFError, OSError):
                self._processes[number].join(timeout=1)
                code = self._processes[number].exitcode
                status, payload = "error", (f"the worker exited unexpectedly (code {code})", "")
            if status == "error" and failure is None:
                failure = self._failure(number, what, *payload)
            results.append(payload)
        if failure is not None:
            self.close()
            raise failure
        return results

    def _failure(self, number: int, what: str, summary: str, remote: str) -> TrainingError:
        start, stop = self._chunks[number]
        error = TrainingError(
            f"environment worker {number} (copies {start}-{stop - 1}) failed at {what}: {summary}",
            "set environment.sync: true to see the traceback in this process",
        )
        if remote:
            error.__cause__ = _RemoteTraceback(remote)
        return error

    def _join(self, buffers: list[bytearray]) -> list[Batch]:
        """Observations, rewards, terminated, truncated: the workers' chunks end to end."""
        chunks = [layout.split(data) for layout, data in zip(self._outputs, buffers, strict=True)]
        if len(chunks) == 1:
            return chunks[0]  # views of a buffer just unpickled: nobody else holds it
        return [
            {
                agent: np.concatenate([chunk[part][agent] for chunk in chunks])
                for agent in self.agents
            }
            for part in range(4)
        ]


class _RemoteTraceback(Exception):
    """A worker's traceback, attached as the cause of the error raised here."""

    def __str__(self) -> str:
        return f"\n\n(in the worker process)\n{self.args[0]}"


def _work(pipe: Any, parents_end: Any, make_env: MakeEnv, num_envs: int) -> None:
    """A worker's life: build its copies, then answer reset / step / close until told to stop
    or until the parent is gone."""
    parents_end.close()
    try:
        envs = SyncParallelVectorEnv(make_env, num_envs, copy=False)
    except Exception as exc:
        _report(pipe, exc)
        pipe.close()
        return
    try:
        pipe.send(("ok", (envs.agents, envs.single_observation_spaces, envs.single_action_spaces)))
        _serve(pipe, envs, _actions_layout(envs.agents, envs.single_action_spaces, num_envs))
    except (KeyboardInterrupt, EOFError, OSError):
        pass  # interrupted, or the parent is gone: nobody to answer
    finally:
        with suppress(Exception):
            envs.close()
        pipe.close()


def _serve(pipe: Any, envs: SyncParallelVectorEnv, actions: _Flat) -> None:
    while True:
        command, data = pipe.recv()
        if command == "close":
            return
        try:
            if command == "reset":
                envs.reset(seed=data)
            else:
                envs.step(actions.split(data)[0])
        except Exception as exc:
            _report(pipe, exc)
        else:
            pipe.send(("ok", envs.buffer))


class _Flat:
    """Arrays laid end to end in one buffer, in parts (each a dict by agent), so that a batch
    crosses a pipe as one bytes object: pickling a dozen small arrays costs about as much as
    stepping a simple environment."""

    def __init__(self, parts: Sequence[Mapping[str, tuple[tuple[int, ...], Any]]]) -> None:
        self._fields = []
        offset = 0
        for part, arrays in enumerate(parts):
            for agent, (shape, dtype) in arrays.items():
                dtype = np.dtype(dtype)
                offset += -offset % dtype.alignment
                self._fields.append((part, agent, shape, dtype, offset))
                offset += math.prod(shape) * dtype.itemsize
        self.nbytes = offset
        self._parts = len(parts)

    def split(self, buffer: Any) -> list[dict[str, np.ndarray]]:
        """The arrays, as views of ``buffer``."""
        parts: list[dict[str, np.ndarray]] = [{} for _ in range(self._parts)]
        for part, agent, shape, dtype, offset in self._fields:
            parts[part][agent] = np.ndarray(shape, dtype, buffer=buffer, offset=offset)
        return parts


def _outputs_layout(agents: list[str], observation_spaces: dict, num_envs: int) -> _Flat:
    """Observations, rewards, terminated and truncated of ``num_envs`` copies."""
    shapes = {agent: observation_spaces[agent] for agent in agents}
    observations = {agent: ((num_envs, *s.shape), s.dtype) for agent, s in shapes.items()}
    flags = {agent: ((num_envs,), np.bool_) for agent in agents}
    rewards = {agent: ((num_envs,), np.float32) for agent in agents}
    return _Flat([observations, rewards, flags, flags])


def _actions_layout(agents: list[str], action_spaces: dict, num_envs: int) -> _Flat:
    """The actions of ``num_envs`` copies (Discrete ones as int64)."""
    arrays = {}
    for agent in agents:
        space = action_spaces[agent]
        dtype = np.int64 if isinstance(space, spaces.Discrete) else space.dtype
        arrays[agent] = ((num_envs, *space.shape), dtype)
    return _Flat([arrays])


def _report(pipe: Any, exc: Exception) -> None:
    summary = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
    pipe.send(("error", (summary, traceback.format_exc())))


def _present(live: tuple[str, ...], after: list[str]) -> tuple[str, ...]:
    """The agents a step reports on: those that acted, and those that appeared during it."""
    if all(agent in live for agent in after):
        return live
    return live + tuple(agent for agent in after if agent not in live)


def _check_spaces(observations: dict[str, Any], actions: dict[str, Any]) -> None:
    for kind, by_agent in (("observes", observations), ("acts in", actions)):
        for agent, space in by_agent.items():
            if not isinstance(space, _SUPPORTED):
                raise EnvironmentNotFoundError(
                    f"agent '{agent}' {kind} a {type(space).__name__} space, which agile's "
                    "multi-agent vectors do not batch",
                    "use Box, Discrete, MultiDiscrete or MultiBinary spaces; a flattening "
                    "wrapper in environment.wrappers can help",
                )
