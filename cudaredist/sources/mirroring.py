"""What a source says a mirror of some releases holds: typed data, no I/O.

A source's :meth:`~cudaredist.sources.Source.mirror_content` resolves the releases and returns a
:class:`MirrorContent`; the writer above the sources (:mod:`cudaredist.publish.mirror`) fetches,
verifies and writes it. Everything a source can check without the network is checked here, so a
bad request fails before the mirror directory is touched.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from cudaredist.errors import ConflictError
from cudaredist.plan import PlannedArchive, climb

if TYPE_CHECKING:
    from cudaredist.sources.nvidia.index import Release


@dataclass(frozen=True)
class CopiedArchive:
    """An archive mirrored as the source serves it, at ``relative_path`` inside the mirror (where its
    manifest's path leads from the mirror's manifest folder): fetched through the cache (its sha256
    and size verified), then linked or copied into place."""

    item: PlannedArchive
    relative_path: str


@dataclass(frozen=True)
class BuiltArchive:
    """A redist archive at ``relative_path`` re-packed from a wheel (fetched and verified first),
    holding the tree the wheel installs on ``platform``."""

    wheel: PlannedArchive
    platform: str
    relative_path: str
    variant: str = ""   # a product's CUDA variant ("cuda13"): listed under that subkey, as NVIDIA does


@dataclass(frozen=True)
class Document:
    """A small file (a component's licence) from the first of ``urls`` that serves it; a file
    no URL serves is left out with a note."""

    relative_path: str
    urls: tuple[str, ...]


@dataclass(frozen=True)
class BuiltManifest:
    """``redistrib_<label>.json`` listing the archives built for the release, merged with what the
    mirror's manifest of that release already lists."""

    label: str
    release_date: str
    archives: tuple[BuiltArchive, ...]
    product: str = "cuda"   # release_product: "cuda", or the --with product ("cudnn")


@dataclass(frozen=True)
class MirrorContent:
    """A mirror's files, besides its ``index.html`` (which lists what the directory holds once the
    rest is in place). Each relative path appears once."""

    copies: tuple[CopiedArchive, ...] = ()
    builds: tuple[BuiltArchive, ...] = ()
    documents: tuple[Document, ...] = ()
    # one per release mirrored; a Release's is written exactly as the source served it (its data)
    manifests: tuple[Release | BuiltManifest, ...] = ()
    notes: tuple[str, ...] = ()
    # of the built .tar.xz archives (the deflate level of .zip ones, 1 at least), or "store"
    xz_preset: int | str = 6
    # --with products by name: each a mirror of its own in the product's folder (see products.product_base)
    products: Mapping[str, MirrorContent] = field(default_factory=dict)
    # where the manifests and index.html go inside the mirror ("": at its top; see manifest_folder)
    folder: str = ""


def manifest_folder(base: str, relative_paths: Iterable[str]) -> str:
    """Where a mirror keeps the manifests of ``base`` so that they, byte-identical, still lead to the
    archives inside it: paths that climb k folders above the manifest's folder (NVIDIA's preview
    channel: ``../../../pool/...``) put it k folders deep, under the last k folder names of ``base``;
    k = 0 (``compute/cuda/redist``) is the mirror's top."""
    k = max((climb(p) for p in relative_paths), default=0)
    return "/".join([s for s in urlsplit(base).path.split("/") if s][-k:]) if k else ""


def in_mirror(folder: str, relative_path: str) -> str:
    return posixpath.normpath(posixpath.join(folder, relative_path))


def unique_copies(items: Sequence[PlannedArchive], folder: str = "") -> tuple[CopiedArchive, ...]:
    """One copy per path in the mirror; two releases listing one path with other bytes are a
    :class:`ConflictError`."""
    seen: dict[str, PlannedArchive] = {}
    for item in items:
        rel = in_mirror(folder, item.archive.relative_path)
        first = seen.setdefault(rel, item)
        if first.archive.sha256 != item.archive.sha256:
            raise ConflictError(
                f"two releases list {rel} with different sha256 ({first.archive.sha256[:16]}… "
                f"and {item.archive.sha256[:16]}…); mirror them into separate directories",
                path=rel, first=first.archive.sha256, second=item.archive.sha256)
    return tuple(CopiedArchive(item, rel) for rel, item in seen.items())


def unique_builds(builds: Sequence[BuiltArchive]) -> tuple[BuiltArchive, ...]:
    """One build per relative path; two different wheels for one path are a :class:`ConflictError`."""
    seen: dict[str, BuiltArchive] = {}
    for build in builds:
        rel = build.relative_path
        first = seen.setdefault(rel, build)
        if first.wheel.archive.sha256 != build.wheel.archive.sha256:
            raise ConflictError(
                f"{rel} would be made from two different wheels ({first.wheel.archive.filename} "
                f"and {build.wheel.archive.filename}); mirror these releases into separate directories",
                path=rel, first=first.wheel.archive.sha256, second=build.wheel.archive.sha256)
    return tuple(seen.values())
