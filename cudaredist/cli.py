"""The command line: parse, call the library, render. One error boundary turns a
:class:`CudaRedistError` into a message on stderr and a non-zero exit code."""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional, TypeVar

import typer

from cudaredist import __version__
from cudaredist.errors import CudaRedistError

app = typer.Typer(
    name="cudaredist",
    help="Assemble a CUDA toolkit tree from NVIDIA's redistributable archives: "
         "no installer, no admin rights, any host.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
cache_app = typer.Typer(help="Inspect and clean the download cache.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")

F = TypeVar("F", bound=Callable[..., Any])
_VERBOSE = False

# -- shared options -------------------------------------------------------------------------------
Train = Annotated[str, typer.Argument(help="CUDA train (13.4 = newest 13.4.x; 13 = newest 13.x) "
                                           "or exact release (13.4.1).")]
PlatformOpt = Annotated[Optional[str], typer.Option(
    "--platform", "-p", help="Target platform (linux-x86_64, linux-sbsa, windows-x86_64, "
                             "windows-arm64). Default: this host's.")]
ProfileOpt = Annotated[str, typer.Option("--profile", help="Component profile: nvcc, runtime, build.")]
ComponentOpt = Annotated[Optional[list[str]], typer.Option(
    "--component", "-c", help="Add a component (repeatable; 'a|b' takes the first the release has).")]
OnlyOpt = Annotated[bool, typer.Option("--only", help="Install exactly the --component list, no profile.")]
BaseUrlOpt = Annotated[Optional[str], typer.Option(
    "--base-url", envvar="CUDAREDIST_BASE_URL", show_envvar=True,
    help="Redist base URL: http(s)://, file:// or a directory. Default: NVIDIA's.")]
MirrorOpt = Annotated[Optional[str], typer.Option(
    "--mirror", envvar="CUDAREDIST_MIRROR", show_envvar=True,
    help="A mirror tried before the base URL (http(s)://, file:// or a directory).")]
NoFallbackOpt = Annotated[bool, typer.Option("--no-fallback", help="Use only the mirror, never the base URL.")]
CacheDirOpt = Annotated[Optional[Path], typer.Option(
    "--cache-dir", envvar="CUDAREDIST_CACHE_DIR", show_envvar=True, help="Download cache directory.")]
OfflineOpt = Annotated[bool, typer.Option("--offline", help="Use only the cache: no network at all.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="More output; tracebacks on errors.")]
PrefixOpt = Annotated[Path, typer.Option("--prefix", help="The toolkit directory (CUDA_PATH).")]


def _fail(message: str, code: int = 1) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@contextmanager
def errors() -> Iterator[None]:
    try:
        yield
    except CudaRedistError as exc:
        if _VERBOSE:
            traceback.print_exc()
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted; nothing was changed in the prefix", 130)


def _emit_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2))


@dataclass
class Ctx:
    """What a command needs for resolving and fetching, built from its options."""

    cache_dir: Optional[Path]
    offline: bool
    base_url: Optional[str]
    mirror: Optional[str]
    no_fallback: bool
    jobs: int = 8

    def cache(self) -> Any:
        from cudaredist.cache import Cache

        return Cache(self.cache_dir)

    def transport(self) -> Any:
        from cudaredist.net import Transport

        return Transport(connections=self.jobs)

    def bases(self) -> list[str]:
        from cudaredist.source import default_bases

        if self.no_fallback and not self.mirror:
            _fail("--no-fallback needs --mirror (or CUDAREDIST_MIRROR)", 2)
        return default_bases(self.base_url, self.mirror, fallback=not self.no_fallback)


def _platform(platform: Optional[str]) -> str:
    from cudaredist.profiles import host_platform

    return platform or host_platform()


def _plan(ctx: Ctx, transport: Any, train: str, platform: str, profile: Optional[str],
          components: list[str]) -> Any:
    from cudaredist.source import Index, resolve_plan

    index = Index(transport, ctx.cache(), offline=ctx.offline)
    return resolve_plan(index, train, bases=ctx.bases(), platform=platform, profile=profile,
                        components=components)


def _human(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _print_plan(plan: Any) -> None:
    typer.echo(f"CUDA {plan.release} ({plan.release_date or 'date unknown'}) for {plan.platform}, "
               f"profile {plan.profile}, from {plan.base_url}")
    width = max(len(i.component) for i in plan.items)
    for i in plan.items:
        typer.echo(f"  {i.component:<{width}}  {i.version:<14} {_human(i.archive.size):>10}  {i.url}")
        typer.echo(f"  {'':<{width}}  sha256 {i.archive.sha256}")
    typer.echo(f"total: {len(plan.items)} archives, {_human(plan.total_size)}")
    for note in plan.notes:
        typer.echo(f"note: {note}")


# -- commands ---------------------------------------------------------------------------------------
@app.command()
def resolve(
    train: Train,
    platform: PlatformOpt = None,
    profile: ProfileOpt = "nvcc",
    component: ComponentOpt = None,
    only: OnlyOpt = False,
    base_url: BaseUrlOpt = None,
    mirror: MirrorOpt = None,
    no_fallback: NoFallbackOpt = False,
    cache_dir: CacheDirOpt = None,
    offline: OfflineOpt = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Show the install plan without installing: release, and per component version, URL, size, sha256."""
    _set_verbose(verbose)
    with errors():
        ctx = Ctx(cache_dir, offline, base_url, mirror, no_fallback)
        transport = ctx.transport()
        try:
            plan = _plan(ctx, transport, train, _platform(platform), None if only else profile,
                         component or [])
        finally:
            transport.close()
        if as_json:
            _emit_json(plan.to_json())
        else:
            _print_plan(plan)


@app.command()
def install(
    train: Train,
    prefix: PrefixOpt,
    platform: PlatformOpt = None,
    profile: ProfileOpt = "nvcc",
    component: ComponentOpt = None,
    only: OnlyOpt = False,
    base_url: BaseUrlOpt = None,
    mirror: MirrorOpt = None,
    no_fallback: NoFallbackOpt = False,
    cache_dir: CacheDirOpt = None,
    offline: OfflineOpt = False,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, max=64,
                                      help="Concurrent connections.")] = 8,
    force: Annotated[bool, typer.Option("--force", help="Reinstall, and replace a prefix that "
                                                        "cudaredist did not install.")] = False,
    refresh: Annotated[bool, typer.Option("--refresh", help="Look for a newer release of the train "
                                                            "even if the prefix satisfies it.")] = False,
    lock_timeout: Annotated[Optional[float], typer.Option(
        "--lock-timeout", envvar="CUDAREDIST_LOCK_TIMEOUT",
        help="Seconds to wait for another process holding the prefix or cache (default 600).")] = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Install a toolkit tree into --prefix (atomically; a failure leaves the prefix as it was)."""
    _set_verbose(verbose)
    with errors():
        from cudaredist.install import Installer, canonical_prefix, satisfies
        from cudaredist.progress import pick
        from cudaredist.record import read_record

        components = component or []
        target = canonical_prefix(prefix)
        plat = _platform(platform)
        prof = None if only else profile
        if not (force or refresh):
            rec = read_record(target) if target.is_dir() else None
            if rec is not None and satisfies(rec, train=train, platform=plat, profile=prof,
                                             components=components, source="nvidia"):
                _report_noop(rec, target, as_json, quiet)
                return
        ctx = Ctx(cache_dir, offline, base_url, mirror, no_fallback, jobs)
        transport = ctx.transport()
        reporter = pick(quiet=quiet or as_json, verbose=verbose)
        try:
            plan = _plan(ctx, transport, train, plat, prof, components)
            if not quiet and not as_json:
                typer.echo(f"CUDA {plan.release} for {plan.platform} ({plan.profile}: "
                           f"{', '.join(plan.components)}) -> {target}", err=True)
            installer = Installer(transport, ctx.cache(), reporter=reporter, jobs=jobs,
                                  offline=offline, lock_timeout=lock_timeout)
            result = installer.install(plan, target, force=force, requested=components)
        finally:
            reporter.close()
            transport.close()
        if as_json:
            _emit_json({"prefix": str(result.prefix), "noop": result.noop, "release": plan.release,
                        "platform": plan.platform, "downloaded": result.downloaded,
                        "cached": result.cached, "files": result.files,
                        "seconds": round(result.seconds, 3), "plan": plan.to_json()})
        elif not quiet:
            if result.noop:
                typer.echo(f"CUDA {plan.release} ({plan.platform}) is already installed in "
                           f"{result.prefix}; nothing to do", err=True)
            else:
                typer.echo(f"installed CUDA {plan.release} ({plan.platform}) into {result.prefix}: "
                           f"{result.files} files, {result.downloaded} downloaded, {result.cached} "
                           f"from cache, {result.seconds:.1f}s", err=True)


def _report_noop(rec: dict[str, Any], target: Path, as_json: bool, quiet: bool) -> None:
    plan = rec["plan"]
    if as_json:
        _emit_json({"prefix": str(target), "noop": True, "release": plan["release"],
                    "platform": plan["platform"], "downloaded": 0, "cached": 0,
                    "files": len(rec["files"]), "seconds": 0.0, "plan": plan})
    elif not quiet:
        typer.echo(f"CUDA {plan['release']} ({plan['platform']}, {plan['profile']}) is already "
                   f"installed in {target}; nothing to do (--refresh looks for a newer release)",
                   err=True)


@app.command()
def verify(
    prefix: PrefixOpt,
    fast: Annotated[bool, typer.Option("--fast", help="Compare sizes only, do not re-hash.")] = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Re-hash the tree against its install record: missing, changed and extra files."""
    _set_verbose(verbose)
    with errors():
        from cudaredist.install import canonical_prefix
        from cudaredist.record import verify as do_verify

        report = do_verify(canonical_prefix(prefix), fast=fast)
        if as_json:
            _emit_json(report.to_json())
        else:
            for kind in ("missing", "changed", "extra"):
                for path in getattr(report, kind):
                    typer.echo(f"{kind:8} {path}")
            status = "ok" if report.ok else "DIFFERS"
            typer.echo(f"{status}: {report.checked} files checked, {len(report.missing)} missing, "
                       f"{len(report.changed)} changed, {len(report.extra)} extra")
        if not report.ok:
            raise typer.Exit(1)


@app.command()
def info(prefix: PrefixOpt, as_json: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """Show the install record of a prefix."""
    _set_verbose(verbose)
    with errors():
        from cudaredist.install import canonical_prefix
        from cudaredist.record import require_record

        rec = require_record(canonical_prefix(prefix))
        if as_json:
            _emit_json({k: v for k, v in rec.items() if k != "files"} | {"file_count": len(rec["files"])})
            return
        plan = rec["plan"]
        typer.echo(f"prefix:    {canonical_prefix(prefix)}")
        typer.echo(f"release:   CUDA {plan['release']} ({plan.get('release_date') or 'date unknown'})")
        typer.echo(f"platform:  {plan['platform']}")
        typer.echo(f"profile:   {plan['profile']}")
        typer.echo(f"source:    {plan.get('source', 'nvidia')} {plan['base_url']}")
        typer.echo(f"installed: {rec['installed_at']} by {rec['tool']}")
        typer.echo(f"files:     {len(rec['files'])}")
        for c in plan["components"]:
            typer.echo(f"  {c['name']:<20} {c['version']:<14} sha256 {c['sha256']}")


@app.command()
def uninstall(prefix: PrefixOpt, verbose: VerboseOpt = False,
              lock_timeout: Annotated[Optional[float], typer.Option("--lock-timeout")] = None) -> None:
    """Remove exactly what cudaredist installed in the prefix (other files stay)."""
    _set_verbose(verbose)
    with errors():
        from cudaredist.install import canonical_prefix, lock_timeout_default, prefix_lock
        from cudaredist.record import uninstall as do_uninstall

        target = canonical_prefix(prefix)
        with prefix_lock(target, lock_timeout_default() if lock_timeout is None else lock_timeout):
            n = do_uninstall(target)
        typer.echo(f"removed {n} files from {target}")


@app.command()
def trains(
    base_url: BaseUrlOpt = None,
    mirror: MirrorOpt = None,
    no_fallback: NoFallbackOpt = False,
    cache_dir: CacheDirOpt = None,
    offline: OfflineOpt = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """List the published trains, each with its newest release and date."""
    _set_verbose(verbose)
    with errors():
        from concurrent.futures import ThreadPoolExecutor

        from cudaredist.resolve import train_of
        from cudaredist.source import Index

        ctx = Ctx(cache_dir, offline, base_url, mirror, no_fallback)
        transport = ctx.transport()
        try:
            index = Index(transport, ctx.cache(), offline=offline)
            base = ctx.bases()[0]
            labels = index.labels(base)
            newest: dict[str, str] = {}
            for lbl in labels:  # highest first
                newest.setdefault(train_of(lbl), lbl)

            def date(label: str) -> str:
                try:
                    return str(index.manifest(base, label).release_date)
                except CudaRedistError:
                    return ""

            with ThreadPoolExecutor(8) as pool:
                dates = dict(zip(newest.values(), pool.map(date, newest.values())))
        finally:
            transport.close()
        rows = [{"train": t, "release": r, "release_date": dates.get(r, ""),
                 "releases": [x for x in labels if train_of(x) == t]}
                for t, r in sorted(newest.items(), key=lambda kv: [int(p) for p in kv[0].split(".")])]
        if as_json:
            _emit_json({"base_url": base, "trains": rows})
        else:
            for row in rows:
                typer.echo(f"{row['train']:<6} {row['release']:<9} {row['release_date']}")


@cache_app.command("dir")
def cache_dir_cmd(cache_dir: CacheDirOpt = None) -> None:
    """Print the cache directory."""
    from cudaredist.cache import Cache

    typer.echo(str(Cache(cache_dir).root))


@cache_app.command("list")
def cache_list(cache_dir: CacheDirOpt = None, as_json: JsonOpt = False) -> None:
    """List cached archives."""
    from cudaredist.cache import Cache

    entries = Cache(cache_dir).entries()
    if as_json:
        _emit_json([{"sha256": e.sha256, "name": e.name, "size": e.size, "url": e.url,
                     "last_used": e.last_used} for e in entries])
        return
    for e in entries:
        typer.echo(f"{e.sha256[:16]}  {_human(e.size):>10}  {e.name}")
    typer.echo(f"{len(entries)} archives, {_human(sum(e.size for e in entries))} in {Cache(cache_dir).root}")


@cache_app.command("prune")
def cache_prune(cache_dir: CacheDirOpt = None,
                days: Annotated[float, typer.Option("--days", help="Drop archives unused this long.")] = 30.0
                ) -> None:
    """Drop partial downloads and archives not used for --days."""
    with errors():
        from cudaredist.cache import Cache

        n, freed = Cache(cache_dir).prune(older_than_days=days)
        typer.echo(f"removed {n} files, {_human(freed)}")


@cache_app.command("clear")
def cache_clear(cache_dir: CacheDirOpt = None) -> None:
    """Delete the whole cache."""
    from cudaredist.cache import Cache

    c = Cache(cache_dir)
    c.clear()
    typer.echo(f"cleared {c.root}")


def _set_verbose(v: bool) -> None:
    global _VERBOSE
    _VERBOSE = v


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cudaredist {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Show the version.")] = False) -> None:
    pass


def main() -> None:
    # exit code 2 is click's for usage errors; ours are 1 (or the error's own code)
    app(prog_name="cudaredist")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

_ = os  # keep `os` for plugins that patch the environment in tests
