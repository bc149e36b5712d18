"""Commands on an installed tree: verify, info, uninstall, env."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from cudaredist.commands import options as o
from cudaredist.commands.base import Toolkit, command, emit_json, fail, tree_environment
from cudaredist.fsops import WINDOWS


@command
def verify(
    train: o.ToolkitArg = None, prefix: o.PrefixOpt = None,
    platform: o.PlatformOpt = None, install_dir: o.InstallDirOpt = None,
    fast: Annotated[bool, typer.Option("--fast", help="Compare sizes, exec bits and link targets; "
                                                      "do not re-hash.")] = False,
    as_json: o.JsonOpt = False, verbose: o.VerboseOpt = False,
) -> None:
    """Re-hash the tree against its install record: missing and changed files (content, exec bits,
    link targets) fail it; extra files, added since the install, are listed."""
    tk = Toolkit.of(locals())
    from cudaredist.drift import drift_note
    from cudaredist.prefixes import require_record
    from cudaredist.prefixes import verify as do_verify

    report = do_verify(tk.target(), fast=fast)
    report.drift = drift_note(tk.target(), require_record(tk.target()))
    if as_json:
        emit_json(report.to_json())
    else:
        for kind in ("missing", "changed", "extra"):
            for path in getattr(report, kind):
                why = report.reasons.get(path) if kind == "changed" else None
                typer.echo(f"{kind:8} {path}" + (f" ({why})" if why else ""))
        typer.echo(f"{'ok' if report.ok else 'DIFFERS'}: {report.checked} files checked, "
                   f"{len(report.missing)} missing, {len(report.changed)} changed, {len(report.extra)} extra"
                   + (" (added since the install, kept by uninstall)" if report.extra else ""))
        if report.drift:
            typer.echo(f"note: {report.drift}")
        for line in _unfixed(tk.target()):
            typer.echo(line)
    if not report.ok:
        raise typer.Exit(1)


@command
def info(
    train: o.ToolkitArg = None, prefix: o.PrefixOpt = None,
    platform: o.PlatformOpt = None, install_dir: o.InstallDirOpt = None,
    as_json: o.JsonOpt = False, verbose: o.VerboseOpt = False,
) -> None:
    """Show the install record of a prefix."""
    tk = Toolkit.of(locals())
    from cudaredist.drift import drift_note
    from cudaredist.hostfixes import describe
    from cudaredist.prefixes import require_record

    target = tk.target()
    rec = require_record(target)
    drift = drift_note(target, rec)
    if as_json:
        emit_json({k: v for k, v in rec.items() if k != "files"} | {"file_count": len(rec["files"])}
                  | ({"drift": drift} if drift else {}))
        return
    plan = rec["plan"]
    typer.echo(f"prefix:    {target}")
    typer.echo(f"release:   CUDA {plan['release']} ({plan.get('release_date') or 'date unknown'})")
    # one release's components differ in version (13.5.0: nvcc 13.5.37, CUPTI 13.5.25): named apart
    same: dict[str, list[str]] = {}
    for c in plan["components"]:
        if not c.get("product") and c["version"].split(".")[:2] == plan["release"].split(".")[:2]:
            same.setdefault(".".join(c["version"].split(".")[:3]), []).append(c["name"])
    if len(same) > 1:
        groups = "; ".join(f"{v} ({', '.join(names)})" for v, names in same.items())
        typer.echo(f"versions:  {groups} (one release, named by its label)")
    host = f" (tools for {plan['host']})" if plan.get("host") else ""
    typer.echo(f"platform:  {plan['platform']}{host}")
    typer.echo(f"profile:   {plan['profile']}")
    for p in plan.get("products", []):
        typer.echo(f"with:      {p.get('name')} {p.get('release')} "
                   f"({p.get('cuda_variant') or 'any CUDA'} build, --with {p.get('requested')}) "
                   f"from {p.get('base_url')}" + (f": {p['note']}" if p.get("note") else ""))
    channel = f", {plan['channel']} channel" if plan.get("channel") else ""
    typer.echo(f"source:    {plan.get('source', 'nvidia')} {plan['base_url']}{channel}")
    typer.echo(f"installed: {rec['installed_at']} by {rec['tool']}")
    prov = rec.get("provenance", {})
    if prov.get("hashes_from"):
        typer.echo(f"hashes:    from {prov['hashes_from']}")
    typer.echo(f"files:     {len(rec['files'])}")
    served = prov.get("archives", {})
    for c in plan["components"]:
        built = f" ({c['platform']})" if c.get("platform") else ""
        typer.echo(f"  {c['name']:<20} {c['version']:<14} sha256 {c['sha256']}{built}")
        if c["name"] in served:
            typer.echo(f"  {'':<20} from {served[c['name']]}")
    if fixes := describe(rec):
        typer.echo("host fixes: (NVIDIA's bytes changed where they clash with a newer host; verify checks "
                   "the fixed bytes; `install --reinstall --no-host-fixes` restores NVIDIA's)")
        for line in fixes:
            typer.echo(line)
    if drift:
        typer.echo(f"note: {drift}")
    for line in _unfixed(target, rec):
        typer.echo(line)


def _unfixed(target: Path, rec: dict[str, Any] | None = None) -> list[str]:
    """The notes for the known host fixes that apply to the tree and that it lacks (laid out by an
    older cudaredist, or with --no-host-fixes), with the command that applies them."""
    from cudaredist.hostfixes import pending
    from cudaredist.prefixes import require_record
    from cudaredist.redo import request_argv, shell_line

    rec = rec if rec is not None else require_record(target)
    return [f"note: {why}: `{shell_line(request_argv(rec, target))}` applies it"
            for why in pending(target, rec, True)]


@command
def sbom(
    train: o.ToolkitArg = None, prefix: o.PrefixOpt = None,
    platform: o.PlatformOpt = None, install_dir: o.InstallDirOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="cyclonedx (1.6 JSON) or spdx (2.3 JSON).")]
    = "cyclonedx",
    output: o.OutputOpt = None, verbose: o.VerboseOpt = False,
) -> None:
    """The tree's software bill of materials: the toolkit, every archive or wheel (its verified sha256,
    download URL, license, purl) and the host fixes that changed NVIDIA's bytes."""
    tk = Toolkit.of(locals())
    from cudaredist import fsops
    from cudaredist import sbom as sboms
    from cudaredist.prefixes import require_record

    if fmt not in ("cyclonedx", "spdx"):
        fail(f"--format {fmt}: give cyclonedx (CycloneDX 1.6 JSON) or spdx (SPDX 2.3 JSON)", 2)
    inv = sboms.inventory(require_record(tk.target()))
    text = sboms.cyclonedx(inv) if fmt == "cyclonedx" else sboms.spdx(inv)
    if output is None:
        typer.echo(text, nl=False)
    else:
        fsops.write_atomic(output, text.encode())


@command
def uninstall(
    train: o.ToolkitArg = None, prefix: o.PrefixOpt = None,
    platform: o.PlatformOpt = None, install_dir: o.InstallDirOpt = None,
    remove_all: Annotated[bool, typer.Option(
        "--all", help="With a TRAIN: remove all its managed toolkits (every patch and platform).")] = False,
    lock_timeout: o.LockTimeoutOpt = None, verbose: o.VerboseOpt = False,
) -> None:
    """Remove exactly what cudaredist installed in the prefix (other files stay), or the managed
    toolkits of a TRAIN."""
    tk = Toolkit.of(locals())
    from cudaredist.cache.store import lock_wait
    from cudaredist.installdir import install_dir as managed_dir
    from cudaredist.managed import find, link_trains
    from cudaredist.prefixes import prefix_lock
    from cudaredist.prefixes import uninstall as do_uninstall

    if tk.prefix is None and tk.train is not None:
        root = managed_dir(tk.install_dir)
        hits = find(root, tk.train, tk.platform)
        if len(hits) > 1 and not remove_all:
            fail(f"{len(hits)} managed toolkits match {tk.train}: "
                 f"{', '.join(h.path.name for h in hits)}; pass --all to remove them all, or "
                 "name one (e.g. a full release, or --platform)", 2)
        targets = [h.path for h in hits] or [tk.target()]
    else:
        root, targets = None, [tk.target()]
    timeout = lock_wait(lock_timeout)
    removed: list[str] = []
    try:
        for target in targets:
            with prefix_lock(target, timeout):
                n = do_uninstall(target)
            typer.echo(f"removed {n} files from {target}")
            removed.append(str(target))
        if root is not None:
            link_trains(root, timeout=timeout, warn=lambda w: typer.echo(w, err=True))
    except KeyboardInterrupt as exc:  # what each target holds now, said (never "nothing was changed")
        from cudaredist.interrupts import with_done

        raise with_done(exc, f"interrupted; nothing {'more ' if removed else ''}was removed",
                        "removed before it", removed) from None


@command
def env_cmd(
    train: o.ToolkitArg = None, prefix: o.PrefixOpt = None,
    platform: o.PlatformOpt = None, install_dir: o.InstallDirOpt = None,
    shell: Annotated[str | None, typer.Option(
        "--shell", help="sh, bash, zsh, fish, pwsh or cmd.  [default: sh; pwsh on Windows]",
        show_default=False)] = None,
    github: Annotated[bool, typer.Option(
        "--github", help="Append to $GITHUB_ENV and $GITHUB_PATH (a GitHub Actions step) instead "
                         "of printing.")] = False,
    host_compiler: o.HostCompilerOpt = None, compat: o.CompatOpt = None,
    as_json: o.JsonOpt = False, verbose: o.VerboseOpt = False,
) -> None:
    """Print the environment for a tree: eval "$(cudaredist env --prefix DIR)" or "$(cudaredist env 13.4)"."""
    tk = Toolkit.of(locals())
    from cudaredist.envexport import SHELLS, append_github, render

    if shell is not None and shell not in SHELLS:
        fail(f"unknown --shell {shell!r}; choose one of {', '.join(SHELLS)}", 2)
    target = tk.target()
    plan, chosen, decided, found = tree_environment(target, host_compiler, compat)
    notes = [f"compat: {decided.reason}"] * bool(decided.directory) + list(found.notes)
    for note in [] if as_json else notes:
        typer.echo(f"note: {note}", err=True)
    if github:
        append_github(found, os.environ)
        for name, value in found.variables:
            typer.echo(f"set {name}={value}", err=True)
        for var, dirs in found.prepend:
            typer.echo(f"prepended to {var}: {os.pathsep.join(dirs)}", err=True)
    elif as_json:
        emit_json({"prefix": str(target), "release": plan["release"], "platform": plan["platform"]}
                  | found.to_json() | ({"host_compiler": {"reason": chosen.reason, "candidates": [
                      {"name": n, "verdict": said} for n, said in chosen.candidates]}} if chosen else {})
                  | {"compat": {"first": decided.first, "reason": decided.reason}})
    else:
        typer.echo(render(found, shell or ("pwsh" if WINDOWS else "sh")), nl=False)


