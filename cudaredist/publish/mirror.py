"""The mirror writer: what a source's :meth:`~cudaredist.sources.Source.mirror_content` lists,
fetched, verified and laid out exactly like NVIDIA's redist site.

A mirror directory, as written by :func:`write_mirror`::

    index.html                      directory page: <a href='redistrib_X.Y.Z.json'> per release
    redistrib_X.Y.Z.json            the manifest bytes exactly as served (sha256 equal to NVIDIA's)
    <component>/LICENSE.txt         the license_path files, when the source has them
    <component>/<platform>/<file>   archives at their relative_path, sha256- and size-verified

Paths that climb (``../../../pool/...``) put the manifests and index page as many folders deep
(:func:`~cudaredist.sources.mirroring.manifest_folder`), so the archives still land inside.

Every file is written beside its final name and renamed into place; archives come
through the download cache (hard-linked when it shares the filesystem), so a re-run
only fetches what is missing and never rewrites an archive that verifies. Archives built
from wheels (``--source pypi``) are made by :mod:`.wheelmirror`.
"""

from __future__ import annotations

import contextlib
import html
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

from cudaredist import interrupts
from cudaredist.cache.store import hold, lock_wait
from cudaredist.errors import FetchError, ManifestError
from cudaredist.hashing import sha256_file
from cudaredist.localfs import UMASK
from cudaredist.plan import PlannedArchive
from cudaredist.progress import Reporter
from cudaredist.sources.mirroring import BuiltManifest, CopiedArchive, Document, MirrorContent
from cudaredist.sources.nvidia.products import product_dir
from cudaredist.sources.nvidia.releases import labels_from_names, sort_labels

T = TypeVar("T")
Fetch = Callable[[PlannedArchive], tuple[Path, bool]]  # an archive -> (its verified cache path, cached?)


@dataclass
class MirrorReport:
    out: str
    base: str   # the folder holding the manifests, to install from (``out`` or a folder in it)
    releases: list[str] = field(default_factory=list)
    archives: list[dict[str, Any]] = field(default_factory=list)
    licenses: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # --with products: {name, title, releases, out} each (their archives are in ``archives``, with
    # "product" set and relative paths under that product's ``out``)
    products: list[dict[str, Any]] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for a in self.archives if a["status"] == status)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v or k != "products"}


def dest_path(out: Path, relative_path: str) -> Path:
    """``relative_path`` inside the mirror ``out``, each segment percent-decoded as a server maps a URL
    path to a file (``a%20b`` is the file ``a b``); one that could name a file elsewhere is refused."""
    parts = [unquote(p) for p in relative_path.split("/")]
    if any(p in ("", ".", "..") or "\\" in p or "/" in p or ":" in p for p in parts):
        raise ManifestError(f"{relative_path!r} would not name a file inside the mirror {out}; "
                            "nothing was written there", source=str(out), entry=relative_path)
    return out.joinpath(*parts)


def world_readable(path: Path) -> None:
    # a web server's worker must read what the cache kept 0600; the umask was read at start-up
    # (mirror workers call this from threads, where os.umask() would race other threads' files)
    os.chmod(path, 0o644 & ~UMASK)


def place(dest: Path, fill: Callable[[Path], T]) -> T:
    """``fill`` writes a file beside ``dest``, which is then made world-readable and renamed into
    place; returns what ``fill`` returned."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.{uuid.uuid4().hex[:8]}.part"
    try:
        made = fill(tmp)
        world_readable(tmp)
        os.replace(tmp, dest)
        return made
    finally:
        tmp.unlink(missing_ok=True)


def link_or_copy(src: Path, tmp: Path) -> None:
    """Fills ``tmp`` with a verified cache file: a hard link when possible, else a copy."""
    try:
        os.link(src, tmp)
    except OSError:  # another filesystem, or links not supported
        shutil.copyfile(src, tmp)


def verifies(dest: Path, size: int, sha256: str) -> bool:
    """``dest`` holds ``size`` bytes whose sha256 is ``sha256`` (size first: no hashing of a wrong file)."""
    try:
        right_size = dest.stat().st_size == size
    except OSError:
        return False
    return right_size and sha256_file(dest) == sha256


def index_page(labels: Sequence[str], dirs: Sequence[str], manifests: str = "") -> str:
    """A directory page in the shape NVIDIA's server gives (single-quoted hrefs); ``manifests``: the
    folder a mirror's top page points install at (``rel='manifests'``: its manifests sit deeper)."""
    rows = [f"<a href='{html.escape(d, quote=True)}/'>{html.escape(d)}/</a>" for d in sorted(dirs)]
    if manifests:
        rows.insert(0, f"<a href='{html.escape(manifests, quote=True)}/' rel='manifests'>"
                       f"{html.escape(manifests)}/</a>")
    rows += [f"<a href='redistrib_{lbl}.json'>redistrib_{lbl}.json</a>"
             for lbl in sorted(labels, key=lambda s: [int(p) for p in s.split(".")])]
    body = "\n".join(rows)
    return ("<html>\n<head><title>Index of /compute/cuda/redist/</title></head>\n<body>\n"
            f"<h1>Index of /compute/cuda/redist/</h1><hr><pre><a href='../'>../</a>\n{body}\n"
            "</pre><hr></body>\n</html>\n")


def write_mirror(out: Path, content: MirrorContent, *, fetch: Fetch, get_bytes: Callable[[str], bytes],
                 reporter: Reporter | None = None, jobs: int = 4, lock_timeout: float | None = None,
                 locked: bool = False) -> MirrorReport:
    """Write (or complete) in ``out`` the mirror ``content`` describes, under the mirror's lock
    (``locked``: the caller holds the lock of a mirror that contains ``out``). Each ``--with``
    product goes to its own folder (:func:`product_dir`), inside ``out`` under the same lock.

    ``fetch`` returns the verified cache path of an archive or wheel
    (:meth:`cudaredist.fetch.fetcher.Fetcher.fetch`); ``get_bytes`` fetches small documents
    (licence files).
    """
    from cudaredist.publish import wheelmirror

    reporter = reporter or Reporter()
    out = out.absolute()
    top = dest_path(out, content.folder) if content.folder else out  # where the manifests go
    out.mkdir(parents=True, exist_ok=True)
    report = MirrorReport(str(out), str(top), releases=list(content.releases), notes=list(content.notes))
    # the lock beside the mirror, like the prefix lock, so that the mirror holds only what it serves
    with contextlib.nullcontext() if locked else hold(
            out.parent / f".{out.name}.cudaredist-mirror.lock", lock_wait(lock_timeout),
            f"the mirror {out} is busy: another cudaredist process is writing it; retry later", out,
            doing="create the lock file of the mirror in", where=out.parent, option="--out"):
        _copy_archives(out, content.copies, fetch, reporter, jobs, report)
        made = wheelmirror.build_archives(out, content.builds, fetch=fetch, reporter=reporter, jobs=jobs,
                                          preset=content.xz_preset, report=report)
        _documents(out, content.documents, get_bytes, report)
        for manifest in content.manifests:
            if isinstance(manifest, BuiltManifest):
                wheelmirror.write_manifest(out, manifest, made)
            else:
                write_if_changed(top / f"redistrib_{manifest.label}.json", manifest.data)
        for product in content.products:  # each in its own folder, where install looks for it
            where = product_dir(top, product.name)
            part = write_mirror(where, product.content, fetch=fetch, get_bytes=get_bytes, reporter=reporter,
                                jobs=jobs, lock_timeout=lock_timeout, locked=where.is_relative_to(out))
            report.products.append({"name": product.name, "title": product.title,
                                    "releases": part.releases, "out": part.out})
            report.archives += [row | {"product": product.name} for row in part.archives]
            report.licenses += [str(Path(part.out, rel)) for rel in part.licenses]
            report.notes += [n for n in part.notes if n not in report.notes]
        labels = labels_from_names(os.listdir(top))
        dirs = [p.name for p in top.iterdir() if p.is_dir() and not p.name.startswith(".")]
        write_if_changed(top / "index.html", index_page(sort_labels(labels), dirs).encode())
        if top != out and not labels_from_names(os.listdir(out)):
            # the mirror's top says where its manifests are, for an install given this folder
            tops = [p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")]
            write_if_changed(out / "index.html", index_page([], tops, manifests=content.folder).encode())
    report.archives.sort(key=lambda a: (a.get("product", ""), a["relative_path"]))
    return report


def write_if_changed(dest: Path, data: bytes) -> bool:
    """Write ``dest`` unless it already holds ``data`` (a re-run leaves unchanged files alone)."""
    if dest.is_file() and dest.read_bytes() == data:
        return False
    place(dest, lambda tmp: tmp.write_bytes(data))
    return True


def _copy_archives(out: Path, copies: Sequence[CopiedArchive], fetch: Fetch, reporter: Reporter, jobs: int,
                   report: MirrorReport) -> None:
    """Each archive as served: those that verify in place are kept, the rest fetched and placed."""
    need = [c for c in copies
            if not verifies(dest_path(out, c.relative_path), c.item.archive.size, c.item.archive.sha256)]
    report.archives.extend(_row(c.item, "present") for c in copies if c not in need)
    if not need:
        return
    reporter.start(sum(c.item.archive.size for c in need), len(need))

    def one(copy: CopiedArchive) -> dict[str, Any]:
        item = copy.item
        path, cached = fetch(item)
        place(dest_path(out, copy.relative_path), lambda tmp: link_or_copy(path, tmp))
        reporter.archive_done(item.archive.filename, item.archive.size, cached=cached)
        return _row(item, "cached" if cached else "downloaded")

    try:
        with ThreadPoolExecutor(max(1, min(jobs, len(need))), thread_name_prefix="mirror") as pool:
            report.archives.extend(interrupts.results([pool.submit(one, copy) for copy in need]))
    finally:
        reporter.close()


def _row(item: PlannedArchive, status: str) -> dict[str, Any]:
    return {"component": item.component, "relative_path": item.archive.relative_path,
            "sha256": item.archive.sha256, "size": item.archive.size, "status": status}


def _documents(out: Path, documents: Sequence[Document], get_bytes: Callable[[str], bytes],
               report: MirrorReport) -> None:
    """Each licence file not yet in the mirror, from the first URL that serves it; else a note."""
    for doc in documents:
        dest = dest_path(out, doc.relative_path)
        if dest.is_file():
            continue
        errors = []
        for url in doc.urls:
            try:
                write_if_changed(dest, get_bytes(url))
                report.licenses.append(doc.relative_path)
                break
            except FetchError as exc:
                errors.append(str(exc))
        else:
            report.notes.append(f"no {doc.relative_path} at the source ({'; '.join(errors)}); "
                                "mirrored without it")
