"""``cudaredist cache ...``: inspect and clean the download cache."""

from __future__ import annotations

from typing import Annotated

import typer

from cudaredist.commands.base import emit_json, errors, human
from cudaredist.commands.options import CacheDirOpt, JsonOpt

app = typer.Typer(help="Inspect and clean the download cache.", no_args_is_help=True)


@app.command("dir")
def cache_dir_cmd(cache_dir: CacheDirOpt = None) -> None:
    """Print the cache directory."""
    from cudaredist.fetch.cache import Cache

    typer.echo(str(Cache(cache_dir).root))


@app.command("list")
def cache_list(cache_dir: CacheDirOpt = None, as_json: JsonOpt = False) -> None:
    """List cached archives."""
    from cudaredist.fetch.cache import Cache

    entries = Cache(cache_dir).entries()
    if as_json:
        emit_json([{"sha256": e.sha256, "name": e.name, "size": e.size, "url": e.url,
                     "last_used": e.last_used} for e in entries])
        return
    for e in entries:
        typer.echo(f"{e.sha256[:16]}  {human(e.size):>10}  {e.name}")
    typer.echo(f"{len(entries)} archives, {human(sum(e.size for e in entries))} in {Cache(cache_dir).root}")


@app.command("prune")
def cache_prune(cache_dir: CacheDirOpt = None,
                days: Annotated[float, typer.Option("--days", help="Drop archives unused this long.")] = 30.0
                ) -> None:
    """Drop partial downloads and archives not used for --days."""
    with errors():
        from cudaredist.fetch.cache import Cache

        n, freed = Cache(cache_dir).prune(older_than_days=days)
        typer.echo(f"removed {n} files, {human(freed)}")


@app.command("clear")
def cache_clear(cache_dir: CacheDirOpt = None) -> None:
    """Delete the whole cache."""
    from cudaredist.fetch.cache import Cache

    c = Cache(cache_dir)
    c.clear()
    typer.echo(f"cleared {c.root}")


