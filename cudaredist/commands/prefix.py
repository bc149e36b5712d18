"""Commands on installed trees: verify, info, sbom, uninstall, env and doctor (of --prefix DIR or a
managed toolkit's TRAIN; the doctor's checks are in cudaredist/doctor/), and on managed toolkits by
train: list, find, run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cudaredist import fsops, managed, prefixes
from cudaredist import sbom as sboms
from cudaredist.cache.store import lock_wait
from cudaredist.commands import options as o
from cudaredist.commands.base import command, emit_json, fail, set_verbose
from cudaredist.fsops import WINDOWS
from cudaredist.hostfixes import describe, pending
from cudaredist.installdir import install_dir as managed_dir
from cudaredist.interrupts import signal_exit_code, with_done
from cudaredist.localfs import mb
from cudaredist.redo import request_argv, shell_line

if TYPE_CHECKING:
    from cudaredist.compat import Decision
    from cudaredist.envexport import Environment
    from cudaredist.hostcc import Choice


def _target(train: str | None, prefix: Path | None, platform: str | None, install_dir: Path | None) -> Path:
    """The installed tree a command acts on (verify, info, sbom, env, uninstall, doctor): ``--prefix``, or
    the best managed toolkit of TRAIN."""
    if prefix is not None and train is not None:
        fail("give --prefix DIR or a TRAIN, not both", 2)
    if prefix is not None:
        return prefixes.canonical_prefix(prefix)
    if train is None:
        fail("give --prefix DIR, or the TRAIN of a managed toolkit (see `cudaredist list`)", 2)
    return managed.scan(managed_dir(install_dir)).one(train, platform).path


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
    from cudaredist.drift import drift_note

    target = _target(train, prefix, platform, install_dir)
    rec = prefixes.require_record(target)
    report = prefixes.verify(target, fast=fast, record=rec)
    drift = drift_note(target, rec)  # what its profile means today that the tree lacks
    if as_json:
        emit_json(report.to_json() | ({"drift": drift} if drift else {}))
    else:
        for kind in ("missing", "changed", "extra"):
            for path in getattr(report, kind):
                why = report.reasons.get(path) if kind == "changed" else None
                typer.echo(f"{kind:8} {path}" + (f" ({why})" if why else ""))
        typer.echo(f"{'ok' if report.ok else 'DIFFERS'}: {report.checked} files checked, "
                   f"{len(report.missing)} missing, {len(report.changed)} changed, {len(report.extra)} extra"
                   + (" (added since the install, kept by uninstall)" if report.extra else ""))
        _notes(target, rec, drift)
    if not report.ok:
        raise typer.Exit(1)


@command
def info(
    train: o.ToolkitArg = None, prefix: o.PrefixOpt = None,
    platform: o.PlatformOpt = None, install_dir: o.InstallDirOpt = None,
    as_json: o.JsonOpt = False, verbose: o.VerboseOpt = False,
) -> None:
    """Show the install record of a prefix."""
    from cudaredist.drift import drift_note

    target = _target(train, prefix, platform, install_dir)
    rec = prefixes.require_record(target)
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
    _notes(target, rec, drift)


def _notes(target: Path, rec: dict[str, Any], drift: str) -> None:
    """The notes verify and info end with: how the tree drifted from its record, and each known host
    fix that applies to the tree and that it lacks (laid out by an older cudaredist, or with
    --no-host-fixes), with the command that applies it."""
    if drift:
        typer.echo(f"note: {drift}")
    for why in pending(target, rec, True):
        typer.echo(f"note: {why}: `{shell_line(request_argv(rec, target))}` applies it")


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
    if fmt not in ("cyclonedx", "spdx"):
        fail(f"--format {fmt}: give cyclonedx (CycloneDX 1.6 JSON) or spdx (SPDX 2.3 JSON)", 2)
    inv = sboms.inventory(prefixes.require_record(_target(train, prefix, platform, install_dir)))
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
    if prefix is None and train is not None:
        here = managed.scan(root := managed_dir(install_dir))
        targets = [t.path for t in here.find(train, platform) or [here.one(train, platform)]]
        if len(targets) > 1 and not remove_all:
            fail(f"{len(targets)} managed toolkits match {train}: "
                 f"{', '.join(t.name for t in targets)}; pass --all to remove them all, or "
                 "name one (e.g. a full release, or --platform)", 2)
    else:
        root, targets = None, [_target(train, prefix, platform, install_dir)]
    timeout = lock_wait(lock_timeout)
    removed: list[str] = []
    try:
        for target in targets:
            with prefixes.prefix_lock(target, timeout):
                n = prefixes.uninstall(target)
            typer.echo(f"removed {n} files from {target}")
            removed.append(str(target))
        if root is not None:
            managed.link_trains(root, timeout=timeout, warn=lambda w: typer.echo(w, err=True))
    except KeyboardInterrupt as exc:  # what each target holds now, said (never "nothing was changed")
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
    from cudaredist.envexport import SHELLS, append_github, render

    if shell is not None and shell not in SHELLS:
        fail(f"unknown --shell {shell!r}; choose one of {', '.join(SHELLS)}", 2)
    target = _target(train, prefix, platform, install_dir)
    plan = prefixes.require_record(target)["plan"]
    chosen, decided, found = _environment(target, plan, host_compiler, compat)
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


@command
def doctor(
    train: o.ToolkitArg = None, prefix: o.PrefixOpt = None,
    platform: o.PlatformOpt = None, install_dir: o.InstallDirOpt = None,
    compat: o.CompatOpt = None, as_json: o.JsonOpt = False, verbose: o.VerboseOpt = False,
) -> None:
    """Why CUDA does not work here: the tree, nvcc, the host compiler, a probe build, the driver,
    the GPUs and the environment, each ok, warn or fail with the fix. Exit 1 if any fails.
    Without --prefix or TRAIN: driver, gpu and environment only."""
    from cudaredist import doctor as doc
    from cudaredist.doctor.checks import ORDER

    # _target: --prefix, checked (and refused with a TRAIN); a TRAIN alone is the doctor's to find
    report = doc.run(_target(train, prefix, platform, install_dir) if prefix is not None else None,
                     train=train, inputs=doc.Inputs(compat=compat),
                     find=lambda t: doc.find_toolkit(t, platform, install_dir))
    if as_json:
        emit_json(report.to_json())
    else:
        width = max(len(n) for n in ORDER)
        for c in report.checks:
            typer.echo(f"{c.status:<4}  {c.name:<{width}}  {c.detail}")
            if c.fix:
                typer.echo(f"{'':<4}  {'':<{width}}  fix: {c.fix}")
    if report.failed:
        raise typer.Exit(1)


@command
def run_cmd(
    train: o.Train,
    command: Annotated[list[str], typer.Argument(
        metavar="-- COMMAND...", help="The command to run with the toolkit's environment.")],
    platform: o.PlatformOpt = None, install_dir: o.InstallDirOpt = None,
    host_compiler: o.HostCompilerOpt = None, compat: o.CompatOpt = None, verbose: o.VerboseOpt = False,
) -> None:
    """Run COMMAND with the environment of TRAIN's managed toolkit: cudaredist run 13.4 -- nvcc ...

    The exit code is the command's."""
    from cudaredist.envexport import applied

    # options stop at TRAIN (so the command keeps its own): ours between TRAIN and -- are read here
    given, command = _own_options(command)
    install_dir = Path(given["--install-dir"]) if "--install-dir" in given else install_dir
    platform = given.get("--platform", platform)
    toolkit = managed.scan(managed_dir(install_dir)).one(train, platform or managed.host())
    chosen, decided, found = _environment(toolkit.path, toolkit.record["plan"],  # (as scan read it)
                                          given.get("--host-compiler", host_compiler),
                                          given.get("--compat", compat))
    if chosen is not None and not chosen.quiet and chosen.reason:
        typer.echo(f"note: {chosen.reason}", err=True)
    if decided.directory:
        typer.echo(f"note: compat: {decided.reason}", err=True)
    env = applied(found, os.environ)
    if not command:
        fail("give the command to run after --, e.g. cudaredist run 13.4 -- nvcc --version", 2)
    program = command[0]
    # a bare name is looked up on the toolkit's PATH first (nvcc is the toolkit's, not the host's)
    resolved = shutil.which(program, path=env.get("PATH")) if os.sep not in program else program
    if resolved is None:
        fail(f"{program}: command not found (with {toolkit.path} on PATH)", 127)
    try:
        code = subprocess.call([str(resolved), *command[1:]], env=env)
    except OSError as exc:
        fail(f"cannot run {program}: {exc.strerror}", 126)
    raise typer.Exit(signal_exit_code(-code) if code < 0 else code)  # killed by signal N: the shell's 128 + N


_RUN_OPTIONS = {"--install-dir": "--install-dir", "--platform": "--platform", "-p": "--platform",
                "--host-compiler": "--host-compiler", "--compat": "--compat"}


def _own_options(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """``run``'s own options given after TRAIN (``run 13.4 --install-dir D -- nvcc``), and the
    command after them. They end at ``--`` or at the first word that is not one of them."""
    given: dict[str, str] = {}
    while args and args[0] != "--":
        name, eq, value = args[0].partition("=")
        if name in ("--verbose", "-v") and not eq:
            set_verbose(True)
        elif name not in _RUN_OPTIONS:
            if name.startswith("-"):  # no command is named -x: an option run does not have
                fail(f"no such option {args[0]} for run (see cudaredist run --help); give the command "
                     "after --, e.g. cudaredist run 13.4 -- nvcc --version", 2)
            return given, args
        elif eq:
            given[_RUN_OPTIONS[name]] = value
        elif len(args) < 2:
            fail(f"{name} needs a value", 2)
        else:
            given[_RUN_OPTIONS[name]], args = args[1], args[1:]
        args = args[1:]
    return given, args[1:]


def _environment(target: Path, plan: dict[str, Any], host_compiler: str | None,
                 compat: str | None) -> tuple[Choice | None, Decision, Environment]:
    """The environment of the tree at ``target`` (``plan``: its record's), which env prints and run
    runs a command with: the host compiler (``--host-compiler``) and compat (``--compat``) decided for
    it, and envexport's environment with both applied."""
    from cudaredist.compat import for_tree as compat_for
    from cudaredist.envexport import environment
    from cudaredist.hostcc import for_tree

    tools = str(plan.get("host", ""))  # a cross tree's
    chosen = for_tree(target, platform=plan["platform"], release=plan["release"], env=os.environ,
                      host_windows=WINDOWS, given=host_compiler, host=tools)
    decided = compat_for(target, plan, compat)
    found = environment(str(target), platform=plan["platform"], release=plan["release"], host_windows=WINDOWS,
                        msbuild=any(c["name"] == "visual_studio_integration" for c in plan["components"]),
                        host=tools, host_compiler=chosen, compat=decided.directory if decided.first else "")
    return chosen, decided, found


@command
def list_cmd(
    install_dir: o.InstallDirOpt = None,
    show_all: Annotated[bool, typer.Option(
        "--all", help="Also toolkits found on the system (CUDA_PATH, /usr/local/cuda*, conda, pip "
                      "wheels), with how each was found.")] = False,
    as_json: o.JsonOpt = False, verbose: o.VerboseOpt = False,
) -> None:
    """List managed toolkits (release, platform, profile, size, path), newest first."""
    here = managed.scan(managed_dir(install_dir))
    for _path, err in here.damaged:
        typer.echo(f"warning: skipped: {err}", err=True)
    found = []
    if show_all:
        mine = {os.path.realpath(t.path) for t in here.toolkits}
        found = [f for f in managed.system_toolkits() if os.path.realpath(f.path) not in mine]
    if as_json:
        emit_json({"install_dir": str(here.root), "toolkits": [t.to_json() for t in here.toolkits]}
                  | ({"system": [f.to_json() for f in found]} if show_all else {}))
        return
    if not here.toolkits and not here.damaged:
        typer.echo(f"no managed toolkits in {here.root} (`cudaredist install 13.4` puts one there)", err=True)
    for t in here.toolkits:
        typer.echo(f"{t.release:<9} {t.platform:<15} {t.profile:<8} {mb(t.size):>10}  "
                   f"{t.path}{t.added}")
    for f in found:
        typer.echo(f"{f.release or '?':<9} {'(system)':<15} {'':<8} {'':>10}  {f.path}  [{f.how}]")


@command
def find_cmd(train: o.Train, platform: o.PlatformOpt = None, install_dir: o.InstallDirOpt = None,
             verbose: o.VerboseOpt = False) -> None:
    """Print the path of the newest installed managed toolkit of TRAIN (exit 1 when there is none)."""
    here = managed.scan(managed_dir(install_dir))
    found = here.one(train, platform or managed.host())  # none: a damaged one's error, else how to install
    if (damaged := here.damaged_of(train, platform or managed.host())) is not None:
        typer.echo(f"warning: skipped: {damaged}", err=True)
    typer.echo(str(found.path))
