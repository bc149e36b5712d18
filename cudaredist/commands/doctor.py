"""``cudaredist doctor``: why CUDA does not work on this machine (the checks are in cudaredist/doctor/)."""

from __future__ import annotations

import typer

from cudaredist.commands import options as o
from cudaredist.commands.base import Toolkit, command, emit_json


@command
def doctor(
    train: o.ToolkitArg = None, prefix: o.PrefixOpt = None,
    platform: o.PlatformOpt = None, install_dir: o.InstallDirOpt = None,
    compat: o.CompatOpt = None, as_json: o.JsonOpt = False, verbose: o.VerboseOpt = False,
) -> None:
    """Why CUDA does not work here: the tree, nvcc, the host compiler, a probe build, the driver,
    the GPUs and the environment, each ok, warn or fail with the fix. Exit 1 if any fails.
    Without --prefix or TRAIN: driver, gpu and environment only."""
    tk = Toolkit.of(locals())
    from cudaredist import doctor as doc
    from cudaredist.doctor.checks import ORDER

    # target(): --prefix, checked (and refused with a TRAIN); a TRAIN alone is the doctor's to find
    report = doc.run(tk.target() if tk.prefix is not None else None, train=tk.train,
                     inputs=doc.Inputs(compat=compat),
                     find=lambda t: doc.find_toolkit(t, tk.platform, tk.install_dir))
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
