"""Safe extraction of .tar.xz and .zip archives into a staging :class:`~cudaredist.tree.staging.Tree`.

Members are mapped through :mod:`cudaredist.tree.paths`. A tar may be read while it downloads; a
zip (whose index comes last) is read once complete, as every zip tool reads it.
"""

from __future__ import annotations

import contextlib
import io
import lzma
import os
import struct
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from cudaredist.errors import UnsafeArchiveError
from cudaredist.tree.paths import clean_member, strip_top, tree_path, zip_entry_mode
from cudaredist.tree.staging import Mapper, Tree

# tarfile, zipfile and zlib-ng are imported by the functions that read archives: a warm install reads
# none, and its start-up does without them (2 ms)
if TYPE_CHECKING:
    import zipfile

# an open zip -> its members' sha256 (hex) as the archive itself records them, by clean member path
Digests = Callable[["zipfile.ZipFile"], Mapping[str, str]]
READ_SIZE = 1 << 20
# Creating a file is the kernel's work (0.02-0.8 ms on ext4) and runs in parallel across directories:
# a zip, or an unpacked entry placed into a tree, with this many files is written by up to
# FILE_THREADS threads (cccl's zip, 1,700 headers in 3 MB: 3.2 s to 2.8 s cold, median of five, stop 39)
PARALLEL_FILES = 256
FILE_THREADS = 4
# ... and a complete zip with this much compressed file data, member by member, biggest first: a zip's
# members are independent (unlike a tar's stream), zlib and sha256 let go of the GIL, and one archive
# (libnvvm: cicc and libnvvm.so, 30 MB each) would otherwise hold one core while the other waits.
PARALLEL_ZIP_BYTES = 8 << 20
_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # a zip member's local header


def redist_mapper(component: str, archive: str, root: str = "") -> Mapper:
    """Strip the single top folder of a redist archive (its name is taken from the first member);
    the rest goes under ``root`` (a folder of the tree, "" for its root)."""
    top: list[str] = []

    def mapper(clean: str) -> str | None:
        head, rest = strip_top(clean, top[0] if top else None, archive=archive)
        if not top:
            top.append(head)
        return tree_path(rest, component=component, root=root) if rest else None

    return mapper


def is_streamable(archive: str) -> bool:
    """Tars are read front to back, so they can be extracted while they download; zips and wheels
    are extracted once complete, through their central directory."""
    return not archive.endswith((".zip", ".whl"))


def extract(path: Path | None, tree: Tree, *, component: str, archive: str, mapper: Mapper,
            fileobj: IO[bytes] | None = None, digests: Digests | None = None) -> None:
    """Extract one archive (by its file name: .zip or a tar) into ``tree``.

    A tar may come as ``fileobj`` instead of ``path``: a download still being written.
    ``digests``: a zip's members' sha256 as the verified archive itself records them (a wheel's
    RECORD), so that the tree does not hash them again.
    """
    if not is_streamable(archive):
        assert path is not None
        return _extract_zip(path, tree, component=component, archive=archive, mapper=mapper,
                            digests=digests)
    import tarfile

    with contextlib.ExitStack() as stack:
        raw = fileobj if fileobj is not None else stack.enter_context(
            open(path, "rb", buffering=0))  # type: ignore[arg-type]  # buffered below
        # A front-to-back tar reader over ``raw`` (a file or a download being written, both
        # unbuffered). xz goes through LZMAFile: tarfile's own "r|xz" decompresses in 10 KiB steps and
        # re-joins its buffers, a tenth of the time on big archives.
        try:
            # LZMAFile and tarfile read 8-64 KiB at a time: one 1 MiB read of the source serves many
            # (a followed download takes a lock and a seek for each read).
            buffered = io.BufferedReader(cast(io.RawIOBase, raw), READ_SIZE)
            rest = cast(IO[bytes], buffered)
            # closed before the file it reads
            if buffered.peek(6)[:6] == b"\xfd7zXZ\x00":
                # tarfile reads headers and member data from it, skipping forward
                xz = stack.enter_context(lzma.LZMAFile(rest))
                tf = stack.enter_context(tarfile.open(fileobj=cast(IO[bytes], _Forward(xz)), mode="r:"))
            else:
                tf = stack.enter_context(tarfile.open(fileobj=rest, mode="r|*", bufsize=1 << 16))
        except (tarfile.TarError, OSError, EOFError, lzma.LZMAError) as exc:
            raise UnsafeArchiveError(f"{archive} is not a readable tar archive: {exc}",
                                     archive=archive) from exc
        try:
            for m in tf:
                clean = clean_member(m.name, archive=archive)
                rel = mapper(clean) if clean else None
                if rel is None:
                    continue
                if m.isdir():
                    tree.add_dir(rel, component, archive)
                elif m.isreg():
                    src = tf.extractfile(m)
                    assert src is not None  # a regular member
                    tree.add_file(rel, src, m.mode, component, archive)
                elif m.issym():
                    tree.add_symlink(rel, m.linkname, component, archive)
                elif m.islnk():
                    target_rel = mapper(clean_member(m.linkname, archive=archive))
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
            raise UnsafeArchiveError(f"{archive} is corrupt or truncated: {exc}", archive=archive) from exc


class _Forward:
    """A decompressed stream that tarfile may ``tell`` and ``seek`` forward in (skipping bytes).

    Reading a member through tarfile's own stream ("r|") costs three copies of every byte
    (joining 64 KiB pieces, slicing, ``readinto``), each a fresh megabyte; here ``extractfile``
    reads a member's bytes from the decompressor with two (LZMAFile's, and its ``readinto``)."""

    def __init__(self, src: IO[bytes]) -> None:
        self._src = src
        self.pos = 0

    def read(self, n: int = -1) -> bytes:
        data = self._src.read(n)
        self.pos += len(data)
        return data

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        import tarfile

        if whence != 0 or offset < self.pos:
            raise tarfile.StreamError("seeking backwards is not allowed")
        while self.pos < offset:
            if not self.read(min(offset - self.pos, READ_SIZE)):
                raise tarfile.ReadError("unexpected end of data")
        return self.pos


def _extract_zip(path: Path, tree: Tree, *, component: str, archive: str, mapper: Mapper,
                 digests: Digests | None) -> None:
    import zipfile

    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise UnsafeArchiveError(f"{archive} is not a readable zip archive: {exc}", archive=archive) from exc

    def one(info: zipfile.ZipInfo, rel: str, mode: int, digest: str) -> None:
        if info.compress_type == zipfile.ZIP_DEFLATED and not info.flag_bits & 0x1 and zf.filename:
            with open(zf.filename, "rb") as fh:  # its own handle: no lock shared with the other threads
                tree.add_file(rel, cast(IO[bytes], DeflatedMember(fh, info)), mode, component, archive,
                              digest)
            return
        with zf.open(info) as src:
            tree.add_file(rel, src, mode, component, archive, digest)

    with zf:
        entries: dict[str, zipfile.ZipInfo] = {}
        for info in zf.infolist():
            # the name as the archive spells it: on Windows zipfile turns backslashes into "/" in
            # .filename, which would let a Windows host accept what every other host refuses
            clean = clean_member(info.orig_filename, archive=archive, zip_entry=True)
            # one name twice is ambiguous in any zip; names differing only in case are the tree's to judge
            # (one path where the target folds case, as for a tar)
            if clean in entries:
                raise UnsafeArchiveError(f"{archive}: entry {info.orig_filename!r} appears twice; refused",
                                         archive=archive, member=info.orig_filename)
            entries[clean] = info
        try:
            known = digests(zf) if digests is not None else {}
            files: list[tuple[zipfile.ZipInfo, str, int, str]] = []
            for clean, info in entries.items():
                rel = mapper(clean) if clean else None
                if rel is None:
                    continue
                mode = zip_entry_mode(info.create_system, info.external_attr, archive=archive,
                                      member=info.orig_filename)
                if info.is_dir():
                    tree.add_dir(rel, component, archive)
                    continue
                files.append((info, rel, mode, known.get(clean, "")))
            # every file member into the tree: in archive order, or from several threads for a big zip
            # (zipfile's handles share the file under a lock; the tree takes claims from any thread)
            threads = min(FILE_THREADS, os.cpu_count() or 1, len(files))
            if threads < 2 or (sum(f[0].compress_size for f in files) < PARALLEL_ZIP_BYTES
                               and len(files) < PARALLEL_FILES):
                for f in files:
                    one(*f)
            else:
                in_threads(one, [[f] for f in sorted(files, key=lambda f: -f[0].compress_size)], threads,
                           "inflate")
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise UnsafeArchiveError(f"{archive} is corrupt: {exc}", archive=archive) from exc


def in_threads(fn: Callable[..., None], shares: Sequence[Iterable[Sequence[Any]]], threads: int,
               name: str) -> None:
    """``fn(*args)`` for every ``args`` of every share, one share per task on ``threads`` threads.
    The first failure (in share order) is raised; the shares still running stop at their next item
    and those not started yet are skipped."""
    failed = threading.Event()

    def run(share: Iterable[Sequence[Any]]) -> None:
        try:
            for args in share:
                if failed.is_set():
                    return
                fn(*args)
        except BaseException:
            failed.set()
            raise

    with ThreadPoolExecutor(threads, thread_name_prefix=name) as pool:
        futures = [pool.submit(run, share) for share in shares]
    for fut in futures:
        fut.result()


class DeflatedMember:
    """``read(n)`` of one deflated member of a complete zip, through zlib-ng (the same API, about
    twice as fast as the standard library's zlib, which zipfile always uses).

    Like ``ZipFile.open``, from the local header the central directory points at: the local name
    must be the central one, and the data must inflate to exactly the recorded size and CRC, or it
    is a :class:`zipfile.BadZipFile`."""

    def __init__(self, fh: IO[bytes], info: zipfile.ZipInfo) -> None:
        fh.seek(info.header_offset)
        head = fh.read(_LOCAL.size)
        if len(head) != _LOCAL.size or head[:4] != b"PK\x03\x04":
            raise _bad_zip(f"bad local header for {info.orig_filename!r}")
        fields = _LOCAL.unpack(head)
        name = fh.read(fields[9])
        fh.seek(fields[10], 1)  # the extra field
        spelled = name.decode("utf-8" if info.flag_bits & 0x800 else "cp437")
        if spelled != info.orig_filename:
            raise _bad_zip(f"file name in directory {info.orig_filename!r} and header {spelled!r} differ")
        self._fh, self._info, self._left = fh, info, info.compress_size
        self._out = self._crc = 0  # inflated bytes so far, and their CRC-32
        from zlib_ng import zlib_ng

        self._zlib = zlib_ng
        self._d, self._pending = self._zlib.decompressobj(-15), b""

    def read(self, n: int = -1) -> bytes:
        """``n`` bytes (fewer only at the end), as a file's ``read``."""
        want = READ_SIZE if n is None or n < 0 else n
        parts, have = [self._pending], len(self._pending)
        while have < want and (piece := self._more(want - have)):
            parts.append(piece)
            have += len(piece)
        data = b"".join(parts)
        self._pending = data[want:]
        return data[:want]

    def _more(self, want: int) -> bytes:
        """The next inflated bytes (at most ``want``), b"" at the end (after checking it)."""
        while True:
            out: bytes
            if self._d.unconsumed_tail:
                out = self._d.decompress(self._d.unconsumed_tail, want)
            elif self._left > 0:
                raw = self._fh.read(min(READ_SIZE, self._left))
                if not raw:
                    raise EOFError(f"{self._info.orig_filename!r} is cut short")
                self._left -= len(raw)
                out = self._d.decompress(raw, want)
            else:
                out = self._d.flush()
                if not out:  # the end: it must be exactly the recorded size and CRC
                    if not self._d.eof or self._out != self._info.file_size:
                        raise _bad_zip(f"{self._info.orig_filename!r} inflates to {self._out} "
                                       f"bytes, not {self._info.file_size}")
                    if self._crc != self._info.CRC:
                        raise _bad_zip(f"bad CRC-32 for {self._info.orig_filename!r}")
                    return b""
            if out:
                self._crc = self._zlib.crc32(out, self._crc)
                self._out += len(out)
                if self._out > self._info.file_size:
                    raise _bad_zip(f"{self._info.orig_filename!r} inflates past its size")
                return out


def _bad_zip(message: str) -> Exception:
    """zipfile's BadZipFile, as ``ZipFile.open`` raises it (imported by then: a zip is being read)."""
    import zipfile

    return zipfile.BadZipFile(message)
