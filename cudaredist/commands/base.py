"""What every command shares: the error boundary, JSON output, and the fetch context."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import json
import subprocess
import traceback
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from cudaredist.commands import options as o
from cudaredist.errors import CudaRedistError, ToolError, signal_exit_code, stopped_by
from cudaredist.localfs import mb
from cudaredist.profiles import effective_profile, product_title

if TYPE_CHECKING:  # the CLI starts without the cache, the sources and httpx
    from cudaredist.plan import Plan
    from cudaredist.sources import Where

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
    from cudaredist.interrupts import unwinding

    try:
        with unwinding():
            yield
    except (typer.Exit, typer.Abort):  # an exit code already decided
        raise
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated)
        from cudaredist.interrupts import Interrupted, signum_of

        if isinstance(exc, Interrupted):  # it says what the prefix holds now
            fail(str(exc), exc.exit_code)
        # a step that changes a prefix, a cache or the train links says what it left (Interrupted);
        # here no such step was running, and nothing is claimed about what the command had done
        fail(stopped_by(signum_of(exc)), signal_exit_code(signum_of(exc)))
    except Exception as exc:  # noqa: BLE001 - the boundary: every failure is one paragraph
        if isinstance(exc, OSError) and exc.filename is None and (
                isinstance(exc, BrokenPipeError) or _writing_stdout(exc)):
            _stdout_failed(exc)
        if _VERBOSE:
            traceback.print_exc()
        err = translate(exc)
        fail(str(err), err.exit_code)


def _writing_stdout(exc: BaseException) -> bool:
    """Whether ``exc`` came from writing stdout: the innermost frame is ``typer.echo``'s, to stdout."""
    import sys

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_locals.get("file") is sys.stdout


def _stdout_failed(exc: OSError) -> NoReturn:
    """stdout cannot be written. Its reader went away (``cudaredist list | head -1``): stop quietly with
    the status a process killed by SIGPIPE has, as git and coreutils do. Else (a full disk, a closed
    stdout: streams.py) one paragraph on stderr and exit 1. Either way stdout becomes the null device,
    so Python's flush at exit does not fail again."""
    import os
    import sys

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


def emit_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2))


@dataclasses.dataclass(frozen=True)
class Ctx:
    """Where a command resolves and fetches from: the options install, resolve, trains, mirror and
    lock share (a command takes them as one ``ctx: Ctx`` parameter, see :func:`command`)."""

    base_url: o.BaseUrlOpt = None
    channel: o.ChannelOpt = None
    mirror: o.MirrorOpt = None
    no_fallback: o.NoFallbackOpt = False
    trusted_host: o.TrustedHostOpt = None
    cache_dir: o.CacheDirOpt = None
    offline: o.OfflineOpt = False
    source: o.SourceOpt = None  # None: not given (install --lock takes the lock's)
    index_url: o.IndexUrlOpt = None

    def where(self) -> Where:
        from cudaredist.sources import Where

        return Where(self.base_url, self.mirror, self.no_fallback, self.index_url, self.offline,
                     tuple(self.trusted_host) if self.trusted_host else None, self.channel)

    def cache(self) -> Any:
        from cudaredist.cache import Cache

        return Cache(self.cache_dir)

    @contextlib.contextmanager
    def open(self, jobs: int = 8) -> Iterator[Any]:
        """The source to ask, over one transport of ``jobs`` connections."""
        from cudaredist.fetch.transport import Transport
        from cudaredist.sources import open_source

        with Transport(connections=jobs) as transport:
            yield open_source(self.source, transport, self.cache(), self.where())


@dataclasses.dataclass(frozen=True)
class Selection:
    """What to install: the options install, resolve, mirror and lock share (see :func:`command`)."""

    profile: o.ProfileOpt = None
    component: o.ComponentOpt = None
    only: o.OnlyOpt = False
    with_: o.WithOpt = None

    def resolving(self) -> dict[str, Any]:
        """The keyword arguments of a source's ``resolve`` and ``mirror_content``."""
        return {"profile": effective_profile(self.profile, self.only),
                "components": self.component or [], "products": self.with_ or []}


# what a command's ``ctx: Ctx = OPTIONS`` (``sel: Selection = SELECTION``) stands for: typer fills
# it from the options
OPTIONS, SELECTION = Ctx(), Selection()


def command(body: Callable[..., None]) -> Callable[..., None]:
    """A command as typer should see it: a parameter annotated with a group of options (a dataclass
    whose fields are options: :class:`Ctx`, :class:`Selection`) stands for those options, and
    ``body`` gets the group built from them; ``--verbose`` (every command has it) is applied and
    :func:`errors` is the boundary around it. Every command is one."""
    sig = inspect.signature(body, eval_str=True)
    params: list[inspect.Parameter] = []
    groups: dict[str, Any] = {}
    wants_verbose = "verbose" in sig.parameters  # else taken here: every command has --verbose
    for p in sig.parameters.values():
        if dataclasses.is_dataclass(p.annotation):
            groups[p.name] = p.annotation
            hints = typing.get_type_hints(p.annotation, include_extras=True)
            params += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                         annotation=hints[f.name]) for f in dataclasses.fields(p.annotation)]
        else:
            params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))
    if not wants_verbose:
        params.append(inspect.Parameter("verbose", inspect.Parameter.KEYWORD_ONLY, default=False,
                                        annotation=o.VerboseOpt))

    @functools.wraps(body)
    def run(**kw: Any) -> None:
        set_verbose(bool(kw["verbose"] if wants_verbose else kw.pop("verbose")))
        with errors():
            for name, group in groups.items():
                kw[name] = group(**{f.name: kw.pop(f.name) for f in dataclasses.fields(group)})
            body(**kw)

    run.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    return run


def platforms_or_host(values: list[str] | None) -> list[str]:
    """--platform values, repeated or comma-separated, in order, once each; default the host's."""
    out = [p.strip() for v in values or [] for p in v.split(",") if p.strip()]
    from cudaredist.profiles import host_platform

    return [host_platform(p) for p in dict.fromkeys(out)] or [host_platform()]


def print_plan(plan: Plan) -> None:
    typer.echo(f"CUDA {plan.release} ({plan.release_date or 'date unknown'}) for {plan.platform}"
               + (f" with the tools of {plan.host}" if plan.host else "") + ", "
               f"profile {plan.profile}, from {plan.base_url}"
               + (f" ({plan.channel} channel)" if plan.channel else ""))
    for p in plan.products:
        typer.echo(f"with {product_title(p.name)} {p.release} ({p.release_date or 'date unknown'}, "
                   f"--with {p.requested}, {p.cuda_variant or 'any CUDA'} build) from {p.base_url}")
    width = max(len(i.component) for i in plan.items)
    for i in plan.items:
        typer.echo(f"  {i.component:<{width}}  {i.version:<14} {mb(i.archive.size):>10}  {i.url}"
                   + (f"  ({i.platform})" if i.platform else ""))
        typer.echo(f"  {'':<{width}}  sha256 {i.archive.sha256}")
    typer.echo(f"total: {len(plan.items)} archives, {mb(plan.total_size)}")
    for note in plan.notes:
        typer.echo(f"note: {note}")


@dataclasses.dataclass(frozen=True)
class Toolkit:
    """The installed tree a command acts on (verify, info, env, uninstall, doctor): ``--prefix``, or
    the best managed toolkit of TRAIN (see :func:`command`)."""

    train: o.ToolkitArg = None
    prefix: o.PrefixOpt = None
    platform: o.PlatformOpt = None
    install_dir: o.InstallDirOpt = None

    def target(self) -> Path:
        from cudaredist.installdir import install_dir
        from cudaredist.managed import find_one
        from cudaredist.prefixes import canonical_prefix

        if self.prefix is not None and self.train is not None:
            fail("give --prefix DIR or a TRAIN, not both", 2)
        if self.prefix is not None:
            return canonical_prefix(self.prefix)
        if self.train is None:
            fail("give --prefix DIR, or the TRAIN of a managed toolkit (see `cudaredist list`)", 2)
        return find_one(install_dir(self.install_dir), self.train, self.platform).path


TOOLKIT = Toolkit()
