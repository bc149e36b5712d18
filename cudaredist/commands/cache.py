"""``cudaredist cache ...``: inspect and clean the download cache."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from cudaredist.cache.store import Cache
from cudaredist.commands.base import command, emit_json
from cudaredist.commands.options import App, CacheDirOpt, JsonOpt, VerboseOpt
from cudaredist.localfs import mb

if TYPE_CHECKING:
    from cudaredist.cache.maintenance import Cleaned

app = App(help="Inspect and clean the download cache.", no_args_is_help=True)


@app.command("dir")
@command
def cache_dir_cmd(cache_dir: CacheDirOpt = None, verbose: VerboseOpt = False) -> None:
    """Print the cache directory."""
    typer.echo(str(Cache(cache_dir).root))


@app.command("list")
@command
def cache_list(cache_dir: CacheDirOpt = None, as_json: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """List cached archives and the unpacked entries made from them, with their sizes."""
    from cudaredist.cache.maintenance import unpacked_entries

    cache = Cache(cache_dir)
    entries, unpacked = cache.entries(), unpacked_entries(cache)
    if as_json:
        emit_json([{"kind": "archive", "sha256": e.sha256, "name": e.name, "size": e.size,
                    "url": e.url, "last_used": e.last_used} for e in entries]
                  + [{"kind": "unpacked", "key": u.key, "name": u.name, "size": u.size,
                      "last_used": u.last_used} for u in unpacked])
        return
    for e in entries:
        typer.echo(f"archive   {e.sha256[:16]}  {mb(e.size):>10}  {e.name}")
    for u in unpacked:
        typer.echo(f"unpacked  {u.key[:16]}  {mb(u.size):>10}  {u.name}")
    typer.echo(f"{len(entries)} archives ({mb(sum(e.size for e in entries))}), {len(unpacked)} "
               f"unpacked ({mb(sum(u.size for u in unpacked))}) in {cache.root}")


def _report(done: str, cleaned: Cleaned) -> None:
    files = f"{cleaned.files} file{'' if cleaned.files == 1 else 's'}"
    typer.echo(f"{done}: removed {files}, {mb(cleaned.freed)}")
    if cleaned.busy:
        typer.echo(f"note: left {cleaned.busy} {'entry' if cleaned.busy == 1 else 'entries'} that a running "
                   "cudaredist holds; run this again when it is done", err=True)
    if cleaned.foreign:
        typer.echo(f"note: left {', '.join(cleaned.foreign)}: cudaredist did not write them", err=True)


@app.command("prune")
@command
def cache_prune(cache_dir: CacheDirOpt = None,
                days: Annotated[float, typer.Option("--days", help="Drop entries unused this long.")] = 30.0,
                max_size: Annotated[str | None, typer.Option(
                    "--max-size", metavar="SIZE", show_default=False,
                    help="Then drop the least recently used entries until the cache holds at most this much "
                         "(e.g. 5G, 800M).")] = None,
                verbose: VerboseOpt = False) -> None:
    """Drop partial downloads, and archives and unpacked entries not used for --days (and beyond
    --max-size); entries in use are left."""
    from cudaredist.cache.maintenance import parse_size, prune

    c = Cache(cache_dir)
    limit = parse_size(max_size) if max_size is not None else None
    _report(f"pruned {c.root}", prune(c, older_than_days=days, max_size=limit))


@app.command("clear")
@command
def cache_clear(cache_dir: CacheDirOpt = None, verbose: VerboseOpt = False) -> None:
    """Delete every cached archive, unpacked entry, partial download and index page. Refuses a
    directory that is not a cudaredist cache; entries a running install holds are left."""
    from cudaredist.cache.maintenance import clear

    c = Cache(cache_dir)
    _report(f"cleared {c.root}", clear(c))
