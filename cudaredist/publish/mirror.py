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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cudaredist import interrupts
from cudaredist.cache.store import hold, lock_wait
from cudaredist.errors import FetchError
from cudaredist.plan import PlannedArchive
from cudaredist.progress import Reporter
from cudaredist.publish import wheelmirror
from cudaredist.publish.mirrorfiles import MirrorReport, dest_path, place, verifies, write_if_changed
from cudaredist.sources.mirroring import BuiltManifest, CopiedArchive, Document, MirrorContent
from cudaredist.sources.nvidia.products import product_dir
from cudaredist.sources.nvidia.releases import labels_from_names, sort_labels
from cudaredist.tree import links

Fetch = Callable[[PlannedArchive], tuple[Path, bool]]  # an archive -> (its verified cache path, cached?)


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
        place(dest_path(out, copy.relative_path), lambda tmp: links.place(path, tmp, "hardlink", 0o644))
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
