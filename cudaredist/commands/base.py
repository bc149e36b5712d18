"""What every command shares: the error boundary, JSON output, and the fetch context."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from cudaredist.errors import CudaRedistError
from cudaredist.interrupts import Interrupted, signal_exit_code, signum_of, stopped_by, unwinding
from cudaredist.streams import unprintable

if TYPE_CHECKING:  # the CLI starts without the cache, the sources and httpx
    from cudaredist.sources.base import Where

_VERBOSE = False


def set_verbose(v: bool) -> None:
    global _VERBOSE
    _VERBOSE = v


def fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def errors() -> Iterator[None]:
    """The one error boundary: a :class:`CudaRedistError` becomes its paragraph and exit code; what
    escaped translation where it happened is translated here as a last resort. Inside it, Ctrl-C and
    SIGTERM unwind the command (:func:`cudaredist.interrupts.unwinding`)."""
    try:
        with unwinding():
            yield
    except (typer.Exit, typer.Abort):  # an exit code already decided
        raise
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated)
        # a step that changes a prefix, a cache or the train links says what it left (Interrupted);
        # elsewhere no such step was running, and nothing is claimed about what the command had done
        said = str(exc) if isinstance(exc, Interrupted) else stopped_by(signum_of(exc))
        fail(said, signal_exit_code(signum_of(exc)))
    except Exception as exc:  # noqa: BLE001 - the boundary: every failure is one paragraph
        if isinstance(exc, OSError) and exc.filename is None and (
                isinstance(exc, BrokenPipeError) or _writing_stdout(exc)):
            _stdout_failed(exc)
        if _VERBOSE:
            traceback.print_exc()
        err = translate(exc)
        fail(str(err), err.exit_code)


def _writing_stdout(exc: BaseException) -> bool:
    """Whether ``exc`` came from writing stdout (a failed write, or text its encoding cannot hold):
    the innermost frame is ``typer.echo``'s, to stdout. A codec written in Python (Windows' cp1252,
    a charmap) raises from its own frame below echo's, so the codecs' frames are passed over."""
    frames = [frame for frame, _line in traceback.walk_tb(exc.__traceback__)
              if not frame.f_globals.get("__name__", "").startswith("encodings.")]
    return bool(frames) and frames[-1].f_locals.get("file") is sys.stdout


def _stdout_failed(exc: OSError) -> NoReturn:
    """stdout cannot be written. Its reader went away (``cudaredist list | head -1``): stop quietly with
    the status a process killed by SIGPIPE has, as git and coreutils do. Else (a full disk, a closed
    stdout: streams.py) one paragraph on stderr and exit 1. Either way stdout becomes the null device,
    so Python's flush at exit does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):
        os.dup2(devnull, sys.stdout.fileno())
    if isinstance(exc, BrokenPipeError):
        raise typer.Exit(141)
    fail(f"cannot write to stdout: {exc.strerror or exc}. Nothing more was printed; give it a terminal, "
         "a file or a pipe that takes the output", 1)


def translate(exc: Exception) -> CudaRedistError:
    """``exc`` as the error a user reads (where it happens, an error is translated with more to say)."""
    if isinstance(exc, CudaRedistError):
        return exc
    if isinstance(exc, UnicodeEncodeError) and _writing_stdout(exc):
        return unprintable(exc)  # stdout's encoding cannot hold a path being printed
    if isinstance(exc, OSError):
        from cudaredist.localfs import local_error

        return local_error(exc, doing="use")
    return CudaRedistError(f"internal error (a bug in cudaredist): {type(exc).__name__}: {exc}; "
                           "run it again with --verbose and report the traceback")


def emit_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2))


def where(params: dict[str, Any]) -> Where:
    """Where a command resolves and fetches from: the options install, resolve, trains, mirror and
    lock share, from the command's parameters of the same names (its ``locals()``)."""
    from cudaredist.sources.base import Where

    trusted = params["trusted_host"]
    return Where(params["base_url"], params["mirror"], params["no_fallback"], params["index_url"],
                 params["offline"], tuple(trusted) if trusted else None, params["channel"])


@contextlib.contextmanager
def opened(params: dict[str, Any], jobs: int = 8) -> Iterator[Any]:
    """The source to ask, over one transport of ``jobs`` connections (``params``: as :func:`where`'s,
    with ``source`` and ``cache_dir``)."""
    from cudaredist.cache.store import Cache
    from cudaredist.fetch.transport import Transport
    from cudaredist.sources import open_source

    with Transport(connections=jobs) as transport:
        yield open_source(params["source"], transport, Cache(params["cache_dir"]), where(params))


def command(body: Callable[..., None]) -> Callable[..., None]:
    """The error boundary (:func:`errors`) around a command, whose ``--verbose`` (every command
    declares one) shows a failure's traceback too. Every command is one."""

    @functools.wraps(body)
    def run(*args: Any, **kw: Any) -> None:
        set_verbose(bool(kw.get("verbose")))
        with errors():
            body(*args, **kw)

    return run

