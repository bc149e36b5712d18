"""The command line: parse, call the library, render. One error boundary turns a
:class:`CudaRedistError` into a message on stderr and a non-zero exit code."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cudaredist import __version__, commands
from cudaredist.commands.install import install
from cudaredist.commands.options import App

_SETTINGS: dict[str, Any] = dict(
    name="cudaredist",
    help="Assemble a CUDA toolkit tree from NVIDIA's redistributable archives: "
         "no installer, no admin rights, any host.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app = App(**_SETTINGS)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cudaredist {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Show the version.")] = False) -> None:
    pass


def _register_commands(app: typer.Typer) -> None:
    """Every command but install (each lives in ``cudaredist/commands/``; this module only assembles)."""
    from cudaredist.commands import cache, doctor, managed, prefix, profiles, source

    app.command()(source.resolve)
    app.command()(source.trains)
    app.command("mirror")(source.mirror_cmd)
    app.command("lock")(source.lock_cmd)
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


app.command()(install)
if not commands.install_only:
    _register_commands(app)


def main() -> None:
    from cudaredist import streams

    streams.configure()  # a redirected stdout on Windows: the code page its reader decodes with
    # exit code 2 is click's for usage errors; ours are 1 (or the error's own code)
    if commands.install_only:
        # `cudaredist install ...`: a group of that command alone, the same options, help and errors,
        # without importing or building the others (a no-op install is mostly start-up)
        one = App(**_SETTINGS)
        one.callback()(_root)
        one.command()(install)
        one(prog_name="cudaredist")
        return
    app(prog_name="cudaredist")


if __name__ == "__main__":  # pragma: no cover
    main()
