"""Interrupts: SIGTERM behaves like Ctrl-C, and clean-up finishes even when a second one comes.

A KFP step is cancelled (or hits its timeout) with SIGTERM. Python's default SIGTERM action ends
the process at once, skipping every ``finally``: a vLLM server, guidellm's workers or a deploy
that is waiting for Ready would be left behind. :func:`sigterm_as_interrupt` turns SIGTERM into
:class:`KeyboardInterrupt`, so the same clean-up paths run for a cancelled run as for Ctrl-C;
:func:`shielded` holds both signals off while a clean-up (a rollback) runs to its end.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered as an interrupt (``signal`` names the signal)."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum: int, _frame: Any) -> None:
    raise Terminated(signum)


def sigterm_as_interrupt() -> None:
    """Make SIGTERM raise :class:`Terminated` in this process (main thread only; else a no-op)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise)


def signal_name(err: BaseException) -> str:
    """``SIGTERM`` or ``SIGINT`` for an interrupt exception."""
    return signal.Signals(err.signum).name if isinstance(err, Terminated) else "SIGINT"


@contextmanager
def shielded() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM inside the block (a rollback must finish); restore after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in saved:
        signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
