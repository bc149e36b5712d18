"""The ``cudaredist`` console script and ``python -m cudaredist``: the command line, started and ended lean.

``cudaredist install ...`` runs often, and its no-op (the prefix already holds the request) is
mostly start-up: for it the command line imports and builds the install command alone
(:data:`cudaredist.commands.install_only`); every other command line gets every command. And once
the command is done the process ends without tearing the interpreter down (:func:`leave`).
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from typing import NoReturn

YOUNG = 100_000


def main() -> None:
    from cudaredist.interrupts import stop_at_once

    stop_at_once()  # until the command's error boundary runs
    # what start-up imports lives as long as the process: the collector neither runs while it is
    # made (tens of passes over a growing heap) nor looks at it again (~6 ms of a warm install)
    gc.disable()
    from cudaredist import commands, streams

    commands.install_only = sys.argv[1:2] == ["install"]
    from cudaredist.cli import app

    gc.freeze()
    # and while the command runs, the youngest generation is collected after YOUNG new objects, not 700:
    # what an install makes (a record per file, its claims, the plan) lives until the end, and
    # collecting it young only moves it on (40-56 collections, 3-4 ms of a warm hard-linked install);
    # cycles are still collected, later (a cold install's peak RSS did not move)
    gc.set_threshold(YOUNG)
    gc.enable()
    streams.configure()  # a redirected stdout on Windows: the code page its reader decodes with
    try:
        app(prog_name="cudaredist")  # typer ends with SystemExit, whatever the outcome
    except SystemExit as done:
        leave(done.code)


def leave(code: str | int | None) -> NoReturn:
    """End the process with ``code`` as ``sys.exit(code)`` would, without the interpreter's teardown.

    Freeing every module and object of a finished command takes 10-20 ms, a sixth of a warm install
    and more of a no-op, and nothing in it is the command's: its files are closed and its threads
    joined by then. So the exit handlers run (``atexit``, and through it ``weakref.finalize``),
    stdout and stderr are flushed, and the process ends there. Where that is not all (another thread
    still running, a code that is not a status byte (`cudaredist run` passes a child's on), a stream that
    cannot be flushed), the ordinary exit.
    """
    run_handlers = getattr(atexit, "_run_exitfuncs", None)
    if not isinstance(code, int) or not 0 <= code < 256 or threading.active_count() > 1 \
            or run_handlers is None:
        sys.exit(code)
    run_handlers()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        sys.exit(code)  # (a reader gone: Python's own exit says so, as before)
    os._exit(code)
