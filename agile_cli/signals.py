"""Ctrl-C around work that must not be cut in half (light: nothing here imports torch)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def interrupt_held() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) until the block ends, then deliver it.

    For work a ``KeyboardInterrupt`` would leave half done: a checkpoint being written
    (torch's zip writer, interrupted, fails in its own clean-up and hides the interrupt), a
    generation between its metrics line and its checkpoint, a Ray instance starting or
    stopping. The user's Ctrl-C waits for the block. Holds nest: an inner block's Ctrl-C is
    delivered when the outermost one ends. Only the main thread hears signals, and an ignored
    or foreign handler is left as it is.
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        previous(signal.SIGINT, None)
