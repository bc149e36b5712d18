"""What every command shares: the error boundary, JSON output, and the fetch context."""

from __future__ import annotations

import contextlib
import json
import subprocess
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from cudaredist.errors import CudaRedistError, ToolError

if TYPE_CHECKING:  # the CLI starts without the cache, the sources and httpx
    from cudaredist.plan import Plan

_VERBOSE = False


def set_verbose(v: bool) -> None:
    global _VERBOSE
    _VERBOSE = v


def fail(message: str, code: int = 1) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@contextmanager
def errors() -> Iterator[None]:
    """The one error boundary: a :class:`CudaRedistError` becomes its paragraph and exit code; what
    escaped translation where it happened is translated here as a last resort."""
    try:
        yield
    except (typer.Exit, typer.Abort):  # an exit code already decided
        raise
    except KeyboardInterrupt:
        fail("interrupted; nothing was changed in the prefix", 130)
    except BrokenPipeError as exc:
        if exc.filename is not None:  # a pipe the command opened itself: an error like any other
            if _VERBOSE:
                traceback.print_exc()
            fail(str(translate(exc)))
        _stdout_closed()
    except Exception as exc:  # noqa: BLE001 - the boundary: every failure is one paragraph
        if _VERBOSE:
            traceback.print_exc()
        err = translate(exc)
        fail(str(err), err.exit_code)


def _stdout_closed() -> None:
    """The reader of stdout went away (``cudaredist list | head -1``): stop quietly with the status a
    process killed by SIGPIPE has, as git and coreutils do; nothing left to print, nothing to report."""
    import os
    import sys

    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit must not fail again
    raise typer.Exit(141)


def translate(exc: Exception) -> CudaRedistError:
    """``exc`` as the error a user reads (where it happens, an error is translated with more to say)."""
    if isinstance(exc, CudaRedistError):
        return exc
    if isinstance(exc, UnicodeEncodeError):
        from cudaredist.streams import is_stdout_failure, unprintable

        if is_stdout_failure(exc):
            return unprintable(exc)  # stdout's encoding cannot hold a path being printed
    if isinstance(exc, OSError):
        from cudaredist.localfs import local_error

        return local_error(exc, doing="use")
    if isinstance(exc, subprocess.CalledProcessError):
        argv = tuple(str(a) for a in exc.cmd) if isinstance(exc.cmd, (list, tuple)) else (str(exc.cmd),)
        out = exc.stderr or exc.stdout or b""
        text = (out.decode(errors="replace") if isinstance(out, bytes) else str(out)).strip()
        return ToolError(f"`{' '.join(argv)}` failed with exit status {exc.returncode}"
                         + (f": {' '.join(text.split())}" if text else ""),
                         command=argv, status=exc.returncode, output=text)
    return CudaRedistError(f"internal error (a bug in cudaredist): {type(exc).__name__}: {exc}; "
                           "run it again with --verbose and report the traceback")


def json_text(obj: Any) -> str:
    return json.dumps(obj, indent=2)


def emit_json(obj: Any) -> None:
    typer.echo(json_text(obj))


@dataclass
class Ctx:
    """What a command needs for resolving and fetching, built from its options."""

    cache_dir: Path | None
    offline: bool
    base_url: str | None
    mirror: str | None
    no_fallback: bool
    jobs: int = 8
    source: str | None = "nvidia"  # None: not given (install --lock takes the lock's)
    index_url: str | None = None
    trusted_hosts: list[str] | None = None

    def cache(self) -> Any:
        from cudaredist.cache import Cache

        return Cache(self.cache_dir)

    @contextmanager
    def open(self, source: str | None = None) -> Iterator[Any]:
        """The source to ask (``source`` overrides the command's), over one transport."""
        from cudaredist.fetch.transport import Transport
        from cudaredist.sources import Where, open_source

        transport = Transport(connections=self.jobs)
        where = Where(self.base_url, self.mirror, self.no_fallback, self.index_url, self.offline,
                      tuple(self.trusted_hosts) if self.trusted_hosts else None)
        try:
            yield open_source(source or self.source, transport, self.cache(), where)
        finally:
            transport.close()


def platforms_or_host(values: list[str] | None) -> list[str]:
    """--platform values, repeated or comma-separated, in order, once each; default the host's."""
    out = [p.strip() for v in values or [] for p in v.split(",") if p.strip()]
    from cudaredist.profiles import host_platform

    return list(dict.fromkeys(out)) or [host_platform()]


def human(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def print_plan(plan: Plan) -> None:
    typer.echo(f"CUDA {plan.release} ({plan.release_date or 'date unknown'}) for {plan.platform}, "
               f"profile {plan.profile}, from {plan.base_url}")
    for p in plan.products:
        from cudaredist.profiles import product_title

        typer.echo(f"with {product_title(p.name)} {p.release} ({p.release_date or 'date unknown'}, "
                   f"--with {p.requested}, {p.cuda_variant or 'any CUDA'} build) from {p.base_url}")
    width = max(len(i.component) for i in plan.items)
    for i in plan.items:
        typer.echo(f"  {i.component:<{width}}  {i.version:<14} {human(i.archive.size):>10}  {i.url}")
        typer.echo(f"  {'':<{width}}  sha256 {i.archive.sha256}")
    typer.echo(f"total: {len(plan.items)} archives, {human(plan.total_size)}")
    for note in plan.notes:
        typer.echo(f"note: {note}")




def target_prefix(prefix: Path | None, train: str | None, *, platform: str | None = None,
                  install_dir: Path | None = None) -> Path:
    """The tree a command acts on: ``--prefix``, or the best managed toolkit of TRAIN."""
    from cudaredist.managed import find_one
    from cudaredist.managed import install_dir as managed_dir
    from cudaredist.record import canonical_prefix

    if prefix is not None and train is not None:
        fail("give --prefix DIR or a TRAIN, not both", 2)
    if prefix is not None:
        return canonical_prefix(prefix)
    if train is None:
        fail("give --prefix DIR, or the TRAIN of a managed toolkit (see `cudaredist list`)", 2)
    assert train is not None
    return find_one(managed_dir(install_dir), train, platform).path
