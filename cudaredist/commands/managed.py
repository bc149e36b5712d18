"""Commands on managed toolkits by train: list, find, run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from cudaredist.commands import options as o
from cudaredist.commands.base import command, emit_json, fail, set_verbose, tree_environment
from cudaredist.errors import signal_exit_code
from cudaredist.localfs import mb
from cudaredist.managed import host


@command
def list_cmd(
    install_dir: o.InstallDirOpt = None,
    show_all: Annotated[bool, typer.Option(
        "--all", help="Also toolkits found on the system (CUDA_PATH, /usr/local/cuda*, conda, pip "
                      "wheels), with how each was found.")] = False,
    as_json: o.JsonOpt = False, verbose: o.VerboseOpt = False,
) -> None:
    """List managed toolkits (release, platform, profile, size, path), newest first."""
    from cudaredist.installdir import install_dir as managed_dir
    from cudaredist.managed import scan, system_toolkits

    root = managed_dir(install_dir)
    found_here = scan(root)
    toolkits = found_here.toolkits
    for _path, err in found_here.damaged:
        typer.echo(f"warning: skipped: {err}", err=True)
    found = []
    if show_all:
        mine = {os.path.realpath(t.path) for t in toolkits}
        found = [f for f in system_toolkits() if os.path.realpath(f.path) not in mine]
    if as_json:
        emit_json({"install_dir": str(root), "toolkits": [t.to_json() for t in toolkits]}
                  | ({"system": [f.to_json() for f in found]} if show_all else {}))
        return
    if not toolkits and not found_here.damaged:
        typer.echo(f"no managed toolkits in {root} (`cudaredist install 13.4` puts one there)", err=True)
    for t in toolkits:
        typer.echo(f"{t.release:<9} {t.platform:<15} {t.profile:<8} {mb(t.size):>10}  "
                   f"{t.path}{t.added}")
    for f in found:
        typer.echo(f"{f.release or '?':<9} {'(system)':<15} {'':<8} {'':>10}  {f.path}  [{f.how}]")


@command
def find_cmd(train: o.Train, platform: o.PlatformOpt = None, install_dir: o.InstallDirOpt = None,
             verbose: o.VerboseOpt = False) -> None:
    """Print the path of the newest installed managed toolkit of TRAIN (exit 1 when there is none)."""
    from cudaredist.installdir import install_dir as managed_dir
    from cudaredist.managed import find_one, scan

    root = managed_dir(install_dir)
    found = find_one(root, train, platform or host())  # none: a damaged one's error, else how to install
    if (damaged := scan(root).damaged_of(train, platform or host())) is not None:
        typer.echo(f"warning: skipped: {damaged}", err=True)
    typer.echo(str(found.path))


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
    from cudaredist.installdir import install_dir as managed_dir
    from cudaredist.managed import find_one

    # options stop at TRAIN (so the command keeps its own): ours between TRAIN and -- are read here
    given, command = _own_options(command)
    install_dir = Path(given["--install-dir"]) if "--install-dir" in given else install_dir
    platform = given.get("--platform", platform)
    toolkit = find_one(managed_dir(install_dir), train, platform or host())
    _plan, chosen, decided, found = tree_environment(
        toolkit.path, given.get("--host-compiler", host_compiler), given.get("--compat", compat))
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
            return given, args
        elif eq:
            given[_RUN_OPTIONS[name]] = value
        elif len(args) < 2:
            fail(f"{name} needs a value", 2)
        else:
            given[_RUN_OPTIONS[name]], args = args[1], args[1:]
        args = args[1:]
    return given, args[1:]
