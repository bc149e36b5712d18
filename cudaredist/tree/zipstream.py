"""Zip archives extracted while they download: local headers read front to back, then checked
against the central directory.

A zip's index (the central directory) comes last, but every member is preceded by a local
header with its name and, unless the data descriptor flag (bit 3) is set, its sizes and CRC.
Members go into the staging tree as soon as their data is in, through the same rules as any
other archive (:func:`cudaredist.tree.paths.clean_member`, the component's mapper, the tree's
claims). When the stream ends, the central directory must describe exactly the members read:
same names, sizes, CRCs and offsets, nothing missing or extra, no bytes between or after the
records. Modes (and the refusal of symlink entries) come from the central directory, the
only place a zip keeps them, so they are applied then. Any disagreement is an
:class:`UnsafeArchiveError`; the install drops its staging tree on error.
"""

from __future__ import annotations

import io
import struct
import tempfile
from dataclasses import dataclass
from typing import IO, cast

from cudaredist.errors import ConflictError, UnsafeArchiveError
from cudaredist.tree.inflate import ZlibError, zlib
from cudaredist.tree.paths import clean_member, zip_entry_mode
from cudaredist.tree.staging import CHUNK, Mapper, Tree

_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # signature ... name length, extra length (30 bytes)
_CENTRAL = struct.Struct("<4sBBHHHHHIIIHHHHHII")  # (46 bytes)
_EOCD = struct.Struct("<4sHHHHIIH")  # (22 bytes)
_EOCD64 = struct.Struct("<4sQHHIIQQQQ")  # (56 bytes)
_LOCATOR64 = struct.Struct("<4sIQI")  # (20 bytes)
LOCAL_SIG, CENTRAL_SIG, DESCRIPTOR_SIG = b"PK\x03\x04", b"PK\x01\x02", b"PK\x07\x08"
EOCD_SIG, EOCD64_SIG, LOCATOR64_SIG = b"PK\x05\x06", b"PK\x06\x06", b"PK\x06\x07"
_ZIP64_EXTRA = 0x0001
_MAX32, _MAX16 = 0xFFFFFFFF, 0xFFFF
_ENCRYPTED, _DESCRIPTOR, _STRONG, _UTF8, _MASKED = 0x0001, 0x0008, 0x0040, 0x0800, 0x2000
STORED, DEFLATED = 0, 8
_NEXT = (LOCAL_SIG, CENTRAL_SIG, EOCD_SIG, EOCD64_SIG)  # what may follow a member's data descriptor


@dataclass(frozen=True)
class LocalEntry:
    """A member as read from the stream: its local header and what its data really held."""

    offset: int
    raw_name: bytes
    name: str
    flags: int
    method: int
    crc: int
    compressed: int
    size: int
    rel: str | None  # where it went in the tree (None: skipped by the mapper, or the top folder)


@dataclass(frozen=True)
class CentralEntry:
    raw_name: bytes
    flags: int
    method: int
    crc: int
    compressed: int
    size: int
    offset: int
    disk: int
    create_system: int
    external_attr: int


def _fail(archive: str, message: str, member: str = "") -> UnsafeArchiveError:
    return UnsafeArchiveError(f"{archive}: {message}; refused (a zip whose parts disagree unpacks "
                              "differently in other tools: this is not an archive as NVIDIA publishes "
                              "it, check the mirror it came from)", archive=archive, member=member)


class _Stream:
    """Forward-only reads over ``raw`` with a small push-back buffer and the absolute offset."""

    def __init__(self, raw: IO[bytes], archive: str) -> None:
        self._raw = raw
        self._buf = bytearray()
        self._consumed = 0  # bytes taken from raw
        self.archive = archive

    @property
    def pos(self) -> int:
        return self._consumed - len(self._buf)

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes (at least one unless the stream has ended)."""
        if self._buf:
            out = bytes(self._buf[:n])
            del self._buf[:n]
            return out
        data = self._raw.read(n)
        self._consumed += len(data)
        return data

    def peek(self, n: int) -> bytes:
        """The next ``n`` bytes without consuming them (fewer at the end of the stream)."""
        while len(self._buf) < n:
            data = self._raw.read(max(n - len(self._buf), 1 << 16))
            if not data:
                break
            self._consumed += len(data)
            self._buf += data
        return bytes(self._buf[:n])

    def exact(self, n: int, what: str, member: str = "") -> bytes:
        out = self.peek(n)
        if len(out) < n:
            raise UnsafeArchiveError(f"{self.archive} is truncated: it ends inside {what} at offset "
                                     f"{self.pos + len(out)}", archive=self.archive, member=member)
        del self._buf[:n]
        return out

    def unread(self, data: bytes) -> None:
        self._buf[:0] = data


class _MemberData(io.RawIOBase):
    """One member's data, decompressed, as a file: CRC and size are checked when it ends.

    ``compressed`` None means the data is a deflate stream whose end is found by inflating it
    (sizes come in a data descriptor after it)."""

    def __init__(self, stream: _Stream, *, name: str, method: int, compressed: int | None,
                 size: int | None, crc: int | None) -> None:
        super().__init__()
        self._s = stream
        self._name = name
        self._method = method
        self._left = compressed
        self._expect_size = size
        self._expect_crc = crc
        self._inflate = zlib.decompressobj(-15) if method == DEFLATED else None
        self.crc = 0
        self.size = 0
        self.compressed = 0
        self.done = False

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:
        want = CHUNK if n is None or n < 0 else n
        while not self.done:
            out = self._next(want)
            if out:
                self.crc = zlib.crc32(out, self.crc)
                self.size += len(out)
                if self._expect_size is not None and self.size > self._expect_size:
                    raise _fail(self._s.archive, f"entry {self._name!r} inflates to more than the "
                                f"{self._expect_size} bytes its header declares", self._name)
                return out
            if self._finished():
                self.done = True
                self._verify()
        return b""

    def readinto(self, buf: memoryview | bytearray) -> int:  # type: ignore[override]
        data = self.read(len(buf))
        buf[: len(data)] = data
        return len(data)

    def _take(self) -> bytes:
        n = CHUNK if self._left is None else min(CHUNK, self._left)
        if n == 0:
            return b""
        data = self._s.read(n)
        if not data:
            raise UnsafeArchiveError(f"{self._s.archive} is truncated: it ends inside the data of "
                                     f"{self._name!r}", archive=self._s.archive, member=self._name)
        if self._left is not None:
            self._left -= len(data)
        self.compressed += len(data)
        return data

    def _next(self, want: int) -> bytes:
        if self._inflate is None:  # stored
            if self._left == 0:
                return b""
            assert self._left is not None
            data = self._s.read(min(want, self._left))
            if not data:
                raise UnsafeArchiveError(f"{self._s.archive} is truncated: it ends inside the data of "
                                         f"{self._name!r}", archive=self._s.archive, member=self._name)
            self._left -= len(data)
            self.compressed += len(data)
            return data
        d = self._inflate
        if d.eof:
            return b""
        data = d.unconsumed_tail or self._take()
        if not data:
            return d.flush()
        out = d.decompress(data, want)
        if d.eof and self._left is not None and (d.unused_data or self._left):
            raise _fail(self._s.archive, f"entry {self._name!r} has bytes after the end of its "
                        "deflate stream", self._name)
        if d.eof and d.unused_data:
            self._s.unread(d.unused_data)  # the data descriptor or the next header
            self.compressed -= len(d.unused_data)
        return out

    def _finished(self) -> bool:
        if self._inflate is None:
            return self._left == 0
        if self._left is None:
            return self._inflate.eof
        return self._left == 0 and not self._inflate.unconsumed_tail

    def _verify(self) -> None:
        if self._expect_size is not None and self.size != self._expect_size:
            raise _fail(self._s.archive, f"entry {self._name!r} holds {self.size} bytes, its header "
                        f"says {self._expect_size}", self._name)
        if self._expect_crc is not None and self.crc != self._expect_crc:
            raise _fail(self._s.archive, f"entry {self._name!r} has CRC {self.crc:08x}, its header says "
                        f"{self._expect_crc:08x}", self._name)


def _zip64(extra: bytes, *values: int) -> tuple[list[int], bool]:
    """``values`` with each one marked 0xFFFFFFFF replaced, in order, by the next 8-byte field of the
    zip64 extra field (a local header holds both sizes there; the central directory only the
    values its fixed part marks); and whether the field was there."""
    i = 0
    while i + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, i)
        if tag == _ZIP64_EXTRA:
            body = extra[i + 4: i + 4 + length]
            fields = [int.from_bytes(body[j:j + 8], "little") for j in range(0, len(body) - 7, 8)]
            return [fields.pop(0) if v == _MAX32 and fields else v for v in values], True
        i += 4 + length
    return list(values), False


def _read_descriptor(stream: _Stream, data: _MemberData, zip64: bool, name: str) -> None:
    """Consume the data descriptor after a bit-3 member and check it against the data.

    Its signature is optional and its sizes are 8 bytes in zip64 entries; writers differ, so
    each form is tried and the one that describes the data just read is taken."""
    head = stream.peek(4)
    forms = [(signed, wide) for signed in (True, False) for wide in (zip64, not zip64)
             if not signed or head == DESCRIPTOR_SIG]
    for signed, wide in forms:
        start = 4 if signed else 0
        fmt = "<IQQ" if wide else "<III"
        end = start + struct.calcsize(fmt)
        blob = stream.peek(end + 4)
        if len(blob) < end + 4:
            continue
        crc, compressed, size = struct.unpack_from(fmt, blob, start)
        if (crc, compressed, size) == (data.crc, data.compressed, data.size) and blob[end:] in _NEXT:
            stream.exact(end, "a data descriptor", name)
            return
    raise _fail(stream.archive, f"the data descriptor of {name!r} does not match its data (CRC "
                f"{data.crc:08x}, {data.compressed} bytes compressed, {data.size} bytes)", name)


def _scan_stored(stream: _Stream, name: str, zip64: bool) -> tuple[IO[bytes], int, int]:
    """A stored bit-3 member: nothing says where its data ends but the signed data descriptor
    after it, whose CRC and size must describe the bytes before it, followed by the next
    record's signature. Spooled, then added."""
    widths = ("<IQQ", "<III") if zip64 else ("<III", "<IQQ")
    spool = cast(IO[bytes], tempfile.SpooledTemporaryFile(max_size=8 * CHUNK))  # noqa: SIM115
    buf = bytearray()
    crc = flushed = search = 0
    try:
        while True:
            i = buf.find(DESCRIPTOR_SIG, search)
            while i != -1:
                tail = bytes(buf[i + 4: i + 28])
                if len(tail) < 24 and stream.peek(1):
                    break  # read more before deciding about this candidate
                c = zlib.crc32(buf[:i], crc)
                n = flushed + i
                for fmt in widths:
                    width = struct.calcsize(fmt)
                    if (len(tail) >= width + 4 and struct.unpack_from(fmt, tail) == (c, n, n)
                            and tail[width:width + 4] in _NEXT):
                        spool.write(buf[:i])
                        stream.unread(bytes(buf[i + 4 + width:]))
                        spool.seek(0)
                        return spool, c, n
                search = i + 1
                i = buf.find(DESCRIPTOR_SIG, search)
            else:
                search = max(search, len(buf) - 3)
            keep = min(search, max(len(buf) - 3, 0))
            spool.write(buf[:keep])
            crc = zlib.crc32(buf[:keep], crc)
            flushed += keep
            del buf[:keep]
            search -= keep
            chunk = stream.read(CHUNK)
            if not chunk:
                raise UnsafeArchiveError(
                    f"{stream.archive}: stored entry {name!r} has its size only in a data descriptor, "
                    "and no signed descriptor matching its data follows it (truncated, or written "
                    "by a tool this reader does not support); refused", archive=stream.archive,
                    member=name)
            buf += chunk
    except BaseException:
        spool.close()
        raise


def extract_zip_stream(raw: IO[bytes], tree: Tree, *, component: str, archive: str,
                       mapper: Mapper) -> list[LocalEntry]:
    """Extract a zip read front to back from ``raw`` into ``tree``; returns the members read."""
    stream = _Stream(raw, archive)
    entries: list[LocalEntry] = []
    seen: set[str] = set()
    try:
        while stream.peek(4) == LOCAL_SIG:
            entries.append(_member(stream, tree, seen, component=component, archive=archive,
                                   mapper=mapper))
        centrals = _central_directory(stream)
    except ZlibError as exc:
        raise UnsafeArchiveError(f"{archive} is corrupt: {exc}", archive=archive) from exc
    except FileExistsError as exc:
        raise ConflictError(f"{archive}: {exc.filename} already exists in the tree",
                            path=str(exc.filename), second=component) from exc
    _check(entries, centrals, archive)
    by_offset = {e.offset: e for e in entries}
    for c in centrals:
        entry = by_offset[c.offset]
        mode = zip_entry_mode(c.create_system, c.external_attr, archive=archive, member=entry.name)
        if entry.rel is not None and not entry.name.endswith("/"):
            tree.set_mode(entry.rel, mode, component)
    return entries


def _member(stream: _Stream, tree: Tree, seen: set[str], *, component: str, archive: str,
            mapper: Mapper) -> LocalEntry:
    offset = stream.pos
    (_sig, _version, flags, method, _time, _date, crc, compressed, size, name_len,
     extra_len) = _LOCAL.unpack(stream.exact(_LOCAL.size, "a local file header"))
    raw_name = stream.exact(name_len, "a local file header")
    extra = stream.exact(extra_len, "a local file header")
    try:
        name = raw_name.decode("utf-8" if flags & _UTF8 else "cp437")
    except UnicodeDecodeError as exc:
        raise _fail(archive, f"the entry at offset {offset} has a name that is not UTF-8 "
                    f"({raw_name!r})") from exc
    if flags & (_ENCRYPTED | _STRONG | _MASKED):
        raise UnsafeArchiveError(f"{archive}: entry {name!r} is encrypted; refused", archive=archive,
                                 member=name)
    if method not in (STORED, DEFLATED):
        raise UnsafeArchiveError(
            f"{archive}: entry {name!r} uses compression method {method}; only stored and deflate "
            "entries are read while downloading. Report this archive to the cudaredist maintainers.",
            archive=archive, member=name)
    (size, compressed), zip64 = _zip64(extra, size, compressed)
    clean = clean_member(name, archive=archive, zip_entry=True)
    # one name twice is ambiguous in any zip; names differing only in case are the tree's to judge
    # (one path where the target folds case, as for a tar)
    if clean in seen:
        raise UnsafeArchiveError(f"{archive}: entry {name!r} appears twice; refused", archive=archive,
                                 member=name)
    seen.add(clean)
    rel = mapper(clean) if clean else None

    described = bool(flags & _DESCRIPTOR)
    src: IO[bytes]
    data: _MemberData | None = None
    if described and method == STORED:
        src, crc, compressed = _scan_stored(stream, name, zip64)
        size = compressed
    else:
        data = _MemberData(stream, name=name, method=method,
                           compressed=None if described else compressed,
                           size=None if described else size, crc=None if described else crc)
        src = cast(IO[bytes], data)
    try:
        if rel is not None and name.endswith("/"):
            tree.add_dir(rel, component, archive)
        if rel is not None and not name.endswith("/"):
            tree.add_file(rel, src, 0o644, component, archive)  # mode: central directory
        else:
            while src.read(CHUNK):
                pass
    finally:
        if data is None:
            src.close()
    if data is not None:
        if described:
            _read_descriptor(stream, data, zip64, name)
        crc, compressed, size = data.crc, data.compressed, data.size
    return LocalEntry(offset, raw_name, name, flags, method, crc, compressed, size, rel)


def _central_directory(stream: _Stream) -> list[CentralEntry]:
    """Read the central directory and end records that must follow the last member, up to EOF."""
    archive = stream.archive
    start = stream.pos
    head = stream.peek(4)
    if head not in (CENTRAL_SIG, EOCD_SIG, EOCD64_SIG):
        if len(head) < 4:
            raise UnsafeArchiveError(f"{archive} is truncated: it ends at offset {stream.pos + len(head)} "
                                     "before its central directory", archive=archive)
        raise _fail(archive, f"unexpected bytes {head!r} at offset {start}, where the next member or "
                    "the central directory should start")
    centrals: list[CentralEntry] = []
    while stream.peek(4) == CENTRAL_SIG:
        (_sig, _cver, create_system, _xver, flags, method, _time, _date, crc, compressed, size, name_len,
         extra_len, comment_len, disk, _internal, external,
         offset) = _CENTRAL.unpack(stream.exact(_CENTRAL.size, "the central directory"))
        raw_name = stream.exact(name_len, "the central directory")
        extra = stream.exact(extra_len, "the central directory")
        stream.exact(comment_len, "the central directory")
        (size, compressed, offset), _ = _zip64(extra, size, compressed, offset)
        centrals.append(CentralEntry(raw_name, flags, method, crc, compressed, size, offset, disk,
                                     create_system, external))
    cd_end = stream.pos
    actual = (len(centrals), cd_end - start, start)
    zip64: tuple[int, int, int] | None = None
    multi_disk = any(c.disk for c in centrals)
    if stream.peek(4) == EOCD64_SIG:
        at = stream.pos
        (_sig, rec_size, _cver, _xver, disk, cd_disk, _here, *values) = _EOCD64.unpack(
            stream.exact(_EOCD64.size, "the zip64 end record"))
        if rec_size < _EOCD64.size - 12:
            raise _fail(archive, "the zip64 end record declares an impossible size")
        stream.exact(rec_size - (_EOCD64.size - 12), "the zip64 end record")
        sig, loc_disk, loc_offset, total_disks = _LOCATOR64.unpack(
            stream.exact(_LOCATOR64.size, "the zip64 end locator"))
        if sig != LOCATOR64_SIG or loc_offset != at or loc_disk or total_disks > 1:
            raise _fail(archive, "the zip64 end locator does not point to the zip64 end record")
        zip64 = (values[0], values[1], values[2])
        multi_disk = multi_disk or bool(disk or cd_disk)
    tail = stream.exact(_EOCD.size, "the end of central directory record")
    (sig, disk, cd_disk, _here, total, size32, offset32, comment_len) = _EOCD.unpack(tail)
    if sig != EOCD_SIG:
        raise _fail(archive, f"unexpected bytes {tail[:4]!r} at offset {stream.pos - len(tail)}, where "
                    "the end of the central directory should be")
    stream.exact(comment_len, "the archive comment")
    if stream.read(1):
        raise _fail(archive, f"bytes follow the end of the archive at offset {stream.pos - 1}")
    if multi_disk or disk or cd_disk:
        raise _fail(archive, "it claims to span several disks")
    # a field at its maximum defers to the zip64 end record (which then must be there)
    declared = tuple(z if v == m and zip64 is not None else v
                     for v, m, z in zip((total, size32, offset32), (_MAX16, _MAX32, _MAX32),
                                        zip64 or (0, 0, 0), strict=True))
    for said in (declared, zip64):
        if said is not None and said != actual:
            raise _fail(archive, f"its end record describes a central directory of {said[0]} entries, "
                        f"{said[1]} bytes at offset {said[2]}, but it holds {actual[0]} entries, "
                        f"{actual[1]} bytes at offset {actual[2]}")
    return centrals


def _check(entries: list[LocalEntry], centrals: list[CentralEntry], archive: str) -> None:
    """Every member read must be in the central directory, once, with the same description."""
    by_offset = {e.offset: e for e in entries}
    listed: set[int] = set()
    for c in centrals:
        name = c.raw_name.decode("utf-8" if c.flags & _UTF8 else "cp437", errors="replace")
        e = by_offset.get(c.offset)
        if e is None:
            raise _fail(archive, f"the central directory lists {name!r} at offset {c.offset}, where the "
                        "archive holds no such entry", name)
        if c.offset in listed:
            raise _fail(archive, f"the central directory lists the entry at offset {c.offset} twice", name)
        listed.add(c.offset)
        for what, central, local in (("name", c.raw_name, e.raw_name),
                                     ("name encoding", c.flags & _UTF8, e.flags & _UTF8),
                                     ("compression method", c.method, e.method),
                                     ("CRC", c.crc, e.crc), ("compressed size", c.compressed, e.compressed),
                                     ("size", c.size, e.size)):
            if central != local:
                said, has = ((f"{central:08x}", f"{local:08x}") if what == "CRC" and isinstance(central, int)
                             and isinstance(local, int) else (repr(central), repr(local)))
                raise _fail(archive, f"the central directory gives the entry at offset {c.offset} "
                            f"({e.name!r}) a {what} of {said}, its data and local header {has}", e.name)
        if c.flags & (_ENCRYPTED | _STRONG):
            raise UnsafeArchiveError(f"{archive}: entry {e.name!r} is encrypted; refused", archive=archive,
                                     member=e.name)
    for e in entries:
        if e.offset not in listed:
            raise _fail(archive, f"entry {e.name!r} at offset {e.offset} is not in the central directory",
                        e.name)
