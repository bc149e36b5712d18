"""Every command's parameters, as typer builds them, against a snapshot (tests/cli_params.txt): names,
option flags, defaults and environment variables, in order. A change to a command's interface is
then a change to that file too, never an accident. After an intended change, regenerate it with
``CUDAREDIST_SNAPSHOT=1 pytest tests/test_cli_params.py`` and review the diff."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from cudaredist.cli import app

SNAPSHOT = Path(__file__).with_name("cli_params.txt")


def _lines() -> list[str]:
    out: list[str] = []
    root = typer.main.get_command(app)
    todo = [((), root)]
    while todo:
        path, cmd = todo.pop(0)
        out.append(" ".join(("cudaredist", *path)))
        for p in cmd.params:
            flags = "/".join([*p.opts, *p.secondary_opts])
            env = f" ${p.envvar}" if getattr(p, "envvar", None) else ""
            hidden = " (hidden)" if getattr(p, "hidden", False) else ""
            out.append(f"  {p.param_type_name} {p.name} {flags} = {p.default!r}{env}{hidden}")
        todo += [((*path, n), c) for n, c in sorted(getattr(cmd, "commands", {}).items())]
    return out


def test_every_command_s_parameters_are_the_snapshot_s() -> None:
    got = "\n".join(_lines()) + "\n"
    if os.environ.get("CUDAREDIST_SNAPSHOT"):
        SNAPSHOT.write_text(got)
    assert got == SNAPSHOT.read_text(), f"a command's parameters changed: see {SNAPSHOT.name}'s diff"
