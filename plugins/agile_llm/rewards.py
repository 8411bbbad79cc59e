"""Loading the user's rubric for a rollout over dataset rows, and calling it.

The rubric file is the user's own Python: importing it runs their code, which is what a rubric
file is for. It is imported when training starts (never by ``agile validate``).

``environment.rubric_name`` names, in that file, either a function called once per completion,
positionally, as ``fn(completion, answer, question)`` -> a number (the reference's reward
function, ``reward_fn_name`` in its August form), or a rubric in OpenEnv's style: a class
(made once, with no arguments) or an object, called as ``rubric(action, observation)`` where
``action.message`` is the completion and ``observation.answer`` and ``observation.question``
are the row's (``observation.metadata`` is a dict it may write into). agile does not import
OpenEnv: a rubric file that subclasses its ``Rubric`` needs it installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import numbers
import os
import signal
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from agile_cli import TrainingError, UsageError
from agile_cli.helpers import printable
from agile_llm.messages import error_detail

_WHERE = "environment.rubric_file_path"
_NAME = "environment.rubric_name"
#: Characters of a value the function returned shown in a message.
_SHOWN = 200
#: Seconds one call may take by default (``environment.reward_timeout``).
REWARD_TIMEOUT = 30.0
#: Seconds past the bound after which a call that could not be interrupted (stuck inside C
#: code, which holds off Python's signal handlers) ends the process.
_GRACE = 10.0


class RewardTimeout(Exception):
    """A reward function's call ran past its bound."""


class RewardFunction:
    """The user's reward function, called once per completion.

    :param function: the user's callable, taking ``(completion, answer, question)``.
    :param label: how errors name it, e.g. ``reward.py:score``.
    :param timeout: seconds one call may take (see :class:`Bound`).
    """

    def __init__(
        self, function: Callable[..., Any], label: str, timeout: float = REWARD_TIMEOUT
    ) -> None:
        self.function = function
        self.label = label
        self.timeout = timeout

    def __call__(
        self, completions: Sequence[str], answers: Sequence[Any], questions: Sequence[str]
    ) -> np.ndarray:
        """One reward per completion, as float64.

        :param completions: the generated texts.
        :param answers: each completion's reference answer.
        :param questions: each completion's question.
        :raises TrainingError: the function raised, or returned something that is not a
            finite number.
        """
        if not len(completions) == len(answers) == len(questions):
            raise TrainingError(
                f"{self.label}: {len(completions)} completions but {len(answers)} answers "
                f"and {len(questions)} questions"
            )
        rows = zip(completions, answers, questions, strict=True)
        with Bound(self.timeout) as bound:
            scores = [self._one(bound, i, *row) for i, row in enumerate(rows)]
        return np.array(scores, dtype=np.float64)

    def _one(self, bound: Bound, index: int, completion: str, answer: Any, question: str) -> float:
        row = f"completion {index} of the batch (question {_cut(question)})"
        try:
            with bound.call(f"reward function {self.label}, scoring {row}"):
                value = self.function(completion, answer, question)
        except RewardTimeout:
            raise TrainingError(
                f"reward function {self.label} ran for more than {self.timeout:g} s on {row}",
                "make it faster, or raise environment.reward_timeout",
            ) from None
        except Exception as error:
            what = f"raised on {row}: {type(error).__name__}: {error_detail(error)}"
            raise self._failed(what, error) from None
        except SystemExit as error:  # sys.exit() in the function must not end the run unsaid
            what = f"raised SystemExit({error_detail(error)}) while scoring {row}"
            raise self._failed(what, error) from None
        number = as_number(value)
        if number is None:
            raise TrainingError(
                f"reward function {self.label} returned {_cut(value)} for {row}, "
                "not a finite number",
                "return a float (or an int or bool) for every completion",
            )
        return number

    def _failed(self, what: str, error: BaseException) -> TrainingError:
        return TrainingError(
            f"reward function {self.label} {what}{_user_line(error, None)}",
            "fix the reward function; it is called as fn(completion, answer, question)",
        )


def _cut(value: Any) -> str:
    """``repr(value)``, printable and at most :data:`_SHOWN` characters."""
    shown = printable(repr(value))
    return shown if len(shown) <= _SHOWN else shown[: _SHOWN - 3] + "..."


class Bound:
    """At most ``seconds`` for each call made in :meth:`call`, for a batch of calls (enter it
    once per batch: its watchdog thread and alarm handler cost more than a call).

    Past the bound, :class:`RewardTimeout` is raised in the call (by SIGALRM, in the main
    thread of a Unix process). A call that cannot be interrupted (stuck inside C code, or
    where no alarm can be set) ends the whole process :data:`_GRACE` seconds later, saying
    what it was doing: a run never stalls in silence. The last whole generation's checkpoint
    stays on disk.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.alarm = hasattr(signal, "setitimer") and (
            threading.current_thread() is threading.main_thread()
        )
        self.running: tuple[float, str] | None = None  # (when the call began, what it does)
        self._done = threading.Event()
        self._previous: Any = None

    def __enter__(self) -> Bound:
        if self.alarm:
            self._previous = signal.signal(signal.SIGALRM, _expired)
        threading.Thread(target=self._watch, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self.alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)

    @contextlib.contextmanager
    def call(self, doing: str) -> Iterator[None]:
        """One bounded call; ``doing`` says what it is, should the process have to end."""
        self.running = (time.monotonic(), doing)
        if self.alarm:
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        try:
            yield
        finally:
            if self.alarm:
                signal.setitimer(signal.ITIMER_REAL, 0)
            self.running = None

    def _watch(self) -> None:
        limit = self.seconds + (_GRACE if self.alarm else 0.0)
        while not self._done.wait(min(0.5, limit / 4)):
            running = self.running
            if running is not None and time.monotonic() - running[0] > limit:
                _give_up(self.seconds, running[1])


def _expired(signum: int, frame: Any) -> None:
    raise RewardTimeout


def _give_up(seconds: float, doing: str) -> None:
    """The watchdog's last word: the call could not be interrupted."""
    said = (
        f"error: {doing} has run for more than {seconds:g} s and cannot be interrupted (it is "
        "inside compiled code); agile stops. The last whole generation's checkpoint is kept: "
        "agile train --resume RUN_DIR continues it once the function is fixed"
    )
    sys.stderr.write("\n" + printable(said) + "\n")
    sys.stderr.flush()
    os._exit(1)


def as_number(value: Any) -> float | None:
    """``value`` as a finite float when it is a real number (or a 0-d array or tensor of
    one), else None. Strings are not numbers."""
    if hasattr(value, "item") and not isinstance(value, numbers.Real):
        try:
            value = value.item()
        except (TypeError, ValueError, RuntimeError):
            return None
    if not isinstance(value, numbers.Real):
        return None
    number = float(value)
    return number if np.isfinite(number) else None


def load_reward_function(path: str, name: str, timeout: float = REWARD_TIMEOUT) -> RewardFunction:
    """The rubric ``name`` of the Python file at ``path``, ready to score completions.

    :param path: the rubric file, relative to the working directory.
    :param name: the function, rubric class or rubric object's name in that file.
    :param timeout: seconds one call may take.
    :raises UsageError: the file is missing or no ``.py`` file, raises when imported, has no
        ``name``, or ``name`` is neither a rubric nor a function of ``(completion, answer,
        question)``.
    """
    file = Path(path).absolute()
    if not file.is_file():
        raise UsageError(f"{_WHERE}: no file {file}", "paths are relative to the working directory")
    if file.suffix != ".py":
        raise UsageError(f"{_WHERE}: {file} is not a .py file", "give a Python file")
    module = _import(file)
    found = getattr(module, name, None)
    label = f"{file.name}:{name}"
    if found is None:
        raise UsageError(
            f"{_NAME}: {file.name} defines no {name!r}; "
            f"it defines {_defined_callables(module) or 'no functions'}",
            "set rubric_name to one of them",
        )
    if _is_rubric(found):
        return RewardFunction(_rubric_scorer(_made(found, label)), label, timeout)
    if not callable(found):
        raise UsageError(
            f"{_NAME}: {name!r} in {file.name} holds "
            f"{_article(type(found).__name__)}, not a function or a rubric"
        )
    _check_signature(found, label)
    return RewardFunction(found, label, timeout)


class _Action:
    """What a rubric is given as the model's action: its text, as ``message``."""

    def __init__(self, message: str) -> None:
        self.message = message


class _Observation:
    """What a rubric is given as the observation: the row's answer and question."""

    def __init__(self, answer: Any, question: str) -> None:
        self.answer, self.question = answer, question
        self.metadata: dict[str, Any] = {}
        self.done, self.reward = True, None


def _is_rubric(found: Any) -> bool:
    """A class, or an object with ``forward`` (OpenEnv's rubrics are both)."""
    return isinstance(found, type) or (
        not inspect.isroutine(found) and callable(getattr(found, "forward", None))
    )


def _made(found: Any, label: str) -> Any:
    """The rubric object: ``found``, or an instance of the class ``found``."""
    if not isinstance(found, type):
        return found
    try:
        return found()
    except (Exception, SystemExit) as error:
        raise UsageError(
            f"{_NAME}: making the rubric {label}() raised {type(error).__name__}: "
            f"{error_detail(error)}{_user_line(error, None)}",
            "a rubric class is made with no arguments; give it defaults",
        ) from None


def _rubric_scorer(rubric: Any) -> Callable[[str, Any, str], Any]:
    """``fn(completion, answer, question)`` asking ``rubric`` (its call, else its forward)."""
    call = rubric if callable(rubric) else rubric.forward

    def score(completion: str, answer: Any, question: str) -> Any:
        return call(_Action(completion), _Observation(answer, question))

    return score


def _import(file: Path) -> ModuleType:
    """Run ``file`` as a fresh module (a unique name, so two reward files never clash)."""
    module_name = f"agile_reward_{file.stem}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise UsageError(f"{_WHERE}: cannot import {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up here
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as error:
        del sys.modules[module_name]
        raise UsageError(
            f"{_WHERE}: importing {file} raised {type(error).__name__}: {error_detail(error)}"
            f"{_user_line(error, file)}",
            "fix the rubric file; agile imports it as a module when training starts",
        ) from None
    return module


def _user_line(error: BaseException, file: Path | None) -> str:
    """Where in the user's file ``error`` happened (`` at line N: code``), as far as known:
    the innermost frame in ``file`` (any file but this one when None)."""
    if isinstance(error, SyntaxError) and error.lineno is not None:
        return f" at line {error.lineno}: {printable((error.text or '').strip())[:_SHOWN]}"
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if (Path(frame.filename) == file if file else frame.filename != __file__)
    ]
    if not frames:
        return ""
    frame = frames[-1]
    code = printable((frame.line or "").strip())[:_SHOWN]
    return f" at {printable(Path(frame.filename).name)} line {frame.lineno}: {code}"


def _article(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _defined_callables(module: ModuleType) -> str:
    """The functions and classes ``module`` defines itself (not those it imports)."""
    names = [
        name
        for name, value in vars(module).items()
        if callable(value)
        and not name.startswith("_")
        and getattr(value, "__module__", None) == module.__name__
    ]
    return ", ".join(sorted(names))


def _check_signature(function: Callable[..., Any], label: str) -> None:
    """Refuse a function that cannot be called as ``fn(completion, answer, question)``."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # a builtin or extension without a signature: let the call decide
    try:
        signature.bind("completion", "answer", "question")
    except TypeError as error:
        raise UsageError(
            f"{_NAME}: {label}{signature} cannot be called with three arguments ({error})",
            "agile calls it as fn(completion, answer, question) and expects a number",
        ) from None
