"""What a source offers, without installing: ``trains``, ``resolve``, ``lock`` and ``mirror``; and
``profiles``, each profile's components per train, from the profile data (offline)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from cudaredist import profiles
from cudaredist.commands import options as o
from cudaredist.commands.base import command, emit_json, opened
from cudaredist.localfs import mb
from cudaredist.plan import version_key
from cudaredist.profiles import product_title


def _resolving(profile: str | None, component: list[str] | None, only: bool,
               with_: list[str] | None) -> dict[str, Any]:
    """What to install (--profile, --component, --only, --with; resolve, mirror and lock take them) as
    the keyword arguments of a source's ``resolve`` and ``mirror_content``."""
    return {"profile": profiles.effective_profile(profile, only), "components": component or [],
            "products": with_ or []}


@command
def resolve(
    train: o.Train, platform: o.PlatformOpt = None, host: o.HostOpt = None, profile: o.ProfileOpt = None,
    component: o.ComponentOpt = None, only: o.OnlyOpt = False, with_: o.WithOpt = None,
    base_url: o.BaseUrlOpt = None, channel: o.ChannelOpt = None, mirror: o.MirrorOpt = None,
    no_fallback: o.NoFallbackOpt = False, trusted_host: o.TrustedHostOpt = None,
    cache_dir: o.CacheDirOpt = None, offline: o.OfflineOpt = False,
    source: o.SourceOpt = None, index_url: o.IndexUrlOpt = None,
    as_json: o.JsonOpt = False, verbose: o.VerboseOpt = False,
) -> None:
    """Show the install plan without installing: release, and per component version, URL, size, sha256."""
    what = _resolving(profile, component, only, with_)
    from cudaredist.sources.cross import resolve_tree

    with opened(locals()) as src:
        plan = resolve_tree(src, train, profiles.host_platform(platform), host or "", **what)
    if as_json:
        emit_json(plan.to_json())
        return
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


@command
def trains(base_url: o.BaseUrlOpt = None, channel: o.ChannelOpt = None, mirror: o.MirrorOpt = None,
           no_fallback: o.NoFallbackOpt = False, trusted_host: o.TrustedHostOpt = None,
           cache_dir: o.CacheDirOpt = None, offline: o.OfflineOpt = False,
           source: o.SourceOpt = None, index_url: o.IndexUrlOpt = None,
           as_json: o.JsonOpt = False, verbose: o.VerboseOpt = False) -> None:
    """List the published trains, each with its newest release and date."""
    with opened(locals()) as src:
        rows, where, name = src.trains(), src.location(), src.name
    if as_json:
        emit_json({"base_url": where, "trains": rows} | ({"source": name} if name != "nvidia" else {}))
    else:
        for row in rows:
            typer.echo(f"{row['train']:<6} {row['release']:<9} {row['release_date']}")


def _platforms_or_host(values: list[str] | None) -> list[str]:
    """--platform values, repeated or comma-separated, in order, once each; default the host's."""
    out = [p.strip() for v in values or [] for p in v.split(",") if p.strip()]
    return [profiles.host_platform(p) for p in dict.fromkeys(out)] or [profiles.host_platform()]


def _xz_preset(value: str | None) -> int | str | None:
    if value is None or value == "store":
        return value
    if value.isdigit() and 0 <= int(value) <= 9:
        return int(value)
    raise typer.BadParameter(f"{value!r} is not a preset: give 0-9 (6 is xz's default) or store")


@command
def mirror_cmd(
    train_list: Annotated[list[str], typer.Argument(
        metavar="TRAIN...", help="Trains or releases to mirror (13.4 = newest 13.4.x, 13.0.2, ...).")],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="DIR",
                                      help="The mirror directory (created, or completed in place).")],
    platform: o.PlatformsOpt = None, profile: o.ProfileOpt = None,
    component: o.ComponentOpt = None, only: o.OnlyOpt = False, with_: o.WithOpt = None,
    base_url: o.BaseUrlOpt = None, channel: o.ChannelOpt = None, mirror: o.MirrorOpt = None,
    no_fallback: o.NoFallbackOpt = False, trusted_host: o.TrustedHostOpt = None,
    cache_dir: o.CacheDirOpt = None, offline: o.OfflineOpt = False,
    source: o.SourceOpt = None, index_url: o.IndexUrlOpt = None,
    jobs: o.JobsOpt = 8, quiet: o.QuietOpt = False, verbose: o.VerboseOpt = False, as_json: o.JsonOpt = False,
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
    what = _resolving(profile, component, only, with_)
    from cudaredist.cache.store import Cache
    from cudaredist.fetch.fetcher import Fetcher
    from cudaredist.progress import pick
    from cudaredist.publish.mirror import write_mirror

    platforms = _platforms_or_host(platform)
    reporter = pick(quiet=quiet or as_json, verbose=verbose)
    with opened(locals(), jobs) as src:  # (write_mirror closes the reporter after each phase it starts)
        content = src.mirror_content(train_list, platforms, xz_preset=xz_preset, **what)
        fetcher = Fetcher(src.transport, Cache(cache_dir), reporter=reporter, offline=offline)
        report = write_mirror(out, content, fetch=fetcher.fetch, get_bytes=src.transport.get_bytes,
                              reporter=reporter, jobs=jobs)
    if as_json:
        emit_json(report.to_json())
    elif not quiet:
        for note in report.notes:
            typer.echo(f"note: {note}", err=True)
        got = f"{report.count('downloaded')} downloaded, {report.count('cached')} from cache"
        how = (f"{report.count('downloaded') + report.count('cached')} built from wheels ({got})"
               if content.builds else got)
        added = "".join(f" with {p['title']} {', '.join(p['releases'])} (in {p['out']})"
                        for p in report.products)
        typer.echo(f"mirror {report.out}: CUDA {', '.join(report.releases)}{added} for "
                   f"{', '.join(platforms)}: {len(report.archives)} archives ({how}, "
                   f"{report.count('present')} already there), {len(report.licenses)} license "
                   "files added" + (f"; its manifests are in {report.base} (give that to --mirror)"
                                    if report.base != report.out else ""), err=True)


@command
def lock_cmd(
    train: o.Train, platform: o.PlatformsOpt = None, host: o.HostOpt = None, profile: o.ProfileOpt = None,
    component: o.ComponentOpt = None, only: o.OnlyOpt = False, with_: o.WithOpt = None,
    output: o.OutputOpt = None,
    hash_only: Annotated[bool, typer.Option(
        "--hash", help="Print only the content key: a stable hex key of the resolved archives "
                       "(a CI cache key).")] = False,
    base_url: o.BaseUrlOpt = None, channel: o.ChannelOpt = None, mirror: o.MirrorOpt = None,
    no_fallback: o.NoFallbackOpt = False, trusted_host: o.TrustedHostOpt = None,
    cache_dir: o.CacheDirOpt = None, offline: o.OfflineOpt = False,
    source: o.SourceOpt = None, index_url: o.IndexUrlOpt = None,
    verbose: o.VerboseOpt = False,
) -> None:
    """Resolve TRAIN for each --platform and write a lock file: release, the base URL that served it,
    components, URLs, sha256 and sizes. `install --lock FILE` installs exactly that."""
    what = _resolving(profile, component, only, with_)
    from cudaredist.publish.lockfile import build_lock, dumps, write_lock

    platforms = _platforms_or_host(platform)
    with opened(locals()) as src:
        if host:  # cross trees: each --platform's plan pins its host's tools too
            from cudaredist.sources.cross import resolve_tree

            plans = [resolve_tree(src, train, p, host, **what) for p in platforms]
        else:
            plans = src.resolve(train, platforms, **what)
    locked = build_lock(plans, train=train, components=component or [])
    if output is not None:
        write_lock(output, locked)
        typer.echo(f"wrote {output}: CUDA {locked['release']} for {', '.join(platforms)}, "
                   f"content key {locked['content_key'][:16]}…", err=True)
    if hash_only:
        typer.echo(locked["content_key"])
    elif output is None:
        typer.echo(dumps(locked), nl=False)


TrainsOpt = Annotated[list[str] | None, typer.Option(
    "--train", "-t", help="Show the components a release of this train needs (repeatable): 13.0, 12.9, "
                          "13.4.1. Without it, each component's first release.")]
ProfileNameOpt = Annotated[list[str] | None, typer.Option(
    "--profile", help="Only this profile (repeatable). Default: all.")]


def _row(name: str, trains: list[str]) -> dict[str, Any]:
    prof = profiles.get_profile(name)
    specs = list(dict.fromkeys(prof.specs))  # a profile extending another may repeat one
    return {"name": name, "description": prof.description, "extends": prof.extends or None,
            "components": [{"name": str(s), "alternatives": list(s.names), "since": s.since or None,
                            "platforms": list(s.platforms) or None} for s in specs]} | (
        {"trains": {t: [str(s) for s in specs if s.applies_to(t)] for t in trains}} if trains else {})


@command
def profiles_cmd(train: TrainsOpt = None, profile: ProfileNameOpt = None, as_json: o.JsonOpt = False,
                 verbose: o.VerboseOpt = False) -> None:
    """List each profile's components, per train (offline: from the profile data).

    'a|b' is a component NVIDIA renamed: a release installs the first of the names it has. Both
    sources install the same components; --source pypi builds the nvcc-based profiles from 13.0 on.
    """
    from cudaredist.sources.nvidia.releases import check_train

    trains = list(dict.fromkeys(check_train(t) for t in train or []))
    rows = [_row(name, trains) for name in dict.fromkeys(profile or profiles.profile_names())]
    if as_json:
        emit_json({"profiles": rows})
        return
    for row in rows:
        extends = f" (extends {row['extends']})" if row["extends"] else ""
        typer.echo(f"{row['name']}{extends}: {row['description']}")
        if trains:
            for t, comps in row["trains"].items():
                typer.echo(f"  CUDA {t}: {' '.join(comps)}")
            continue
        by_since: dict[str, list[str]] = {}
        for c in row["components"]:
            only = f" ({' and '.join(c['platforms'])} only)" if c["platforms"] else ""
            by_since.setdefault(c["since"] or "", []).append(c["name"] + only)
        for since in sorted(by_since, key=version_key):
            label = f"from {since}:" if since else "every release:"
            typer.echo(f"  {label:<15} {' '.join(by_since[since])}")
