"""The command line: parse, call the library, render. One error boundary turns a
:class:`CudaRedistError` into a message on stderr and a non-zero exit code."""

from __future__ import annotations

from typing import Annotated

import typer

from cudaredist import __version__, commands
from cudaredist.commands.base import errors
from cudaredist.commands.install import install
from cudaredist.commands.options import App

app = App(name="cudaredist", help="Assemble a CUDA toolkit tree from NVIDIA's redistributable archives: "
                                  "no installer, no admin rights, any host.",
          no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


def _version(value: bool) -> None:
    if value:
        with errors():  # (parsing, outside any command's boundary)
            typer.echo(f"cudaredist {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Show the version.")] = False) -> None:
    pass


app.command()(install)
if not commands.install_only:
    # every command but install (each lives in ``cudaredist/commands/``; this module only assembles);
    # `cudaredist install ...` neither imports nor builds them (a no-op install is mostly start-up)
    from cudaredist.commands import cache, prefix, source

    for name, fn in (("resolve", source.resolve), ("trains", source.trains), ("mirror", source.mirror_cmd),
                     ("lock", source.lock_cmd), ("verify", prefix.verify), ("info", prefix.info),
                     ("sbom", prefix.sbom), ("uninstall", prefix.uninstall), ("env", prefix.env_cmd),
                     ("doctor", prefix.doctor),
                     ("profiles", source.profiles_cmd), ("list", prefix.list_cmd),
                     ("find", prefix.find_cmd)):
        app.command(name)(fn)
    app.command("run", context_settings={"allow_interspersed_args": False})(prefix.run_cmd)
    app.add_typer(cache.app, name="cache")
