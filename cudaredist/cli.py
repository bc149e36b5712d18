"""The command line: parse, call the library, render. One error boundary turns a
:class:`CudaRedistError` into a message on stderr and a non-zero exit code."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cudaredist import __version__, commands
from cudaredist.commands.base import (
    OPTIONS,
    SELECTION,
    Ctx,
    Selection,
    emit_json,
    errors,
    grouped,
    json_text,
    platforms_or_host,
    print_plan,
    set_verbose,
)
from cudaredist.commands.options import (
    InstallDirOpt,
    JobsOpt,
    JsonOpt,
    LinkModeOpt,
    LockOpt,
    LockTimeoutOpt,
    PlatformOpt,
    PlatformsOpt,
    PrefixOpt,
    QuietOpt,
    Train,
    VerboseOpt,
)

if TYPE_CHECKING:
    from cudaredist.api import InstallOutcome, InstallRequest

_SETTINGS: dict[str, Any] = dict(
    name="cudaredist",
    help="Assemble a CUDA toolkit tree from NVIDIA's redistributable archives: "
         "no installer, no admin rights, any host.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app = typer.Typer(**_SETTINGS)


# -- commands ---------------------------------------------------------------------------------------
@app.command()
@grouped
def resolve(
    train: Train,
    platform: PlatformOpt = None,
    sel: Selection = SELECTION,
    ctx: Ctx = OPTIONS,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Show the install plan without installing: release, and per component version, URL, size, sha256."""
    set_verbose(verbose)
    with errors():
        from cudaredist.profiles import host_platform

        with ctx.open() as src:
            plan = src.resolve(train, [host_platform(platform)], **sel.resolving())[0]
        if as_json:
            emit_json(plan.to_json())
        else:
            print_plan(plan)


@app.command()
@grouped
def install(
    trains: Annotated[list[str] | None, typer.Argument(
        metavar="[TRAIN]...", help="CUDA trains (13.4 = newest 13.4.x; 13 = newest 13.x) or exact releases "
                                   "(13.4.1). Without --prefix each goes to the install dir as "
                                   "cuda-<release>-<platform>; with --prefix, one train (or --lock).",
        show_default=False)] = None,
    prefix: PrefixOpt = None,
    install_dir: InstallDirOpt = None,
    platform: PlatformOpt = None,
    sel: Selection = SELECTION,
    ctx: Ctx = OPTIONS,
    jobs: JobsOpt = 8,
    link_mode: LinkModeOpt = None,
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
    lock_timeout: LockTimeoutOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    as_json: JsonOpt = False,
    lock: LockOpt = None,
) -> None:
    """Install toolkit trees: into --prefix, or by train into the install dir (`cudaredist list`).
    Atomic: a failure leaves every prefix as it was."""
    set_verbose(verbose)
    with errors():
        from cudaredist.api import InstallRequest
        from cudaredist.api import install as do_install
        from cudaredist.progress import pick

        if force:
            typer.echo("note: --force is deprecated and means --reinstall; to replace a directory "
                       "cudaredist did not install, pass --replace-foreign", err=True)
        request = InstallRequest(
            trains=tuple(trains or ()), prefix=prefix, install_dir=install_dir, platform=platform,
            profile=sel.profile, components=tuple(sel.component or ()), only=sel.only,
            products=tuple(sel.with_ or ()),
            lock=lock, source=ctx.source,
            reinstall=reinstall or force, replace_foreign=replace_foreign, refresh=refresh,
            link_mode=link_mode, lock_timeout=lock_timeout, jobs=jobs, cache_dir=ctx.cache_dir,
            where=ctx.where())
        talk = not (quiet or as_json)
        said: list[str] = []

        def say(text: str) -> None:
            if talk:
                typer.echo(text, err=True)
                said.append(text + "\n")

        outcome = do_install(request, reporter=pick(quiet=quiet or as_json, verbose=verbose), say=say)
        if prefix is not None and not force:
            _keep_noop_answer(request, outcome, "".join(said), as_json=as_json, talk=talk)
        if as_json:
            emit_json(outcome.to_json())
        for warning in outcome.warnings:  # on stderr, whatever --quiet and --json say
            typer.echo(warning, err=True)
        for failed in outcome.failed:  # a train of several: named, so the user knows which
            lead = f"CUDA {failed.train}: " if len(request.trains) > 1 else ""
            typer.echo(f"error: {lead}{failed.error}", err=True)
        if outcome.failed:
            raise typer.Exit(outcome.exit_code)


def _keep_noop_answer(request: InstallRequest, outcome: InstallOutcome, said: str, *, as_json: bool,
                      talk: bool) -> None:
    """What the same command line prints next time, kept for :mod:`cudaredist.noop` to answer."""
    from cudaredist import noop
    from cudaredist.api import noop_outcome

    argv = commands.noop_argv
    if argv is None or not outcome.done or outcome.failed or outcome.warnings:
        return

    def out(o: InstallOutcome) -> str:
        return json_text(o.to_json()) + "\n" if as_json else ""

    if all(d.noop for d in outcome.done):
        noop.remember(argv, commands.noop_before, out(outcome), said)
        return
    # installed now: the record just written, read as the next run's no-op will read it
    before = noop.before(argv)
    again = noop_outcome(request)
    if again is not None:
        noop.remember(argv, before, out(again), "".join(d.message + "\n" for d in again.done) if talk else "")


@app.command()
@grouped
def trains(
    ctx: Ctx = OPTIONS,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """List the published trains, each with its newest release and date."""
    set_verbose(verbose)
    with errors():
        with ctx.open() as src:
            rows, where, name = src.trains(), src.location(), src.name
        if as_json:
            emit_json({"base_url": where, "trains": rows} | ({"source": name} if name != "nvidia" else {}))
        else:
            for row in rows:
                typer.echo(f"{row['train']:<6} {row['release']:<9} {row['release_date']}")


def _xz_preset(value: str | None) -> int | str | None:
    if value is None or value == "store":
        return value
    if value.isdigit() and 0 <= int(value) <= 9:
        return int(value)
    raise typer.BadParameter(f"{value!r} is not a preset: give 0-9 (6 is xz's default) or store")


@app.command("mirror")
@grouped
def mirror_cmd(
    train_list: Annotated[list[str], typer.Argument(
        metavar="TRAIN...", help="Trains or releases to mirror (13.4 = newest 13.4.x, 13.0.2, ...).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The mirror directory (created, or completed "
                                                            "in place).")],
    platform: PlatformsOpt = None,
    sel: Selection = SELECTION,
    ctx: Ctx = OPTIONS,
    jobs: JobsOpt = 8,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    as_json: JsonOpt = False,
    xz_preset: Annotated[str | None, typer.Option(
        "--xz-preset", metavar="0-9|store", callback=_xz_preset,
        help="--source pypi: xz preset of the .tar.xz archives (the deflate level of the .zip ones, 1 at "
             "least); store: no compression (LZMA2's stored chunks, stored zip members): for the GB of "
             "cuBLAS, cuSPARSE, cuSOLVER ... it packs at disk speed, where xz takes minutes.  [default: 6]",
        show_default=False)] = None,
) -> None:
    """Write a mirror laid out like NVIDIA's redist site (index.html, manifests as served, archives
    at their relative paths), verified; a re-run fetches only what is missing. With --source pypi
    the archives are built from NVIDIA's wheels, holding the tree `install --source pypi` makes."""
    set_verbose(verbose)
    with errors():
        from cudaredist.fetch.fetcher import Fetcher
        from cudaredist.progress import pick
        from cudaredist.publish.mirror import write_mirror

        platforms = platforms_or_host(platform)
        reporter = pick(quiet=quiet or as_json, verbose=verbose)
        with ctx.open(jobs) as src:
            try:
                content = src.mirror_content(train_list, platforms, xz_preset=xz_preset, **sel.resolving())
                fetcher = Fetcher(src.transport, ctx.cache(), reporter=reporter, offline=ctx.offline)
                report = write_mirror(out, content, fetch=fetcher.fetch, get_bytes=src.transport.get_bytes,
                                      reporter=reporter, jobs=jobs)
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
            added = "".join(f" with {p['title']} {', '.join(p['releases'])} (in {p['out']})"
                            for p in report.products)
            typer.echo(f"mirror {report.out}: CUDA {', '.join(report.releases)}{added} for "
                       f"{', '.join(platforms)}: {len(report.archives)} archives ({how}, "
                       f"{report.count('present')} already there), {len(report.licenses)} license "
                       "files added", err=True)


@app.command("lock")
@grouped
def lock_cmd(
    train: Train,
    platform: PlatformsOpt = None,
    sel: Selection = SELECTION,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write the lock file here (default: print it).")] = None,
    hash_only: Annotated[bool, typer.Option(
        "--hash", help="Print only the content key: a stable hex key of the resolved archives "
                       "(a CI cache key).")] = False,
    ctx: Ctx = OPTIONS,
    verbose: VerboseOpt = False,
) -> None:
    """Resolve TRAIN for each --platform and write a lock file: release, the base URL that served it,
    components, URLs, sha256 and sizes. `install --lock FILE` installs exactly that."""
    set_verbose(verbose)
    with errors():
        from cudaredist.publish.lockfile import build_lock, dumps, write_lock

        platforms = platforms_or_host(platform)
        with ctx.open() as src:
            plans = src.resolve(train, platforms, **sel.resolving())
        locked = build_lock(plans, train=train, components=sel.component or [])
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


def _register_commands(app: typer.Typer) -> None:
    """The commands that live in ``cudaredist/commands/``."""
    from cudaredist.commands import cache, doctor, managed, prefix, profiles

    app.command()(prefix.verify)
    app.command()(prefix.info)
    app.command()(prefix.uninstall)
    app.command("env")(prefix.env_cmd)
    app.command("profiles")(profiles.profiles_cmd)
    app.command()(doctor.doctor)
    app.command("list")(managed.list_cmd)
    app.command("find")(managed.find_cmd)
    app.command("run", context_settings={"allow_interspersed_args": False})(managed.run_cmd)
    app.add_typer(cache.app, name="cache")


if not commands.install_only:
    _register_commands(app)


def main() -> None:
    from cudaredist import streams

    streams.configure()  # a redirected stdout on Windows: the code page its reader decodes with
    # exit code 2 is click's for usage errors; ours are 1 (or the error's own code)
    if commands.install_only:
        # `cudaredist install ...`: a group of that command alone, the same options, help and errors,
        # without importing or building the others (a no-op install is mostly start-up)
        one = typer.Typer(**_SETTINGS)
        one.callback()(_root)
        one.command()(install)
        one(prog_name="cudaredist")
        return
    app(prog_name="cudaredist")


if __name__ == "__main__":  # pragma: no cover
    main()
