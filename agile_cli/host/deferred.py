"""Running plugin code safely, and the parts of a registration that load on first use.

A plugin may name a spec (or a backend's options) by reference, ``"module:Class"``, instead of
passing the class: registering it then imports nothing, and the part is imported and checked
the first time something asks for it (:class:`Deferred`). ``agile validate`` so builds only the
specs of the manifest it reads, not those of every installed plugin.

Plugin code (an import, a hook, a check of what it registered) runs through
:func:`run_plugin_code`: with ``sys.stdout`` sent to stderr, so that what a plugin prints cannot
corrupt machine-readable output, and with every exception but the user's Ctrl-C caught.
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from agile_cli.errors import EXIT_USAGE, PluginError

T = TypeVar("T")


def run_plugin_code(call: Callable[[], T]) -> tuple[T | None, BaseException | None]:
    """``call()``'s result, or what it raised; its prints go to stderr.

    Only the user's Ctrl-C gets through: a plugin's ``SystemExit``, a ``KeyboardInterrupt``
    it raises itself (no SIGINT arrived) or any other ``BaseException`` must not end the CLI.
    ``redirect_stdout`` puts back the stdout it found even if the plugin rebinds
    ``sys.stdout`` itself. Output written to file descriptor 1 from C code is not redirected.
    """
    with contextlib.redirect_stdout(sys.stderr), _ctrl_c_noticed() as pressed:
        try:
            return call(), None
        except KeyboardInterrupt as exc:
            if pressed:
                raise
            return None, exc
        except BaseException as exc:  # contained: reported as a failed row
            return None, exc


@contextlib.contextmanager
def _ctrl_c_noticed() -> Iterator[list[bool]]:
    """A list that holds True once SIGINT arrives in the block (which still interrupts it as
    Python's default handler would); only the main thread receives signals, so elsewhere
    it stays empty."""
    pressed: list[bool] = []
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield pressed  # an ignored or foreign handler is left alone
        return

    def interrupt(signum: int, frame: Any) -> None:
        pressed.append(True)
        previous(signum, frame)

    signal.signal(signal.SIGINT, interrupt)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


def describe(exc: BaseException) -> str:
    """What went wrong, on one line: an agile error's message, else the exception's type and
    what it said."""
    if isinstance(exc, PluginError):
        message = exc.message
    else:
        said = str(exc)
        message = f"{type(exc).__name__}: {said}" if said else type(exc).__name__
    return " ".join(message.split())


class UnloadableError(PluginError):
    """A part a plugin registered cannot be loaded, or is not what it must be.

    Its ``message`` says which part and why (the row ``agile plugins`` shows); ``plugin``
    names the plugin, so that a command can say whose part it needed.
    """

    exit_code = EXIT_USAGE

    def __init__(self, message: str, plugin: str, hint: str | None = None) -> None:
        hint = hint or f"fix or reinstall plugin '{plugin}'; see `agile plugins`"
        super().__init__(message, hint)
        self.plugin = plugin

    def lines(self) -> list[str]:
        return [f"plugin '{self.plugin}' failed to load: {self.message} ({self.hint})"]

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.plugin, self.hint), self.__dict__)


class Deferred(Generic[T]):
    """One part of a registration (a spec, a backend's options): the object itself, or a
    ``"module:Attribute"`` reference imported the first time :meth:`get` is called.

    Either way the part is checked once, by ``check`` (which returns it, or raises
    :class:`~agile_cli.errors.PluginError` saying what is wrong), and the result is kept: a
    failure is raised again, without importing again, each time the part is asked for.

    :param label: the registration, as messages name it (``algorithm 'DQN'``).
    """

    def __init__(self, target: Any, check: Callable[[Any], T], *, plugin: str, label: str) -> None:
        self.target = target
        self.plugin = plugin
        self.label = label
        self._check = check
        self._value: T | None = None
        self._failure: UnloadableError | None = None
        self._done = False

    @property
    def by_reference(self) -> bool:
        """Whether the part was registered as a ``"module:Attribute"`` string."""
        return isinstance(self.target, str)

    def get(self) -> T:
        """The part, imported and checked on the first call.

        :raises UnloadableError: it cannot be imported, or its check refused it.
        """
        if not self._done:
            self._value, self._failure = self._load()
            self._done = True
        if self._failure is not None:
            failure = self._failure
            raise UnloadableError(failure.message, failure.plugin, failure.hint)
        return self._value  # type: ignore[return-value]  # set whenever there is no failure

    def _load(self) -> tuple[T | None, UnloadableError | None]:
        target: Any = self.target
        if self.by_reference:
            target, error = run_plugin_code(lambda: import_reference(self.target))
            if error is not None:
                said = f"{self.label}: cannot load '{self.target}': {describe(error)}"
                return None, UnloadableError(said, self.plugin)
        value, error = run_plugin_code(lambda: self._check(target))
        if error is not None:
            hint = error.hint if isinstance(error, PluginError) else None
            return None, UnloadableError(describe(error), self.plugin, hint)
        return value, None

    def __repr__(self) -> str:
        state = "loaded" if self._done else "not loaded"
        return f"Deferred({self.target!r}, {state})"


def import_reference(reference: str) -> Any:
    """The attribute ``"package.module:Attribute"`` names (the module itself without
    ``:Attribute``), its module imported now; what importing it raises propagates."""
    module_name, _, attribute = reference.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split(".") if attribute else []:
        target = getattr(target, part)
    return target
