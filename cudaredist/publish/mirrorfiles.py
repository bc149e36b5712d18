"""A mirror's files, for the mirror writer (:mod:`.mirror`) and lock files: where a
relative path lands, each file written beside its name and renamed into place, what already
verifies kept; and the report of a run."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

from cudaredist.errors import ManifestError
from cudaredist.hashing import sha256_file
from cudaredist.localfs import UMASK

T = TypeVar("T")


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


def verifies(dest: Path, size: int, sha256: str) -> bool:
    """``dest`` holds ``size`` bytes whose sha256 is ``sha256`` (size first: no hashing of a wrong file)."""
    try:
        right_size = dest.stat().st_size == size
    except OSError:
        return False
    return right_size and sha256_file(dest) == sha256


def write_if_changed(dest: Path, data: bytes) -> bool:
    """Write ``dest`` unless it already holds ``data`` (a re-run leaves unchanged files alone)."""
    if dest.is_file() and dest.read_bytes() == data:
        return False
    place(dest, lambda tmp: tmp.write_bytes(data))
    return True
