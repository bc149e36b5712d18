"""``cudaredist cache ...``: inspect and clean the download cache."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from cudaredist.commands.base import emit_json, errors, human, set_verbose
from cudaredist.commands.options import CacheDirOpt, JsonOpt, VerboseOpt

if TYPE_CHECKING:
    from cudaredist.fetch.cache import Cleaned

app = typer.Typer(help="Inspect and clean the download cache.", no_args_is_help=True)


@app.command("dir")
def cache_dir_cmd(cache_dir: CacheDirOpt = None) -> None:
    """Print the cache directory."""
    with errors():
        from cudaredist.fetch.cache import Cache

        typer.echo(str(Cache(cache_dir).root))


@app.command("list")
def cache_list(cache_dir: CacheDirOpt = None, as_json: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """List cached archives."""
    set_verbose(verbose)
    with errors():
        from cudaredist.fetch.cache import Cache

        cache = Cache(cache_dir)
        entries = cache.entries()
        if as_json:
            emit_json([{"sha256": e.sha256, "name": e.name, "size": e.size, "url": e.url,
                         "last_used": e.last_used} for e in entries])
            return
        for e in entries:
            typer.echo(f"{e.sha256[:16]}  {human(e.size):>10}  {e.name}")
        typer.echo(f"{len(entries)} archives, {human(sum(e.size for e in entries))} in {cache.root}")


def _report(done: str, cleaned: Cleaned) -> None:
    typer.echo(f"{done}: removed {cleaned.files} files, {human(cleaned.freed)}")
    if cleaned.busy:
        typer.echo(f"note: left {cleaned.busy} entries that a running cudaredist holds; run this again "
                   "when it is done", err=True)
    if cleaned.foreign:
        typer.echo(f"note: left {', '.join(cleaned.foreign)}: cudaredist did not write them", err=True)


@app.command("prune")
def cache_prune(cache_dir: CacheDirOpt = None,
                days: Annotated[float, typer.Option("--days", help="Drop archives unused this long.")] = 30.0,
                verbose: VerboseOpt = False) -> None:
    """Drop partial downloads and archives not used for --days (entries in use are left)."""
    set_verbose(verbose)
    with errors():
        from cudaredist.fetch.cache import Cache

        c = Cache(cache_dir)
        _report(f"pruned {c.root}", c.prune(older_than_days=days))


@app.command("clear")
def cache_clear(cache_dir: CacheDirOpt = None, verbose: VerboseOpt = False) -> None:
    """Delete every cached archive, partial download and index page. Refuses a directory that is
    not a cudaredist cache; entries a running install holds are left."""
    set_verbose(verbose)
    with errors():
        from cudaredist.fetch.cache import Cache

        c = Cache(cache_dir)
        _report(f"cleared {c.root}", c.clear())
