"""The staging tree: files, links and directories written by several archives at once, each path
claimed once; two archives may write one path only with identical content. Every file is hashed
as it is written (conflict detection and the install record), and every write stays inside the tree.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import posixpath
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from cudaredist import fsops
from cudaredist.errors import ConflictError, CudaRedistError, LocalDiskError, UnsafeArchiveError
from cudaredist.fsops import WINDOWS
from cudaredist.localfs import disk_error, fold, umask_keeps
from cudaredist.tree import links
from cudaredist.tree.paths import link_target_inside

CHUNK = 1 << 20
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)

# (clean member path) -> tree path, or None to skip the member
Mapper = Callable[[str], "str | None"]


@dataclass(frozen=True)
class FileRecord:
    path: str          # POSIX path relative to the prefix
    size: int
    sha256: str        # of the content; for symlinks, "" and ``link`` holds the target
    mode: int          # 0o644 / 0o755
    link: str = ""
    component: str = ""


@dataclass
class _Claim:
    component: str
    kind: str          # "file" | "link" | "dir"
    digest: str = ""   # sha256 for files, target for links
    done: bool = False
    failed: bool = False  # its writer gave up: whoever waits for ``done`` must stop waiting
    path: str = ""     # the name as the claiming archive spells it


class WriterFailed(ConflictError):
    """Another archive was writing a path this one also has, and failed: its error is the real one."""


class Tree:
    """A staging directory filled concurrently by several archives.

    ``case_insensitive``: the tree is meant for (or lies on) a filesystem that does not tell
    names apart by case, so paths are compared case-folded: two members differing only in
    case are one path, and a symlink ``X`` shadows a directory ``x``. ``dest`` (the prefix)
    only makes disk errors more helpful.
    """

    def __init__(self, root: Path, *, case_insensitive: bool = False, dest: Path | None = None,
                 cache_root: Path | None = None) -> None:
        self.root = root
        self.case_insensitive = case_insensitive
        self._key: Callable[[str], str] = fold if case_insensitive else str
        self._dest = dest or root
        # an unpacked-cache entry: its disk errors name the cache (and --cache-dir), not a prefix
        self._cache_root = cache_root
        self._where = cache_root or self._dest.parent
        self._top = os.path.join(root, "")
        self._real_root = fsops.short_path(os.path.realpath(fsops.long_path(root)))
        self._cond = threading.Condition()
        self._claims: dict[str, _Claim] = {}
        self._links: set[str] = set()
        self._dirs: set[str] = set()  # created and checked to resolve inside the tree
        # keys of directories whose every ancestor (and themselves) is claimed as a directory: a
        # claim never changes kind, so their parents need no second look
        self._dir_chains: set[str] = set()
        # a directory path as given -> as first claimed (case-insensitive trees; a claim never changes)
        self._spelled_dirs: dict[str, str] = {}
        self._records: dict[str, FileRecord] = {}
        self._deferred_links: list[tuple[str, str]] = []
        self._written = 0
        self._clones = True  # until a clone into this tree came back as a copy

    # -- claims ------------------------------------------------------------------------------------
    def _claim(self, rel: str, kind: str, component: str, archive: str) -> _Claim | None:
        """Claim ``rel``; returns the earlier claim if another archive has it."""
        with self._cond:
            parent = rel.rpartition("/")[0]
            if parent and self._key(parent) not in self._dir_chains:
                # claim every directory above ``rel`` (the lock held), refusing one that is a link or a file
                parts = rel.split("/")
                for i in range(1, len(parts)):
                    parent = "/".join(parts[:i])
                    key = self._key(parent)
                    if key in self._links:
                        raise UnsafeArchiveError(
                            f"{archive}: member {rel!r} lies under the symlink {parent!r}"
                            + (" (names compared case-insensitively)" if self.case_insensitive else "")
                            + "; refused", archive=archive, member=rel)
                    claim = self._claims.setdefault(key, _Claim(component, "dir", done=True, path=parent))
                    if claim.kind != "dir":
                        raise ConflictError(
                            f"{component} ({archive}) needs {parent!r} to be a directory for {rel!r}, but "
                            f"{claim.component} installs a {claim.kind} there", path=rel,
                            first=claim.component, second=component)
                    self._dir_chains.add(key)
            key = self._key(rel)
            prev = self._claims.get(key)
            if prev is None:
                self._claims[key] = _Claim(component, kind, done=(kind == "dir"), path=rel)
                if kind == "link":
                    self._links.add(key)
                return None
            return prev

    def _spelled(self, rel: str) -> str:
        """``rel`` with each directory spelled as first claimed: a case-insensitive filesystem keeps
        the first spelling, and the record (and a Windows tree built on a case-sensitive disk)
        must name what is there."""
        if not self.case_insensitive:
            return rel
        parent, slash, name = rel.rpartition("/")
        if not slash:
            return rel
        with self._cond:
            known = self._spelled_dirs.get(parent)
            if known is not None:
                return f"{known}/{name}"
            parts = parent.split("/")
            for i in range(1, len(parts) + 1):
                claim = self._claims.get(self._key("/".join(parts[:i])))
                if claim is not None:
                    parts[i - 1] = claim.path.rpartition("/")[2]
            spelled = "/".join(parts)
            if self._key(parent) in self._dir_chains:  # every level claimed: final
                self._spelled_dirs[parent] = spelled
        return f"{spelled}/{name}"

    def _settle(self, rec: FileRecord, written: int = 0) -> None:
        """``rec`` is in the tree: recorded, and its claim done for whoever waits to compare."""
        with self._cond:
            c = self._claims[self._key(rec.path)]
            c.digest, c.done = rec.link or rec.sha256, True
            self._cond.notify_all()
            self._written += written
            self._records[rec.path] = rec

    def _abandon(self, rel: str) -> None:
        """The writer of ``rel`` failed: wake everyone waiting to compare against it."""
        with self._cond:
            c = self._claims.get(self._key(rel))
            if c is not None and not c.done:
                c.failed = True
            self._cond.notify_all()

    def _compare(self, rel: str, prev: _Claim, kind: str, digest: str, component: str) -> None:
        with self._cond:
            while not prev.done and not prev.failed:
                self._cond.wait()
            if not prev.done:
                raise WriterFailed(
                    f"{component} could not compare {rel!r} with the copy {prev.component} was "
                    f"writing: {prev.component} failed first (its error is the one to read)",
                    path=rel, first=prev.component, second=component)
        if prev.kind != kind or prev.digest != digest:
            what = "content" if prev.kind == kind else f"type ({prev.kind} vs {kind})"
            names = (f"{prev.path!r} and {rel!r}, one path on a case-insensitive filesystem,"
                     if prev.path and prev.path != rel else f"{rel!r}")
            raise ConflictError(
                f"{prev.component} and {component} both install {names} with different {what}; "
                "refusing to let one silently overwrite the other",
                path=rel, first=prev.component, second=component)

    # -- the disk ----------------------------------------------------------------------------------
    def _local(self, exc: OSError, path: str | Path, *, symlink: bool = False) -> LocalDiskError:
        with self._cond:
            written = self._written
        # named as it would be in the prefix, not in the hidden staging directory
        shown = Path(path)
        with contextlib.suppress(ValueError):
            shown = self._dest / Path(path).relative_to(self.root)
        return disk_error(exc, path=shown, where=self._where, written=written, symlink=symlink,
                          cache=self._cache_root is not None, cached="unpacked copy")

    def _not_made(self, exc: OSError, rel: str, dest: str, component: str, archive: str, *,
                  symlink: bool = False) -> CudaRedistError:
        """A path the tree claims for one archive's member already exists on disk (made by another),
        or this machine's disk refused to create it at ``dest``."""
        if isinstance(exc, FileExistsError):
            return ConflictError(f"{archive}: {rel} already exists in the tree", path=rel, second=component)
        return self._local(exc, dest, symlink=symlink)

    def _path(self, rel: str) -> str:
        """Where the tree path ``rel`` is on this OS (a string: a Path costs ~8 us a file)."""
        return self._top + rel.replace("/", os.sep)

    @contextlib.contextmanager
    def _writing(self, rel: str, archive: str) -> Iterator[tuple[str, str]]:
        """A claimed path as the tree spells it and where it goes, its parents made; the claim is
        given back if they cannot be, or if the block writing it fails."""
        rel = self._spelled(rel)
        try:
            self._ensure_dir(rel.rpartition("/")[0], archive)
            yield rel, self._path(rel)
        except BaseException:
            self._abandon(rel)
            raise

    def _ensure_dir(self, rel_dir: str, archive: str) -> None:
        """``rel_dir`` and its parents exist as real directories that resolve inside the tree.

        Checked once per directory, before anything is created in it: on a case-insensitive
        filesystem "x/a" can be the symlink "X" plus "a", whatever the names say. Nothing
        replaces an entry of the tree while it is built (files are created exclusively, links
        fail on existing names), so a directory checked once stays good.
        """
        if not rel_dir:
            return
        with self._cond:  # by spelling: a tree for Windows built on a case-sensitive disk has both
            if rel_dir in self._dirs:
                return
        parent = rel_dir.rpartition("/")[0]
        self._ensure_dir(parent, archive)  # resolves inside: so what mkdir creates below does too
        path = self._path(rel_dir)
        try:
            os.mkdir(fsops.long_path(path))
            made = True  # a new real directory in a parent that resolves inside: so does it
        except FileExistsError:
            made = False
        except OSError as exc:
            raise self._local(exc, path) from exc
        if not made:  # something was there already (or a name that folds onto it): where does it lead?
            with _Disk(self, path):
                real = fsops.short_path(os.path.realpath(fsops.long_path(path)))
            if real != self._real_root and not real.startswith(self._real_root + os.sep):
                raise UnsafeArchiveError(
                    f"{archive}: the directory {rel_dir!r} resolves to {real}, outside the tree (through "
                    "a symlink, or names that differ only in case); refused", archive=archive,
                    member=rel_dir)
            if not os.path.isdir(fsops.long_path(real)):
                raise self._local(NotADirectoryError(errno.ENOTDIR, "Not a directory"), path)
        with self._cond:
            self._dirs.add(rel_dir)

    # -- members -------------------------------------------------------------------------------------
    def add_dir(self, rel: str, component: str, archive: str) -> None:
        if not rel:
            return
        prev = self._claim(rel, "dir", component, archive)
        if prev is not None and prev.kind != "dir":
            raise ConflictError(f"{component} needs {rel!r} to be a directory, but {prev.component} "
                                f"installs a {prev.kind} there", path=rel, first=prev.component,
                                second=component)
        self._ensure_dir(self._spelled(rel), archive)

    def add_file(self, rel: str, src: IO[bytes], mode: int, component: str, archive: str,
                 digest: str = "") -> None:
        """``src``'s bytes as the file ``rel``; ``digest``: their sha256 where a verified archive
        already says it (a wheel's RECORD), so they are not hashed again."""
        prev = self._claim(rel, "file", component, archive)
        h = None if digest else hashlib.sha256()
        size = 0
        mode = 0o755 if mode & 0o111 else 0o644  # never setuid/setgid/sticky, never world-writable
        if prev is not None:
            if h is not None:
                while chunk := src.read(CHUNK):
                    h.update(chunk)
                digest = h.hexdigest()
            self._compare(rel, prev, "file", digest, component)
            return
        with self._writing(rel, archive) as (rel, dest):
            try:
                fd = os.open(fsops.long_path(dest), _OPEN_FLAGS, mode)
            except OSError as exc:
                raise self._not_made(exc, rel, dest, component, archive) from exc
            try:
                # Reading (the archive's side) and writing (the disk's side) fail for different
                # reasons: only a failed write is a LocalDiskError.
                while chunk := src.read(CHUNK):
                    if h is not None:
                        h.update(chunk)
                    with _Disk(self, dest):  # os.write may take part of it
                        view = memoryview(chunk)
                        while view:
                            view = view[os.write(fd, view):]
                    size += len(chunk)
                    with self._cond:
                        self._written += len(chunk)
                if not WINDOWS and not umask_keeps(mode):  # created with mode minus the umask's bits
                    with _Disk(self, dest):
                        os.fchmod(fd, mode)  # umask-independent
            except BaseException:
                with contextlib.suppress(OSError):
                    os.close(fd)
                raise
            with _Disk(self, dest):
                os.close(fd)  # NFS and quotas may report a failed write only here
        self._settle(FileRecord(rel, size, h.hexdigest() if h is not None else digest, mode,
                                component=component))

    def add_symlink(self, rel: str, target: str, component: str, archive: str) -> None:
        link_target_inside(rel, target, archive=archive)
        prev = self._claim(rel, "link", component, archive)
        if prev is not None:
            self._compare(rel, prev, "link", target, component)
            return
        with self._writing(rel, archive) as (rel, dest):
            try:
                fsops.symlink(target, dest)
            except OSError as exc:
                if not WINDOWS or isinstance(exc, FileExistsError):
                    # POSIX has symlinks: a failure here is real, not a missing right
                    raise self._not_made(exc, rel, dest, component, archive, symlink=True) from exc
                # Windows without symlink rights: materialise the target once all files exist.
                with self._cond:
                    self._deferred_links.append((rel, target))
        self._settle(FileRecord(rel, 0, "", 0o777, link=target, component=component))

    def add_hardlink(self, rel: str, target_rel: str, component: str, archive: str) -> None:
        """Hard links become copies of a file that the same tree already holds."""
        target_rel = self._spelled(target_rel)
        with self._cond:
            rec = self._records.get(target_rel)
        if rec is None or rec.link:
            raise UnsafeArchiveError(
                f"{archive}: hard link {rel!r} -> {target_rel!r} does not point to a file extracted "
                "earlier from the archive; refused", archive=archive, member=rel)
        # the tree's own file, on this machine's disk: its errors are the disk's, never the archive's
        # (an "corrupt archive" would evict a verified download)
        source = self.root / target_rel
        with _Disk(self, source), open(fsops.long_path(source), "rb") as src:
            self.add_file(rel, src, rec.mode, component, archive)

    def add_placed(self, recs: Sequence[FileRecord], source: Callable[[FileRecord], str], how: str,
                   component: str, archive: str) -> None:
        """Files and links of the unpacked cache (already checked and hashed; ``source(rec)``: where
        each is) into this tree: cloned, hard-linked or copied (:mod:`cudaredist.tree.links`), with the
        same claims as any member, taken for the whole batch at once.

        The batch's paths are claimed under one lock (so two batches never each hold a part of what
        both have), the new ones placed, then settled under one lock; a path another archive holds is
        compared only after that, so that no one waits for this batch while it waits. A failure gives
        back the claims not placed."""
        files = [rec for rec in recs if not rec.link]
        for rec in recs:
            if rec.link:
                self.add_symlink(rec.path, rec.link, component, archive)
        fresh: list[FileRecord] = []
        taken: list[tuple[FileRecord, _Claim]] = []
        placed: list[FileRecord] = []
        try:
            with self._cond:
                for rec in files:
                    prev = self._claim(rec.path, "file", component, archive)
                    if prev is None:
                        fresh.append(rec)
                    else:
                        taken.append((rec, prev))
            for rec in fresh:
                with self._writing(rec.path, archive) as (rel, dest):
                    try:
                        # a filesystem (pair) that could not clone one file cannot clone the next: copy
                        mode = "copy" if how == "clone" and not self._clones else how
                        used = links.place(source(rec), dest, mode, rec.mode, rec.size)  # long paths: its own
                        if how == "clone" and used == "copy":
                            self._clones = False
                    except OSError as exc:  # both sides are this machine's disks
                        raise self._not_made(exc, rel, dest, component, archive) from exc
                placed.append(FileRecord(rel, rec.size, rec.sha256, rec.mode, component=component))
        finally:
            with self._cond:
                for done in placed:
                    self._settle(done, done.size)
                for rec in fresh[len(placed):]:
                    self._abandon(rec.path)
        for rec, prev in taken:
            self._compare(rec.path, prev, "file", rec.sha256, component)

    def component_of(self, rel: str) -> str | None:
        rel = self._spelled(rel)
        with self._cond:
            rec = self._records.get(rel)
        return rec.component if rec is not None else None

    def directories(self) -> list[str]:
        """Every real directory the tree made (or found, resolving inside), as it spells them."""
        with self._cond:
            return sorted(self._dirs)

    def finish(self) -> list[FileRecord]:
        """The records of the tree, once the links that could not be made (Windows without symlink
        rights) are copies of their targets, each after the deferred links it points at or through:
        ``libx.so -> libx.so.13 -> libx.so.13.0.1`` arrives in any order and every name ends up
        with the bytes."""
        pending = {self._key(rel): (rel, target) for rel, target in self._deferred_links}
        done: set[str] = set()

        def copy(name: str, seen: tuple[str, ...] = ()) -> None:
            if name in done or name in seen:  # a loop of links: nothing to copy, as POSIX would fail
                return
            rel, target = pending[name]
            aim = self._key(posixpath.normpath(posixpath.join(posixpath.dirname(rel), target)))
            for other in pending:  # the target, or a directory on its way, is a deferred link
                if aim == other or aim.startswith(other + "/"):
                    copy(other, (*seen, name))
            done.add(name)
            src = fsops.long_path((self.root / rel).parent / target)
            dest = self.root / rel
            with _Disk(self, dest):
                if os.path.isdir(src):
                    shutil.copytree(src, fsops.long_path(dest))
                elif os.path.exists(src):
                    shutil.copy2(src, fsops.long_path(dest))

        for name in sorted(pending):
            copy(name)
        return sorted(self._records.values(), key=lambda r: r.path)


class _Disk:
    """An OSError in the block is this machine's disk failing at ``path``: a LocalDiskError. A plain
    class: it wraps every chunk written (a generator-based context manager cost ~2.5 us more per file)."""

    __slots__ = ("path", "tree")

    def __init__(self, tree: Tree, path: str | Path) -> None:
        self.tree, self.path = tree, path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, OSError):
            raise self.tree._local(exc, self.path) from exc
