"""Safe extraction of .tar.xz and .zip archives into a staging tree shared by several archives.

Members are mapped through :mod:`cudaredist.layout`; every file is hashed as it is
written (for conflict detection and the install record). Two archives may write
one path only with identical content.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import lzma
import os
import shutil
import tarfile
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from cudaredist.errors import ConflictError, UnsafeArchiveError
from cudaredist.layout import clean_member, link_target_inside, strip_top, tree_path, zip_entry_mode

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


class Tree:
    """A staging directory filled concurrently by several archives."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cond = threading.Condition()
        self._claims: dict[str, _Claim] = {}
        self._links: set[str] = set()
        self._records: dict[str, FileRecord] = {}
        self._deferred_links: list[tuple[str, str, str]] = []

    # -- claims ------------------------------------------------------------------------------------
    def _check_parents(self, rel: str, component: str, archive: str) -> None:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if parent in self._links:
                raise UnsafeArchiveError(
                    f"{archive}: member {rel!r} lies under the symlink {parent!r}; refused",
                    archive=archive, member=rel)
            claim = self._claims.get(parent)
            if claim is not None and claim.kind != "dir":
                raise ConflictError(
                    f"{component} ({archive}) needs {parent!r} to be a directory for {rel!r}, but "
                    f"{claim.component} installs a {claim.kind} there", path=rel, first=claim.component,
                    second=component)

    def _claim(self, rel: str, kind: str, component: str, archive: str) -> _Claim | None:
        """Claim ``rel``; returns the earlier claim if another archive has it."""
        with self._cond:
            self._check_parents(rel, component, archive)
            for i in range(1, rel.count("/") + 1):
                parent = rel.rsplit("/", i)[0]
                self._claims.setdefault(parent, _Claim(component, "dir", done=True))
            prev = self._claims.get(rel)
            if prev is None:
                self._claims[rel] = _Claim(component, kind, done=(kind == "dir"))
                return None
            return prev

    def _settle(self, rel: str, digest: str) -> None:
        with self._cond:
            c = self._claims[rel]
            c.digest, c.done = digest, True
            self._cond.notify_all()

    def _compare(self, rel: str, prev: _Claim, kind: str, digest: str, component: str) -> None:
        with self._cond:
            while not prev.done:
                self._cond.wait()
        if prev.kind != kind or prev.digest != digest:
            what = "content" if prev.kind == kind else f"type ({prev.kind} vs {kind})"
            raise ConflictError(
                f"{prev.component} and {component} both install {rel!r} with different {what}; "
                "refusing to let one silently overwrite the other",
                path=rel, first=prev.component, second=component)

    # -- members -------------------------------------------------------------------------------------
    def add_dir(self, rel: str, component: str, archive: str) -> None:
        if not rel:
            return
        prev = self._claim(rel, "dir", component, archive)
        if prev is not None and prev.kind != "dir":
            raise ConflictError(f"{component} needs {rel!r} to be a directory, but {prev.component} "
                                f"installs a {prev.kind} there", path=rel, first=prev.component,
                                second=component)
        (self.root / rel).mkdir(parents=True, exist_ok=True)

    def add_file(self, rel: str, src: IO[bytes], mode: int, component: str, archive: str,
                 on_bytes: Callable[[int], None] | None = None) -> None:
        prev = self._claim(rel, "file", component, archive)
        h = hashlib.sha256()
        size = 0
        mode = 0o755 if mode & 0o111 else 0o644  # never setuid/setgid/sticky, never world-writable
        if prev is not None:
            while chunk := src.read(CHUNK):
                h.update(chunk)
                size += len(chunk)
            self._compare(rel, prev, "file", h.hexdigest(), component)
            return
        dest = self.root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(dest, _OPEN_FLAGS, mode)
        with os.fdopen(fd, "wb") as out:
            while chunk := src.read(CHUNK):
                h.update(chunk)
                out.write(chunk)
                size += len(chunk)
                if on_bytes is not None:
                    on_bytes(len(chunk))
        if os.name != "nt":
            os.chmod(dest, mode)  # umask-independent
        digest = h.hexdigest()
        self._settle(rel, digest)
        with self._cond:
            self._records[rel] = FileRecord(rel, size, digest, mode, component=component)

    def add_symlink(self, rel: str, target: str, component: str, archive: str) -> None:
        link_target_inside(rel, target, archive=archive)
        prev = self._claim(rel, "link", component, archive)
        if prev is not None:
            self._compare(rel, prev, "link", target, component)
            return
        dest = self.root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        with self._cond:
            self._links.add(rel)
        try:
            os.symlink(target, dest)
        except OSError:
            if os.name != "nt":
                raise  # POSIX has symlinks: a failure here is real, not a missing right
            # Windows without symlink rights: materialise the target once all files exist.
            with self._cond:
                self._deferred_links.append((rel, target, component))
        self._settle(rel, target)
        with self._cond:
            self._records[rel] = FileRecord(rel, 0, "", 0o777, link=target, component=component)

    def set_mode(self, rel: str, mode: int, component: str) -> None:
        """Give a file this component wrote its mode after the fact: a zip read front to back
        learns modes only from its central directory, at the end."""
        mode = 0o755 if mode & 0o111 else 0o644
        with self._cond:
            rec = self._records.get(rel)
            if rec is None or rec.link or rec.component != component or rec.mode == mode:
                return
            self._records[rel] = dataclasses.replace(rec, mode=mode)
        if os.name != "nt":
            os.chmod(self.root / rel, mode)

    def add_hardlink(self, rel: str, target_rel: str, component: str, archive: str) -> None:
        """Hard links become copies of a file that the same tree already holds."""
        with self._cond:
            rec = self._records.get(target_rel)
        if rec is None or rec.link:
            raise UnsafeArchiveError(
                f"{archive}: hard link {rel!r} -> {target_rel!r} does not point to a file extracted "
                "earlier from the archive; refused", archive=archive, member=rel)
        with open(self.root / target_rel, "rb") as src:
            self.add_file(rel, src, rec.mode, component, archive)

    def finish(self) -> list[FileRecord]:
        for rel, target, _component in self._deferred_links:
            src = (self.root / rel).parent / target
            dest = self.root / rel
            if src.is_dir():
                shutil.copytree(src, dest)
            elif src.exists():
                shutil.copy2(src, dest)
        return sorted(self._records.values(), key=lambda r: r.path)


def redist_mapper(component: str, archive: str) -> Mapper:
    """Strip the single top folder of a redist archive (its name is taken from the first member)."""
    top: list[str] = []

    def mapper(clean: str) -> str | None:
        head, rest = strip_top(clean, top[0] if top else None, archive=archive)
        if not top:
            top.append(head)
        return tree_path(rest, component=component) if rest else None

    return mapper


def is_streamable(archive: str) -> bool:
    """Tars and zips are read front to back (zips by :mod:`cudaredist.zipstream`, checked against
    their central directory at the end), so they can be extracted while they download. Wheels
    are still extracted once complete."""
    return not archive.endswith(".whl")


def extract(path: Path | None, tree: Tree, *, component: str, archive: str, mapper: Mapper,
            on_bytes: Callable[[int], None] | None = None, fileobj: IO[bytes] | None = None) -> None:
    """Extract one archive (by its file name: .zip or a tar) into ``tree``.

    A tar or a zip may come as ``fileobj`` instead of ``path``: a download still being written.
    """
    if archive.endswith(".zip") and fileobj is not None:
        from cudaredist.zipstream import extract_zip_stream  # it builds on this module's Tree

        extract_zip_stream(fileobj, tree, component=component, archive=archive, mapper=mapper,
                           on_bytes=on_bytes)
    elif archive.endswith((".zip", ".whl")):
        assert path is not None
        _extract_zip(path, tree, component=component, archive=archive, mapper=mapper, on_bytes=on_bytes)
    else:
        _extract_tar(path, tree, component=component, archive=archive, mapper=mapper, on_bytes=on_bytes,
                     fileobj=fileobj)


def _open_tar(raw: IO[bytes]) -> tarfile.TarFile:
    """A front-to-back tar reader. xz goes through LZMAFile: tarfile's own "r|xz" decompresses
    in 10 KiB steps and re-joins its buffers, a tenth of the time on big archives."""
    head = raw.read(6)
    rest = cast(IO[bytes], _Prepend(head, raw))
    if head == b"\xfd7zXZ\x00":
        return tarfile.open(fileobj=cast(IO[bytes], lzma.LZMAFile(rest)), mode="r|", bufsize=1 << 16)
    return tarfile.open(fileobj=rest, mode="r|*", bufsize=1 << 16)


class _Prepend(io.RawIOBase):
    """``head`` followed by the rest of ``raw`` (so the format can be sniffed from a stream)."""

    def __init__(self, head: bytes, raw: IO[bytes]) -> None:
        super().__init__()
        self._head = head
        self._raw = raw

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        if self._head:
            n = min(len(buf), len(self._head))
            buf[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._raw.read(len(buf))
        buf[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._raw.close()
        super().close()


def _extract_tar(path: Path | None, tree: Tree, *, component: str, archive: str, mapper: Mapper,
                 on_bytes: Callable[[int], None] | None, fileobj: IO[bytes] | None = None) -> None:
    with contextlib.ExitStack() as stack:
        raw = fileobj if fileobj is not None else stack.enter_context(open(path, "rb"))  # type: ignore[arg-type]
        try:
            tf = _open_tar(raw)
        except (tarfile.TarError, OSError, EOFError, lzma.LZMAError) as exc:
            raise UnsafeArchiveError(f"{archive} is not a readable tar archive: {exc}",
                                     archive=archive) from exc
        with tf:
            _tar_members(tf, tree, component=component, archive=archive, mapper=mapper, on_bytes=on_bytes)


def _tar_members(tf: tarfile.TarFile, tree: Tree, *, component: str, archive: str, mapper: Mapper,
                 on_bytes: Callable[[int], None] | None) -> None:
    try:
        for m in tf:
            clean = clean_member(m.name, archive=archive)
            if not clean:
                continue
            rel = mapper(clean)
            if rel is None:
                continue
            if m.isdir():
                tree.add_dir(rel, component, archive)
            elif m.isreg():
                src = tf.extractfile(m)
                assert src is not None
                tree.add_file(rel, src, m.mode, component, archive, on_bytes)
            elif m.issym():
                tree.add_symlink(rel, m.linkname, component, archive)
            elif m.islnk():
                target = clean_member(m.linkname, archive=archive)
                target_rel = mapper(target)
                if target_rel is None:
                    raise UnsafeArchiveError(f"{archive}: hard link {m.name!r} -> {m.linkname!r} "
                                             "leaves the archive's tree; refused",
                                             archive=archive, member=m.name)
                tree.add_hardlink(rel, target_rel, component, archive)
            else:
                kind = {tarfile.CHRTYPE: "character device", tarfile.BLKTYPE: "block device",
                        tarfile.FIFOTYPE: "fifo"}.get(m.type, f"special member (type {m.type!r})")
                raise UnsafeArchiveError(f"{archive}: member {m.name!r} is a {kind}; refused",
                                         archive=archive, member=m.name)
    except (tarfile.TarError, EOFError, OSError, lzma.LZMAError) as exc:
        if isinstance(exc, FileExistsError):
            raise ConflictError(f"{archive}: {exc.filename} already exists in the tree",
                                path=str(exc.filename), second=component) from exc
        raise UnsafeArchiveError(f"{archive} is corrupt or truncated: {exc}", archive=archive) from exc


def _extract_zip(path: Path, tree: Tree, *, component: str, archive: str, mapper: Mapper,
                 on_bytes: Callable[[int], None] | None) -> None:
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise UnsafeArchiveError(f"{archive} is not a readable zip archive: {exc}", archive=archive) from exc
    with zf:
        infos = zf.infolist()
        seen: set[str] = set()
        for info in infos:
            clean = clean_member(info.filename, archive=archive, zip_entry=True)
            key = clean.lower()  # Windows file systems do not tell case apart
            if key in seen:
                raise UnsafeArchiveError(f"{archive}: entry {info.filename!r} appears twice; refused",
                                         archive=archive, member=info.filename)
            seen.add(key)
        try:
            for info in infos:
                clean = clean_member(info.filename, archive=archive, zip_entry=True)
                if not clean:
                    continue
                rel = mapper(clean)
                if rel is None:
                    continue
                mode = zip_entry_mode(info.create_system, info.external_attr, archive=archive,
                                      member=info.filename)
                if info.is_dir():
                    tree.add_dir(rel, component, archive)
                    continue
                with zf.open(info) as src:
                    tree.add_file(rel, src, mode, component, archive, on_bytes)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise UnsafeArchiveError(f"{archive} is corrupt: {exc}", archive=archive) from exc
