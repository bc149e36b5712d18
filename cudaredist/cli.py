"""The command line: parse, call the library, render. One error boundary turns a
:class:`CudaRedistError` into a message on stderr and a non-zero exit code."""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

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
PlatformOpt = Annotated[str | None, typer.Option(
    "--platform", "-p", help="Target platform (linux-x86_64, linux-sbsa, windows-x86_64, "
                             "windows-arm64). Default: this host's.")]
ProfileOpt = Annotated[str, typer.Option("--profile", help="Component profile: nvcc, runtime, build.")]
ComponentOpt = Annotated[list[str] | None, typer.Option(
    "--component", "-c", help="Add a component (repeatable; 'a|b' takes the first the release has).")]
OnlyOpt = Annotated[bool, typer.Option("--only", help="Install exactly the --component list, no profile.")]
BaseUrlOpt = Annotated[str | None, typer.Option(
    "--base-url", envvar="CUDAREDIST_BASE_URL", show_envvar=True,
    help="Redist base URL: http(s)://, file:// or a directory. Default: NVIDIA's.")]
MirrorOpt = Annotated[str | None, typer.Option(
    "--mirror", envvar="CUDAREDIST_MIRROR", show_envvar=True,
    help="A mirror tried before the base URL (http(s)://, file:// or a directory).")]
NoFallbackOpt = Annotated[bool, typer.Option("--no-fallback",
                                             help="Use only the mirror, never the base URL.")]
CacheDirOpt = Annotated[Path | None, typer.Option(
    "--cache-dir", envvar="CUDAREDIST_CACHE_DIR", show_envvar=True, help="Download cache directory.")]
OfflineOpt = Annotated[bool, typer.Option("--offline", help="Use only the cache: no network at all.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
JobsOpt = Annotated[int, typer.Option("--jobs", "-j", min=1, max=64, help="Concurrent connections.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="More output; tracebacks on errors.")]
PrefixOpt = Annotated[Path, typer.Option("--prefix", help="The toolkit directory (CUDA_PATH).")]
SourceOpt = Annotated[str, typer.Option(
    "--source", envvar="CUDAREDIST_SOURCE", show_envvar=True,
    help="nvidia: NVIDIA's redist archives; pypi: NVIDIA's wheels, through the cuda-toolkit "
         "metapackage (see docs/pypi-source.md).")]
IndexUrlOpt = Annotated[str | None, typer.Option(
    "--index-url", envvar="PIP_INDEX_URL", show_envvar=True,
    help="Package index (Simple API) for --source pypi. Default: PyPI.")]
PlatformsOpt = Annotated[list[str] | None, typer.Option(
    "--platform", "-p", help="Target platform; repeatable or comma-separated. Default: this host's.")]
LockOpt = Annotated[Path | None, typer.Option(
    "--lock", help="Install exactly what this lock file (from `cudaredist lock`) pins: no resolution, "
                   "no manifest; refuses a TRAIN, --platform, --profile or --component it does not pin.")]


def check_source(source: str | None) -> str:
    """``--source`` > ``CUDAREDIST_SOURCE`` > nvidia (imported late: start-up stays light)."""
    from cudaredist.source import check_source as check

    return check(source)


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

    cache_dir: Path | None
    offline: bool
    base_url: str | None
    mirror: str | None
    no_fallback: bool
    jobs: int = 8
    source: str | None = "nvidia"  # None: not given (install --lock takes the lock's)
    index_url: str | None = None

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


def _platform(platform: str | None) -> str:
    from cudaredist.profiles import host_platform

    return platform or host_platform()


def _plan(ctx: Ctx, transport: Any, train: str, platform: str, profile: str | None,
          components: list[str]) -> Any:
    from cudaredist import pypi
    from cudaredist.source import Index, resolve_plan

    if check_source(ctx.source) == "pypi":
        wheels = pypi.WheelIndex(transport, ctx.cache(), index_url=ctx.index_url, offline=ctx.offline)
        return pypi.resolve_plan(wheels, train, platform=platform, profile=profile,
                                 components=components)
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
    source: SourceOpt = "nvidia",
    index_url: IndexUrlOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Show the install plan without installing: release, and per component version, URL, size, sha256."""
    _set_verbose(verbose)
    with errors():
        ctx = Ctx(cache_dir, offline, base_url, mirror, no_fallback, source=source, index_url=index_url)
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
    prefix: PrefixOpt,
    train: Annotated[str | None, typer.Argument(
        help="CUDA train (13.4 = newest 13.4.x; 13 = newest 13.x) or exact release (13.4.1); "
             "optional with --lock.", show_default=False)] = None,
    platform: PlatformOpt = None,
    profile: Annotated[str | None, typer.Option(
        "--profile", help="Component profile: nvcc, runtime, build.  [default: nvcc]")] = None,
    component: ComponentOpt = None,
    only: OnlyOpt = False,
    base_url: BaseUrlOpt = None,
    mirror: MirrorOpt = None,
    no_fallback: NoFallbackOpt = False,
    cache_dir: CacheDirOpt = None,
    offline: OfflineOpt = False,
    jobs: JobsOpt = 8,
    force: Annotated[bool, typer.Option("--force", help="Reinstall, and replace a prefix that "
                                                        "cudaredist did not install.")] = False,
    refresh: Annotated[bool, typer.Option("--refresh", help="Look for a newer release of the train "
                                                            "even if the prefix satisfies it.")] = False,
    lock_timeout: Annotated[float | None, typer.Option(
        "--lock-timeout", envvar="CUDAREDIST_LOCK_TIMEOUT",
        help="Seconds to wait for another process holding the prefix or cache (default 600).")] = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    as_json: JsonOpt = False,
    lock: LockOpt = None,
    source: Annotated[str | None, typer.Option(
        "--source", envvar="CUDAREDIST_SOURCE", show_envvar=True,
        help="nvidia: NVIDIA's redist archives; pypi: NVIDIA's wheels, through the cuda-toolkit "
             "metapackage (see docs/pypi-source.md). With --lock: the lock's; another one is refused.  "
             "[default: nvidia]", show_default=False)] = None,
    index_url: IndexUrlOpt = None,
) -> None:
    """Install a toolkit tree into --prefix (atomically; a failure leaves the prefix as it was)."""
    _set_verbose(verbose)
    with errors():
        from cudaredist.record import canonical_prefix, leftovers, read_record, satisfies

        components = component or []
        target = canonical_prefix(prefix)
        if lock is None and train is None:
            _fail("give a TRAIN (e.g. 13.4) or --lock FILE", 2)
        plat = _platform(platform) if lock is None else ""
        prof = None if only else (profile or "nvcc")
        if lock is None and train is not None and not (force or refresh):
            rec = read_record(target) if target.is_dir() else None
            # leftovers of a killed run: go through the installer, which cleans them
            if rec is not None and not leftovers(target) and satisfies(
                    rec, train=train, platform=plat, profile=prof, components=components,
                    source=check_source(source)):
                _report_noop(rec, target, as_json, quiet)
                return
        from cudaredist.install import Installer
        from cudaredist.progress import pick

        ctx = Ctx(cache_dir, offline, base_url, mirror, no_fallback, jobs, source=source,
                  index_url=index_url)
        transport = ctx.transport()
        reporter = pick(quiet=quiet or as_json, verbose=verbose)
        try:
            if lock is not None:
                plan, components = _locked_plan(ctx, lock, train, platform,
                                                "custom" if only else profile,
                                                components if (component or only) else None)
            else:
                assert train is not None
                plan = _plan(ctx, transport, train, plat, prof, components)
            if not quiet and not as_json:
                typer.echo(f"CUDA {plan.release} for {plan.platform} ({plan.profile}: "
                           f"{', '.join(plan.components)}) -> {target}", err=True)
                for note in plan.notes:
                    typer.echo(f"note: {note}", err=True)
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


def _locked_plan(ctx: Ctx, path: Path, train: str | None, platform: str | None,
                 profile: str | None, components: list[str] | None) -> tuple[Any, list[str]]:
    """The plan a lock file pins for this request (drift is an error), fetched from the
    lock's base URL, or --base-url, behind --mirror."""
    from cudaredist.lockfile import read_lock, select, with_bases
    from cudaredist.profiles import host_platform
    from cudaredist.source import check_source, default_bases

    locked = read_lock(path)
    try:
        host: str | None = host_platform()
    except CudaRedistError:
        host = None
    plan = select(locked, train=train, platform=platform, host=host, profile=profile,
                  components=components,
                  source=None if ctx.source is None else check_source(ctx.source))
    if plan.source != "nvidia":  # a wheel is fetched from the URL the lock pins: no index, no base
        return plan, list(locked.components)
    if ctx.no_fallback and not ctx.mirror:
        _fail("--no-fallback needs --mirror (or CUDAREDIST_MIRROR)", 2)
    bases = default_bases(ctx.base_url or locked.base_url, ctx.mirror, fallback=not ctx.no_fallback)
    return with_bases(plan, bases), list(locked.components)


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
        from cudaredist.record import canonical_prefix
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
        from cudaredist.record import canonical_prefix, require_record

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
              lock_timeout: Annotated[float | None, typer.Option("--lock-timeout")] = None) -> None:
    """Remove exactly what cudaredist installed in the prefix (other files stay)."""
    _set_verbose(verbose)
    with errors():
        from cudaredist.install import lock_timeout_default, prefix_lock
        from cudaredist.record import canonical_prefix
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
    source: SourceOpt = "nvidia",
    index_url: IndexUrlOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """List the published trains, each with its newest release and date."""
    _set_verbose(verbose)
    with errors():
        from concurrent.futures import ThreadPoolExecutor

        from cudaredist import pypi
        from cudaredist.resolve import train_of
        from cudaredist.source import Index

        ctx = Ctx(cache_dir, offline, base_url, mirror, no_fallback)
        transport = ctx.transport()
        if check_source(source) == "pypi":
            try:
                wheels = pypi.WheelIndex(transport, ctx.cache(), index_url=index_url, offline=offline)
                rows = pypi.list_trains(wheels)
            finally:
                transport.close()
            if as_json:
                _emit_json({"base_url": wheels.index_url, "source": "pypi", "trains": rows})
            else:
                for row in rows:
                    typer.echo(f"{row['train']:<6} {row['release']:<9} {row['release_date']}")
            return
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
                dates = dict(zip(newest.values(), pool.map(date, newest.values()), strict=True))
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


def _platforms(values: list[str] | None) -> list[str]:
    """--platform values, repeated or comma-separated, in order, once each; default the host's."""
    out = [p.strip() for v in values or [] for p in v.split(",") if p.strip()]
    return list(dict.fromkeys(out)) or [_platform(None)]


@app.command("env")
def env_cmd(
    prefix: PrefixOpt,
    shell: Annotated[str | None, typer.Option(
        "--shell", help="sh, bash, zsh, fish, pwsh or cmd.  [default: sh; pwsh on Windows]",
        show_default=False)] = None,
    github: Annotated[bool, typer.Option(
        "--github", help="Append to $GITHUB_ENV and $GITHUB_PATH (a GitHub Actions step) instead "
                         "of printing.")] = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Print the environment for the tree in --prefix: eval "$(cudaredist env --prefix DIR)"."""
    _set_verbose(verbose)
    with errors():
        from cudaredist.envexport import SHELLS, default_shell, environment, github_files, render
        from cudaredist.record import canonical_prefix, require_record

        if shell is not None and shell not in SHELLS:
            _fail(f"unknown --shell {shell!r}; choose one of {', '.join(SHELLS)}", 2)
        target = canonical_prefix(prefix)
        plan = require_record(target)["plan"]
        host_windows = os.name == "nt"
        found = environment(str(target), platform=plan["platform"], release=plan["release"],
                            host_windows=host_windows)
        for note in [] if as_json else found.notes:
            typer.echo(f"note: {note}", err=True)
        if github:
            env_file, path_file = os.environ.get("GITHUB_ENV"), os.environ.get("GITHUB_PATH")
            if not env_file or not path_file:
                _fail("--github: $GITHUB_ENV or $GITHUB_PATH is not set; run it in a GitHub Actions step", 2)
            assert env_file and path_file
            env_text, path_text = github_files(found, os.environ)
            # text mode: the runner's own line ending (os.EOL, as @actions/core writes)
            with open(env_file, "a", encoding="utf-8") as fh:
                fh.write(env_text)
            with open(path_file, "a", encoding="utf-8") as fh:
                fh.write(path_text)
            for name, value in found.variables:
                typer.echo(f"set {name}={value}", err=True)
            for var, dirs in found.prepend:
                typer.echo(f"prepended to {var}: {os.pathsep.join(dirs)}", err=True)
        elif as_json:
            _emit_json({"prefix": str(target), "release": plan["release"], "platform": plan["platform"]}
                       | found.to_json())
        else:
            typer.echo(render(found, shell or default_shell(host_windows)), nl=False)


@app.command("mirror")
def mirror_cmd(
    train_list: Annotated[list[str], typer.Argument(
        metavar="TRAIN...", help="Trains or releases to mirror (13.4 = newest 13.4.x, 13.0.2, ...).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The mirror directory (created, or completed "
                                                            "in place).")],
    platform: PlatformsOpt = None,
    profile: ProfileOpt = "nvcc",
    component: ComponentOpt = None,
    only: OnlyOpt = False,
    base_url: BaseUrlOpt = None,
    mirror: MirrorOpt = None,
    no_fallback: NoFallbackOpt = False,
    cache_dir: CacheDirOpt = None,
    offline: OfflineOpt = False,
    jobs: JobsOpt = 8,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    as_json: JsonOpt = False,
    source: SourceOpt = "nvidia",
    index_url: IndexUrlOpt = None,
    xz_preset: Annotated[int | None, typer.Option(
        "--xz-preset", min=0, max=9, help="--source pypi: xz preset of the .tar.xz archives (the deflate "
                                          "level of the .zip ones, 1 at least).  [default: 6]",
        show_default=False)] = None,
) -> None:
    """Write a mirror laid out like NVIDIA's redist site (index.html, manifests as served, archives
    at their relative paths), verified; a re-run fetches only what is missing. With --source pypi
    the archives are built from NVIDIA's wheels, holding the tree `install --source pypi` makes."""
    _set_verbose(verbose)
    with errors():
        from cudaredist import pypi
        from cudaredist.install import Installer
        from cudaredist.mirror import fetch_release, plan_release, write_mirror, write_wheel_mirror
        from cudaredist.progress import pick
        from cudaredist.source import Index

        platforms = _platforms(platform)
        wheels = check_source(source) == "pypi"
        if xz_preset is not None and not wheels:
            _fail("--xz-preset needs --source pypi: NVIDIA's archives are mirrored as served", 2)
        ctx = Ctx(cache_dir, offline, base_url, mirror, no_fallback, jobs, source=source,
                  index_url=index_url)
        transport = ctx.transport()
        reporter = pick(quiet=quiet or as_json, verbose=verbose)
        try:
            if wheels:
                wheel_index = pypi.WheelIndex(transport, ctx.cache(), index_url=index_url, offline=offline)
                by_release: dict[str, Any] = {}
                for train in train_list:
                    plans = pypi.resolve_plans(wheel_index, train, platforms,
                                               profile=None if only else profile, components=component or [])
                    by_release.setdefault(plans[0].release, plans)
                installer = Installer(transport, ctx.cache(), reporter=reporter, jobs=jobs, offline=offline)
                report = write_wheel_mirror(out, list(by_release.values()), fetch=installer.fetch,
                                            reporter=reporter, jobs=jobs,
                                            preset=6 if xz_preset is None else xz_preset)
            else:
                index = Index(transport, ctx.cache(), offline=offline)
                bases = ctx.bases()
                releases: dict[str, Any] = {}
                for train in train_list:
                    release = fetch_release(index, train, bases)
                    if release.label not in releases:
                        releases[release.label] = (release, plan_release(
                            release, platforms, profile=None if only else profile,
                            components=component or []))
                installer = Installer(transport, ctx.cache(), reporter=reporter, jobs=jobs, offline=offline)
                report = write_mirror(out, list(releases.values()), fetch=installer.fetch,
                                      get_bytes=None if offline else transport.get_bytes,
                                      reporter=reporter, jobs=jobs)
        finally:
            reporter.close()
            transport.close()
        _mirror_summary(report, platforms, as_json=as_json, quiet=quiet, built=wheels)


def _mirror_summary(report: Any, platforms: list[str], *, as_json: bool, quiet: bool, built: bool) -> None:
    if as_json:
        _emit_json(report.to_json())
    elif not quiet:
        for note in report.notes:
            typer.echo(f"note: {note}", err=True)
        how = (f"{report.count('downloaded') + report.count('cached')} built from wheels "
               f"({report.count('downloaded')} downloaded, {report.count('cached')} from cache)" if built
               else f"{report.count('downloaded')} downloaded, {report.count('cached')} from cache")
        typer.echo(f"mirror {report.out}: CUDA {', '.join(report.releases)} for "
                   f"{', '.join(platforms)}: {len(report.archives)} archives ({how}, "
                   f"{report.count('present')} already there), {len(report.licenses)} license "
                   "files added", err=True)


@app.command("lock")
def lock_cmd(
    train: Train,
    platform: PlatformsOpt = None,
    profile: ProfileOpt = "nvcc",
    component: ComponentOpt = None,
    only: OnlyOpt = False,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write the lock file here (default: print it).")] = None,
    hash_only: Annotated[bool, typer.Option(
        "--hash", help="Print only the content key: a stable hex key of the resolved archives "
                       "(a CI cache key).")] = False,
    base_url: BaseUrlOpt = None,
    mirror: MirrorOpt = None,
    no_fallback: NoFallbackOpt = False,
    cache_dir: CacheDirOpt = None,
    offline: OfflineOpt = False,
    verbose: VerboseOpt = False,
    source: SourceOpt = "nvidia",
    index_url: IndexUrlOpt = None,
) -> None:
    """Resolve TRAIN for each --platform and write a lock file: release, base URL, components,
    URLs, sha256 and sizes. `install --lock FILE` installs exactly that."""
    _set_verbose(verbose)
    with errors():
        from dataclasses import replace

        from cudaredist import pypi
        from cudaredist.lockfile import build_lock, dumps, write_lock
        from cudaredist.mirror import fetch_release, plan_release
        from cudaredist.source import Index

        platforms = _platforms(platform)
        ctx = Ctx(cache_dir, offline, base_url, mirror, no_fallback)
        transport = ctx.transport()
        try:
            if check_source(source) == "pypi":
                wheels = pypi.WheelIndex(transport, ctx.cache(), index_url=index_url, offline=offline)
                plans = pypi.resolve_plans(wheels, train, platforms, profile=None if only else profile,
                                           components=component or [])
            else:
                bases = ctx.bases()
                release = fetch_release(Index(transport, ctx.cache(), offline=offline), train, bases)
                plans = plan_release(release, platforms, profile=None if only else profile,
                                     components=component or [])
                # the lock names where the archives live, not a mirror that happened to be in front of it
                plans = [replace(p, base_url=bases[-1]) for p in plans]
        finally:
            transport.close()
        locked = build_lock(plans, train=train, components=component or [])
        if output is not None:
            write_lock(output, locked)
            typer.echo(f"wrote {output}: CUDA {locked['release']} for {', '.join(platforms)}, "
                       f"content key {locked['content_key'][:16]}…", err=True)
        if hash_only:
            typer.echo(locked["content_key"])
        elif output is None:
            typer.echo(dumps(locked), nl=False)


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


@app.command()
def doctor(
    train: Annotated[str | None, typer.Argument(
        help="Check the tree cudaredist manages for this train (instead of --prefix).",
        show_default=False)] = None,
    prefix: Annotated[Path | None, typer.Option(
        "--prefix", help="The toolkit directory to check. Without it (or TRAIN): driver, gpu and "
                         "environment only.")] = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Why CUDA does not work here: the tree, nvcc, the host compiler, a probe build, the driver,
    the GPUs and the environment, each ok, warn or fail with the fix. Exit 1 if any fails."""
    _set_verbose(verbose)
    with errors():
        from cudaredist import doctor as doc
        from cudaredist.record import canonical_prefix

        if train is not None and prefix is not None:
            _fail("give either TRAIN or --prefix, not both", 2)
        report = doc.run(canonical_prefix(prefix) if prefix is not None else None, train=train)
        if as_json:
            _emit_json(report.to_json())
        else:
            width = max(len(n) for n in doc.ORDER)
            for c in report.checks:
                typer.echo(f"{c.status:<4}  {c.name:<{width}}  {c.detail}")
                if c.fix:
                    typer.echo(f"{'':<4}  {'':<{width}}  fix: {c.fix}")
        if report.failed:
            raise typer.Exit(1)


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
    main()
