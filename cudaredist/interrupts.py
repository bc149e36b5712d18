"""Ctrl-C and SIGTERM: what a step that must not be cut in two does with them, and what the user reads.

A rename pair that swaps trees, or the putting back of files an uninstall moved out, runs under
:func:`deferred`: a signal that arrives meanwhile is held and raised once the step is done, so
the prefix is never left between two states. :class:`Interrupted` carries what the prefix holds
afterwards, which the command line prints (``interrupted; ... was left as it was``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future

_T = TypeVar("_T")


def signal_exit_code(signum: int) -> int:
    """The exit status of a run a signal stopped: the shell's 128 + N (130 Ctrl-C, 143 SIGTERM)."""
    return 128 + signum


def stopped_by(signum: int) -> str:
    """What a run that ``signum`` stopped says (nothing claimed about what it had done)."""
    return "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted (Ctrl-C)"


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM), with what the prefix holds now as its message. Still a
    KeyboardInterrupt: code that lets Ctrl-C through lets this through."""

    def __init__(self, message: str, *, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = signum


class Terminated(KeyboardInterrupt):
    """SIGTERM as an exception (:func:`unwinding`): unwound like Ctrl-C, exit status 143."""


@contextlib.contextmanager
def _handling(handlers: dict[int, Any]) -> Iterator[None]:
    """The block with ``handlers`` (an ignored signal stays ignored), the ones there were after it.
    Outside the main thread (where Python delivers signals) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in handlers}
    for s, handler in handlers.items():
        if previous[s] not in (signal.SIG_IGN, None):
            signal.signal(s, handler)
    try:
        yield
    finally:
        for s, was in previous.items():
            if was is not None:
                signal.signal(s, was)


@contextlib.contextmanager
def unwinding() -> Iterator[None]:
    """While a command runs, Ctrl-C raises KeyboardInterrupt and SIGTERM (a CI job cancelled, ``kill``)
    :class:`Terminated`, so they unwind alike: staging trees are removed and an interrupted swap or
    uninstall is finished or undone. Before and after, the handlers there were (entry.py's end the
    process at once)."""
    with _handling({signal.SIGINT: signal.default_int_handler, signal.SIGTERM: _raise_terminated}):
        yield


def stop_at_once() -> None:
    """Until a command's error boundary runs (:func:`unwinding`), and again once it is done, Ctrl-C and
    SIGTERM end the process at once, with the boundary's paragraph and 128 + N: nothing has been
    changed yet (start-up, parsing) or everything is done. An ignored signal stays ignored."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _stop)


def _stop(signum: int, _frame: FrameType | None) -> None:
    with contextlib.suppress(OSError):  # (no stderr: the status alone says it)
        os.write(2, f"error: {stopped_by(signum)}\n".encode())
    os._exit(signal_exit_code(signum))


def _raise_terminated(_signum: int, _frame: FrameType | None) -> None:
    raise Terminated()


def signum_of(exc: BaseException) -> int:
    if isinstance(exc, Interrupted):
        return exc.signum
    return signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT


def with_done(exc: KeyboardInterrupt, plain: str, what: str, done: list[str]) -> KeyboardInterrupt:
    """``exc`` saying what the prefix holds (its own words, or ``plain`` for a bare Ctrl-C) and what
    the command had done before it (``what: done, ...``, when anything)."""
    said = str(exc) if isinstance(exc, Interrupted) else plain
    return Interrupted(said + (f"; {what}: {', '.join(done)}" if done else ""), signum=signum_of(exc))


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block is done, then deliver the first that came to the
    handler there was (Ctrl-C's raises KeyboardInterrupt, :func:`unwinding`'s Terminated, an
    unhandled SIGTERM ends the process). Outside the main thread (where Python delivers signals) it
    does nothing."""
    came: list[int] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        came.append(signum)

    with _handling(dict.fromkeys((signal.SIGINT, signal.SIGTERM), hold)):
        yield
    if came:
        signal.raise_signal(came[0])  # to the handler there was: Ctrl-C's raises KeyboardInterrupt


def wait_first(fs: Iterable[Future[Any]], timeout: float = 0.2) -> tuple[set[Future[Any]], set[Future[Any]]]:
    """``concurrent.futures.wait(fs, timeout, FIRST_COMPLETED)`` for the main thread, with Ctrl-C and
    SIGTERM held (:func:`deferred`) until it returns, within ``timeout``, and raised then. Raised
    inside the wait, KeyboardInterrupt can come while the wait takes back a lock that a finishing
    worker holds: the wait's ``with`` then releases the worker's hold, and the worker's own release
    fails ("release unlocked lock", a traceback on stderr after Ctrl-C; seen once in CI)."""
    from concurrent.futures import FIRST_COMPLETED, wait

    with deferred():
        return wait(fs, timeout=timeout, return_when=FIRST_COMPLETED)


def as_done(fs: Iterable[Future[_T]]) -> Iterator[Future[_T]]:
    """Each of ``fs`` as it completes (``as_completed``), waited for through :func:`wait_first`."""
    pending: set[Future[Any]] = set(fs)
    while pending:
        done, pending = wait_first(pending)
        yield from done


def results(fs: Iterable[Future[_T]]) -> list[_T]:
    """Every result of ``fs`` in their order (``pool.map``'s), once all are done (waited for through
    :func:`as_done`); the first failure in that order is raised."""
    fs = list(fs)
    for _done in as_done(fs):
        pass
    return [f.result() for f in fs]
