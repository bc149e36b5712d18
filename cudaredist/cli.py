"""The command line: parse, call the library, render. One error boundary turns a
:class:`CudaRedistError` into a message on stderr and a non-zero exit code."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from cudaredist import __version__
from cudaredist.commands import cache, prefix
from cudaredist.commands.base import (
    Ctx,
    emit_json,
    errors,
    fail,
    platform_or_host,
    platforms_or_host,
    print_plan,
    set_verbose,
)
from cudaredist.commands.options import (
    BaseUrlOpt,
    CacheDirOpt,
    ComponentOpt,
    IndexUrlOpt,
    JobsOpt,
    JsonOpt,
    LockOpt,
    MirrorOpt,
    NoFallbackOpt,
    OfflineOpt,
    OnlyOpt,
    PlatformOpt,
    PlatformsOpt,
    PrefixOpt,
    ProfileOpt,
    QuietOpt,
    SourceOpt,
    Train,
    VerboseOpt,
)
from cudaredist.errors import CudaRedistError
from cudaredist.profiles import DEFAULT_PROFILE

app = typer.Typer(
    name="cudaredist",
    help="Assemble a CUDA toolkit tree from NVIDIA's redistributable archives: "
         "no installer, no admin rights, any host.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


# -- commands ---------------------------------------------------------------------------------------
@app.command()
def resolve(
    train: Train,
    platform: PlatformOpt = None,
    profile: ProfileOpt = DEFAULT_PROFILE,
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
    set_verbose(verbose)
    with errors():
        ctx = Ctx(cache_dir, offline, base_url, mirror, no_fallback, source=source, index_url=index_url)
        with ctx.open() as src:
            plan = src.resolve(train, [platform_or_host(platform)], profile=None if only else profile,
                               components=component or [])[0]
        if as_json:
            emit_json(plan.to_json())
        else:
            print_plan(plan)


@app.command()
def install(
    prefix: PrefixOpt,
    train: Annotated[str | None, typer.Argument(
        help="CUDA train (13.4 = newest 13.4.x; 13 = newest 13.x) or exact release (13.4.1); "
             "optional with --lock.", show_default=False)] = None,
    platform: PlatformOpt = None,
    profile: Annotated[str | None, typer.Option(
        "--profile", help=f"Component profile: nvcc, runtime, build.  [default: {DEFAULT_PROFILE}]")] = None,
    component: ComponentOpt = None,
    only: OnlyOpt = False,
    base_url: BaseUrlOpt = None,
    mirror: MirrorOpt = None,
    no_fallback: NoFallbackOpt = False,
    cache_dir: CacheDirOpt = None,
    offline: OfflineOpt = False,
    jobs: JobsOpt = 8,
    reinstall: Annotated[bool, typer.Option(
        "--reinstall", help="Build the tree again even if the prefix already holds it (or its install "
                            "record is unreadable).")] = False,
    replace_foreign: Annotated[bool, typer.Option(
        "--replace-foreign", help="Replace a --prefix that exists and holds no cudaredist install "
                                  "(everything in it is deleted).")] = False,
    force: Annotated[bool, typer.Option("--force", hidden=True,
                                        help="Deprecated: --reinstall.")] = False,
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
    set_verbose(verbose)
    with errors():
        from cudaredist.record import canonical_prefix, satisfying_record
        from cudaredist.sources import check_source

        components = component or []
        target = canonical_prefix(prefix)
        if force:
            typer.echo("note: --force is deprecated and means --reinstall; to replace a directory "
                       "cudaredist did not install, pass --replace-foreign", err=True)
            reinstall = True
        if lock is None and train is None:
            fail("give a TRAIN (e.g. 13.4) or --lock FILE", 2)
        prof = None if only else (profile or DEFAULT_PROFILE)
        if lock is None and train is not None and not (reinstall or refresh):
            rec = satisfying_record(target, train=train, platform=platform_or_host(platform), profile=prof,
                                    components=components, source=check_source(source))
            if rec is not None:
                _report_noop(rec, target, as_json, quiet)
                return
        from cudaredist.install import Installer
        from cudaredist.progress import pick

        ctx = Ctx(cache_dir, offline, base_url, mirror, no_fallback, jobs, source=source,
                  index_url=index_url)
        reporter = pick(quiet=quiet or as_json, verbose=verbose)
        if lock is not None:
            from cudaredist.lockfile import plan_for
            from cudaredist.profiles import host_platform

            try:
                host: str | None = host_platform()
            except CudaRedistError:
                host = None
            locked, plan = plan_for(lock, train=train, platform=platform, host=host,
                                    profile="custom" if only else profile,
                                    components=components if (component or only) else None,
                                    source=None if source is None else check_source(source))
            components = list(locked.components)
        with ctx.open(plan.source if lock is not None else None) as src:
            try:
                if lock is not None:
                    plan = src.relocate(plan)
                else:
                    assert train is not None
                    plan = src.resolve(train, [platform_or_host(platform)], profile=prof,
                                       components=components)[0]
                if not quiet and not as_json:
                    typer.echo(f"CUDA {plan.release} for {plan.platform} ({plan.profile}: "
                               f"{', '.join(plan.components)}) -> {target}", err=True)
                    for note in plan.notes:
                        typer.echo(f"note: {note}", err=True)
                installer = Installer(src.index.transport, ctx.cache(), reporter=reporter, jobs=jobs,
                                      offline=offline, lock_timeout=lock_timeout)
                result = installer.install(plan, target, reinstall=reinstall,
                                           replace_foreign=replace_foreign, requested=components)
            finally:
                reporter.close()
        if as_json:
            emit_json({"prefix": str(result.prefix), "noop": result.noop, "release": plan.release,
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
        emit_json({"prefix": str(target), "noop": True, "release": plan["release"],
                    "platform": plan["platform"], "downloaded": 0, "cached": 0,
                    "files": len(rec["files"]), "seconds": 0.0, "plan": plan})
    elif not quiet:
        typer.echo(f"CUDA {plan['release']} ({plan['platform']}, {plan['profile']}) is already "
                   f"installed in {target}; nothing to do (--refresh looks for a newer release)",
                   err=True)


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
    set_verbose(verbose)
    with errors():
        ctx = Ctx(cache_dir, offline, base_url, mirror, no_fallback, source=source, index_url=index_url)
        with ctx.open() as src:
            rows, where, name = src.trains(), src.location(), src.name
        if as_json:
            emit_json({"base_url": where, "trains": rows} | ({"source": name} if name != "nvidia" else {}))
        else:
            for row in rows:
                typer.echo(f"{row['train']:<6} {row['release']:<9} {row['release_date']}")


@app.command("mirror")
def mirror_cmd(
    train_list: Annotated[list[str], typer.Argument(
        metavar="TRAIN...", help="Trains or releases to mirror (13.4 = newest 13.4.x, 13.0.2, ...).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The mirror directory (created, or completed "
                                                            "in place).")],
    platform: PlatformsOpt = None,
    profile: ProfileOpt = DEFAULT_PROFILE,
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
    set_verbose(verbose)
    with errors():
        from cudaredist.fetch.fetcher import Fetcher
        from cudaredist.progress import pick

        platforms = platforms_or_host(platform)
        ctx = Ctx(cache_dir, offline, base_url, mirror, no_fallback, jobs, source=source,
                  index_url=index_url)
        reporter = pick(quiet=quiet or as_json, verbose=verbose)
        with ctx.open() as src:
            try:
                fetcher = Fetcher(src.index.transport, ctx.cache(), reporter=reporter, offline=offline)
                report = src.write_mirror(out, train_list, platforms, profile=None if only else profile,
                                          components=component or [], fetcher=fetcher, reporter=reporter,
                                          jobs=jobs, xz_preset=xz_preset)
            finally:
                reporter.close()
            built = src.builds_archives
        if as_json:
            emit_json(report.to_json())
        elif not quiet:
            for note in report.notes:
                typer.echo(f"note: {note}", err=True)
            got = f"{report.count('downloaded')} downloaded, {report.count('cached')} from cache"
            how = (f"{report.count('downloaded') + report.count('cached')} built from wheels ({got})"
                   if built else got)
            typer.echo(f"mirror {report.out}: CUDA {', '.join(report.releases)} for "
                       f"{', '.join(platforms)}: {len(report.archives)} archives ({how}, "
                       f"{report.count('present')} already there), {len(report.licenses)} license "
                       "files added", err=True)


@app.command("lock")
def lock_cmd(
    train: Train,
    platform: PlatformsOpt = None,
    profile: ProfileOpt = DEFAULT_PROFILE,
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
    """Resolve TRAIN for each --platform and write a lock file: release, the base URL that served it,
    components, URLs, sha256 and sizes. `install --lock FILE` installs exactly that."""
    set_verbose(verbose)
    with errors():
        from cudaredist.lockfile import build_lock, dumps, write_lock

        platforms = platforms_or_host(platform)
        ctx = Ctx(cache_dir, offline, base_url, mirror, no_fallback, source=source, index_url=index_url)
        with ctx.open() as src:
            plans = src.resolve(train, platforms, profile=None if only else profile,
                                components=component or [])
        locked = build_lock(plans, train=train, components=component or [])
        if output is not None:
            write_lock(output, locked)
            typer.echo(f"wrote {output}: CUDA {locked['release']} for {', '.join(platforms)}, "
                       f"content key {locked['content_key'][:16]}…", err=True)
        if hash_only:
            typer.echo(locked["content_key"])
        elif output is None:
            typer.echo(dumps(locked), nl=False)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cudaredist {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Show the version.")] = False) -> None:
    pass


app.command()(prefix.verify)
app.command()(prefix.info)
app.command()(prefix.uninstall)
app.command("env")(prefix.env_cmd)
app.add_typer(cache.app, name="cache")


def main() -> None:
    # exit code 2 is click's for usage errors; ours are 1 (or the error's own code)
    app(prog_name="cudaredist")


if __name__ == "__main__":  # pragma: no cover
    main()
