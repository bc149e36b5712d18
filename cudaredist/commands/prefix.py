"""Commands on an installed tree: verify, info, uninstall, env."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from cudaredist.commands.base import emit_json, errors, fail, set_verbose
from cudaredist.commands.options import JsonOpt, PrefixOpt, VerboseOpt


def verify(
    prefix: PrefixOpt,
    fast: Annotated[bool, typer.Option("--fast", help="Compare sizes, exec bits and link targets; "
                                                      "do not re-hash.")] = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Re-hash the tree against its install record: missing, changed (content, exec bits, link
    targets) and extra files."""
    set_verbose(verbose)
    with errors():
        from cudaredist.record import canonical_prefix
        from cudaredist.record import verify as do_verify

        report = do_verify(canonical_prefix(prefix), fast=fast)
        if as_json:
            emit_json(report.to_json())
        else:
            for kind in ("missing", "changed", "extra"):
                for path in getattr(report, kind):
                    why = report.reasons.get(path) if kind == "changed" else None
                    typer.echo(f"{kind:8} {path}" + (f" ({why})" if why else ""))
            status = "ok" if report.ok else "DIFFERS"
            typer.echo(f"{status}: {report.checked} files checked, {len(report.missing)} missing, "
                       f"{len(report.changed)} changed, {len(report.extra)} extra")
        if not report.ok:
            raise typer.Exit(1)


def info(prefix: PrefixOpt, as_json: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """Show the install record of a prefix."""
    set_verbose(verbose)
    with errors():
        from cudaredist.record import canonical_prefix, require_record

        rec = require_record(canonical_prefix(prefix))
        if as_json:
            emit_json({k: v for k, v in rec.items() if k != "files"} | {"file_count": len(rec["files"])})
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


def uninstall(prefix: PrefixOpt, verbose: VerboseOpt = False,
              lock_timeout: Annotated[float | None, typer.Option("--lock-timeout")] = None) -> None:
    """Remove exactly what cudaredist installed in the prefix (other files stay)."""
    set_verbose(verbose)
    with errors():
        from cudaredist.install import lock_timeout_default, prefix_lock
        from cudaredist.record import canonical_prefix
        from cudaredist.record import uninstall as do_uninstall

        target = canonical_prefix(prefix)
        with prefix_lock(target, lock_timeout_default() if lock_timeout is None else lock_timeout):
            n = do_uninstall(target)
        typer.echo(f"removed {n} files from {target}")


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
    set_verbose(verbose)
    with errors():
        from cudaredist.envexport import SHELLS, append_github, default_shell, environment, render
        from cudaredist.record import canonical_prefix, require_record

        if shell is not None and shell not in SHELLS:
            fail(f"unknown --shell {shell!r}; choose one of {', '.join(SHELLS)}", 2)
        target = canonical_prefix(prefix)
        plan = require_record(target)["plan"]
        host_windows = os.name == "nt"
        found = environment(str(target), platform=plan["platform"], release=plan["release"],
                            host_windows=host_windows)
        for note in [] if as_json else found.notes:
            typer.echo(f"note: {note}", err=True)
        if github:
            append_github(found, os.environ)
            for name, value in found.variables:
                typer.echo(f"set {name}={value}", err=True)
            for var, dirs in found.prepend:
                typer.echo(f"prepended to {var}: {os.pathsep.join(dirs)}", err=True)
        elif as_json:
            emit_json({"prefix": str(target), "release": plan["release"], "platform": plan["platform"]}
                       | found.to_json())
        else:
            typer.echo(render(found, shell or default_shell(host_windows)), nl=False)


