"""The unpacked cache: each verified archive extracted once, then cloned, linked or copied into trees.

Layout under the cache root, beside ``archives/``::

    unpacked/<key>/files.json    the entry's record: archive sha256, component, layout, every
                                 file (path, size, sha256, mode, link) and directory
    unpacked/<key>/tree/         the archive's members at their tree paths, with the modes the
                                 record gives (a hard-linked prefix shares them)

``<key>`` is the sha256 of the archive's sha256, the layout that maps its members (with the
component, version and platform it depends on) and :data:`UNPACKED_VERSION`, so a change of the
mapping rules never reuses an entry made under the old ones. An entry is extracted through the
same safe extraction as a tree (:mod:`cudaredist.tree.extract`) into a temporary directory and
renamed into place with ``files.json`` last written; a directory without it is not an entry.
Before an entry is used, every file's size, mode and mtime are compared with what was recorded
when it was made (a stat, no read): one edited through a hard link, or damaged on disk, drops
the entry and the archive is extracted again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudaredist import fsops
from cudaredist.cache.store import evict
from cudaredist.localfs import disk_error, is_case_insensitive
from cudaredist.plan import PlannedArchive
from cudaredist.profiles import is_windows
from cudaredist.tree.extract import FILE_THREADS, PARALLEL_FILES, in_threads
from cudaredist.tree.staging import FileRecord, Tree

UNPACKED_VERSION = 2  # 2: [roots] (visual_studio_integration under extras/)
RECORD = "files.json"
_KEY = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class UnpackedEntry:
    key: str
    path: Path
    records: tuple[FileRecord, ...]
    dirs: tuple[str, ...]
    size: int
    name: str
    last_used: float
    stamps: dict[str, list[int]]  # path -> size, mode, mtime when made (a link: its target instead)

    @property
    def tree(self) -> Path:
        return self.path / "tree"

    @functools.cached_property
    def _top(self) -> str:  # once per entry: source() runs for every file of every warm install
        return os.fspath(self.tree) + os.sep

    def source(self, rec: FileRecord) -> str:
        """Where ``rec``'s file is in the entry (this OS's separators)."""
        return self._top + rec.path.replace("/", os.sep)


def entry_key(item: PlannedArchive, platform: str) -> str:
    body = "\n".join((str(UNPACKED_VERSION), item.archive.sha256, item.layout, item.component,
                      item.version, platform, item.archive.filename,
                      *(f"{folder}={dest}" for folder, dest in item.place)))
    return hashlib.sha256(body.encode()).hexdigest()


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_size, stat.S_IMODE(st.st_mode), st.st_mtime_ns]


class UnpackedCache:
    def __init__(self, root: Path) -> None:
        self.root = root / "unpacked"

    def lookup(self, item: PlannedArchive, platform: str) -> UnpackedEntry | None:
        """The entry of ``item`` if it is complete and unchanged since it was made, else None
        (a changed one is removed)."""
        entry = self._load(entry_key(item, platform))
        if entry is None:
            return None
        if not self._unchanged(entry):
            evict(entry.path)
            return None
        with contextlib.suppress(OSError):
            os.utime(entry.path / RECORD)  # last used, for prune
        return entry

    def record_size(self, item: PlannedArchive, platform: str) -> int:
        """The size of ``item``'s finished entry's record (0: none), without checking its files: a
        hint, taken without the entry's lock (:meth:`lookup` under the lock decides), and a measure
        of the work of placing it, which grows with its files, not its bytes."""
        try:
            return os.stat(self.root / entry_key(item, platform) / RECORD).st_size or 1
        except OSError:
            return 0

    def _load(self, key: str) -> UnpackedEntry | None:
        d = self.root / key
        try:
            with open(d / RECORD, "rb") as fh:
                raw = json.loads(fh.read().decode("utf-8"))
                mtime = os.fstat(fh.fileno()).st_mtime
            records = tuple(FileRecord(f["path"], int(f["size"]), f["sha256"], int(f["mode"]),
                                       f.get("link", ""), f.get("component", "")) for f in raw["files"])
            return UnpackedEntry(key, d, records, tuple(raw.get("dirs", [])), int(raw["size"]),
                                 str(raw.get("name", "")), mtime, raw.get("stamps", {}))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _unchanged(self, entry: UnpackedEntry) -> bool:
        """Every file's size, mode and mtime as stamped when the entry was made (a stat each, no read)."""
        try:
            for rec in entry.records:
                path = fsops.long_path(entry.source(rec))
                if rec.link and rec.path not in entry.stamps:
                    if os.readlink(path) != rec.link:
                        return False
                elif _stamp(os.stat(path)) != entry.stamps[rec.path]:
                    return False
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return True

    def build(self, item: PlannedArchive, platform: str, fill: Any) -> UnpackedEntry:
        """Make the entry of ``item``: ``fill(tree)`` extracts the archive into a fresh
        :class:`Tree`; the result is renamed into place once complete. Idempotent across
        processes: the first complete entry wins, a later one is discarded."""
        key = entry_key(item, platform)
        tmp = self.root / f".tmp-{key[:16]}-{uuid.uuid4().hex[:8]}"
        try:
            (tmp / "tree").mkdir(parents=True)
            tree = Tree(tmp / "tree", case_insensitive=is_windows(platform)
                        or is_case_insensitive(tmp / "tree"), cache_root=self.root.parent)
            fill(tree)
            records = tree.finish()
            # a link is checked by its target; where the host made a copy instead (Windows without the
            # symlink right), the copy is stamped as a file is (os.readlink would fail on it, always)
            stamps = {r.path: _stamp(os.stat(fsops.long_path(tmp / "tree" / r.path))) for r in records
                      if not r.link or not os.path.islink(fsops.long_path(tmp / "tree" / r.path))}
            body = {"version": UNPACKED_VERSION, "key": key, "archive_sha256": item.archive.sha256,
                    "name": item.archive.filename, "component": item.component, "layout": item.layout,
                    "platform": platform, "size": sum(r.size for r in records),
                    "files": [{"path": r.path, "size": r.size, "sha256": r.sha256, "mode": r.mode,
                               **({"link": r.link} if r.link else {})} for r in records],
                    "dirs": tree.directories(), "stamps": stamps}
            (tmp / RECORD).write_text(json.dumps(body), "utf-8")
            try:
                # retried: a scanner opens the fresh DLLs in ``tmp`` for a moment (Windows)
                fsops.rename(tmp, self.root / key)
            except OSError:
                if self._load(key) is None:  # not a finished entry in the way: a real failure
                    raise
        except OSError as exc:  # the entry's own files (the tree's writes are translated already)
            raise disk_error(exc, path=exc.filename or tmp, where=self.root.parent, cache=True,
                             cached="unpacked copy") from exc
        finally:
            if tmp.exists():
                fsops.rmtree(tmp)
        entry = self._load(key)
        assert entry is not None
        return entry

    def entries(self) -> list[UnpackedEntry]:
        """The complete entries (a directory named by its key with its files.json), for maintenance."""
        names = sorted(d.name for d in self.root.iterdir() if _KEY.fullmatch(d.name) and d.is_dir()
                       and not d.is_symlink()) if self.root.is_dir() else []
        return [e for e in map(self._load, names) if e is not None]

    def leftovers(self) -> Iterator[Path]:
        """Temporary directories of builds that did not finish (a killed run)."""
        if self.root.is_dir():
            yield from (d for d in self.root.iterdir() if d.name.startswith((".tmp-", ".gone-")))


def materialize(entry: UnpackedEntry, tree: Tree, *, how: str, component: str, archive: str) -> None:
    """Put every directory, file and link of ``entry`` into ``tree`` (claims and conflicts as usual)."""
    for d in entry.dirs:
        tree.add_dir(d, component, archive)
    records = entry.records

    # an entry of many files on several threads (extract.PARALLEL_FILES), each placing its share as
    # one batch; hard links too: 1,708 of cccl's 23 ms on one thread, 17-18 ms on two (2 cores; per
    # file, before batches, the lock hand-offs had made it slower: 37 against 52 ms, stop 39)
    threads = min(FILE_THREADS, os.cpu_count() or 1, len(records) // (PARALLEL_FILES // 2) or 1)
    if threads < 2 or len(records) < PARALLEL_FILES:
        tree.add_placed(records, entry.source, how, component, archive)
        return
    # the directories exist: files and links land in any order, each claimed as usual
    in_threads(tree.add_placed, [[(records[k::threads], entry.source, how, component, archive)]
                                 for k in range(threads)], threads, "place")
