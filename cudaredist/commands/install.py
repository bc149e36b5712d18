"""``cudaredist install``: toolkit trees into a prefix or the install dir (the command run most often,
so :mod:`cudaredist.entry` builds it alone for ``cudaredist install ...``)."""

from __future__ import annotations

from typing import Annotated

import typer

from cudaredist.commands import options as o
from cudaredist.commands.base import command, emit_json, where


@command
def install(
    trains: Annotated[list[str] | None, typer.Argument(
        metavar="[TRAIN]...", help="CUDA trains (13.4 = newest 13.4.x; 13 = newest 13.x) or exact releases "
                                   "(13.4.1). Without --prefix each goes to the install dir as "
                                   "cuda-<release>-<platform>; with --prefix, one train (or --lock).",
        show_default=False)] = None,
    prefix: o.PrefixOpt = None, install_dir: o.InstallDirOpt = None,
    platform: o.PlatformOpt = None, host: o.HostOpt = None, profile: o.ProfileOpt = None,
    component: o.ComponentOpt = None, only: o.OnlyOpt = False, with_: o.WithOpt = None,
    base_url: o.BaseUrlOpt = None, channel: o.ChannelOpt = None, mirror: o.MirrorOpt = None,
    no_fallback: o.NoFallbackOpt = False, trusted_host: o.TrustedHostOpt = None,
    cache_dir: o.CacheDirOpt = None, offline: o.OfflineOpt = False,
    source: o.SourceOpt = None, index_url: o.IndexUrlOpt = None,
    jobs: o.JobsOpt = 8, link_mode: o.LinkModeOpt = None, cache_unpacked: o.CacheUnpackedOpt = True,
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
    lock_timeout: o.LockTimeoutOpt = None, no_host_fixes: o.NoHostFixesOpt = False,
    quiet: o.QuietOpt = False, verbose: o.VerboseOpt = False, as_json: o.JsonOpt = False,
    lock: o.LockOpt = None,
) -> None:
    """Install toolkit trees: into --prefix, or by train into the install dir (`cudaredist list`).
    Atomic: a failure leaves every prefix as it was."""
    from cudaredist.api import InstallRequest
    from cudaredist.api import install as do_install
    from cudaredist.progress import pick

    if force:
        typer.echo("note: --force is deprecated and means --reinstall; to replace a directory "
                   "cudaredist did not install, pass --replace-foreign", err=True)
    request = InstallRequest(
        trains=tuple(trains or ()), prefix=prefix, install_dir=install_dir, platform=platform, host=host,
        profile=profile, components=tuple(component or ()), only=only,
        products=tuple(with_ or ()), lock=lock, source=source,
        reinstall=reinstall or force, replace_foreign=replace_foreign, refresh=refresh,
        host_fixes=not no_host_fixes, link_mode=link_mode, cache_unpacked=cache_unpacked,
        lock_timeout=lock_timeout, jobs=jobs,
        cache_dir=cache_dir, where=where(locals()))

    def say(text: str) -> None:
        if not (quiet or as_json):
            typer.echo(text, err=True)

    outcome = do_install(request, reporter=pick(quiet=quiet or as_json, verbose=verbose), say=say)
    if as_json:
        emit_json(outcome.to_json())
    for warning in outcome.warnings:  # on stderr, whatever --quiet and --json say
        typer.echo(warning, err=True)
    for failed in outcome.failed:  # a train of several: named, so the user knows which
        lead = f"CUDA {failed.train}: " if len(request.trains) > 1 else ""
        typer.echo(f"error: {lead}{failed.error}", err=True)
    if outcome.failed:
        raise typer.Exit(outcome.failed[0].error.exit_code)
