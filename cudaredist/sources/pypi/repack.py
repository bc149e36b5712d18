"""Redist archives re-packed from NVIDIA's wheels, holding the tree ``--source pypi`` installs (I/O).

A wheel's members go through :func:`cudaredist.sources.pypi.wheels.member_mapper`, the same mapping the
pypi install uses, and Linux shared libraries get their SONAME chains as real symlinks
(:func:`cudaredist.tree.sonames.chain_links`). The result has one top folder
``<component>-<platform>-<version>-archive/``: ``.tar.xz`` for Linux, ``.zip`` for Windows, as
NVIDIA ships them. Installing such an archive through the redist route gives the tree that
installing the wheel gives.

Archives are deterministic: members sorted, one fixed time stamp, uid/gid 0 and modes
0644/0755, so one wheel always gives the same bytes (and sha256). Members stream from the
wheel into the archive, so memory stays bounded for any wheel size.
"""

from __future__ import annotations

import hashlib
import io
import lzma
import shutil
import stat
import struct
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

from cudaredist.errors import PlanError, UnsafeArchiveError
from cudaredist.profiles import is_windows
from cudaredist.sources.pypi.wheels import member_mapper, wheel_metadata
from cudaredist.tree.paths import clean_member, zip_entry_mode
from cudaredist.tree.sonames import chain_links, read_soname

# 2000-01-01T00:00:00Z for every member: the bytes depend on the content only
MTIME = 946684800
ZIP_DATE = (2000, 1, 1, 0, 0, 0)
CHUNK = 1 << 20
SMALL_LIMIT = 4 << 20  # licence files are read whole; a bigger one is not a text file
# xz's preset 0-9, or "store": xz streams of LZMA2's uncompressed chunks and zips of stored members
# (StoredXZWriter, below), packed at disk speed
XzPreset = int | str
STORE = "store"


@dataclass(frozen=True)
class Member:
    """One entry of the tree a wheel installs."""

    path: str            # the tree path, as an install writes it
    kind: str            # "dir", "file" or "link"
    source: str = ""     # for files: the wheel member
    size: int = 0
    mode: int = 0o644
    target: str = ""     # for links


@dataclass(frozen=True)
class Packed:
    """A written archive and what its manifest entry needs."""

    sha256: str
    md5: str
    size: int
    summary: str          # the wheel's Summary: the manifest's "name"
    license: str          # the wheel's License-Expression or License
    license_text: bytes   # the wheel's licence file (b"" if it has none)


def archive_stem(component: str, platform: str, version: str, variant: str = "") -> str:
    """NVIDIA's name; a product's archives name the CUDA variant they were built for
    (``cudnn-linux-x86_64-9.27.0.42_cuda13-archive``)."""
    return f"{component}-{platform}-{version}{'_' + variant if variant else ''}-archive"


def relative_path(component: str, platform: str, version: str, variant: str = "") -> str:
    """Where NVIDIA keeps this archive under the redist base."""
    ext = "zip" if is_windows(platform) else "tar.xz"
    return f"{component}/{platform}/{archive_stem(component, platform, version, variant)}.{ext}"


def archive_member(path: str, component: str) -> str:
    """Where a tree path sits below the archive's top folder: the inverse of
    :func:`cudaredist.tree.paths.tree_path` (a component's own licence sits at the top)."""
    name = path.removeprefix(f"licenses/{component}/")
    return name if name in ("LICENSE", "LICENSE.txt") else path


def wheel_members(zf: zipfile.ZipFile, *, component: str, version: str, platform: str,
                  archive: str) -> list[Member]:
    """The tree the pypi install makes of this wheel: files and directories by the member
    mapper, then the SONAME links. Refuses what the installer refuses, before anything is written."""
    mapper = member_mapper(component, version, platform)
    seen: set[str] = set()
    members: dict[str, Member] = {}
    for info in zf.infolist():
        name = info.orig_filename  # as the wheel spells it: on Windows .filename has "/" for "\\"
        clean = clean_member(name, archive=archive, zip_entry=True)
        if clean.lower() in seen:
            raise UnsafeArchiveError(f"{archive}: entry {name!r} appears twice; refused",
                                     archive=archive, member=name)
        seen.add(clean.lower())
        rel = mapper(clean) if clean else None
        if rel is None:
            continue
        unix_mode = zip_entry_mode(info.create_system, info.external_attr, archive=archive, member=name)
        if rel in members:
            raise UnsafeArchiveError(f"{archive}: two entries become {rel!r} in the tree; refused",
                                     archive=archive, member=name)
        if info.is_dir():
            members[rel] = Member(rel, "dir", mode=0o755)
        else:
            # the installer's rule: executable if any x bit is set, never anything else
            mode = 0o755 if unix_mode & 0o111 else 0o644
            members[rel] = Member(rel, "file", info.filename, info.file_size, mode)

    def soname_of(rel: str) -> str | None:  # chain_links asks only about ``files``
        with zf.open(members[rel].source) as fh:  # seekable: the program headers lead to DT_SONAME
            return read_soname(fh)

    files = [m.path for m in members.values() if m.kind == "file"]
    for link, target in chain_links(files, soname_of, lambda rel: rel in members):
        members[link] = Member(link, "link", mode=0o777, target=target)
    # directories of the archive (a licence at its top needs none)
    parents = {"/".join(parts[:i]) for m in members
               for parts in [archive_member(m, component).split("/")] for i in range(1, len(parts))}
    for d in sorted(parents):
        found = members.get(d)
        if found is not None and found.kind != "dir":
            raise UnsafeArchiveError(f"{archive}: {d!r} is both a {found.kind} and a directory in the "
                                     "tree; refused", archive=archive, member=d)
        members.setdefault(d, Member(d, "dir", mode=0o755))
    return sorted(members.values(), key=lambda m: archive_member(m.path, component))


def repack(wheel: Path, dest: Path, *, component: str, version: str, platform: str, preset: XzPreset = 6,
           variant: str = "") -> Packed:
    """Write the redist archive of ``wheel`` to ``dest`` (the caller renames it into place)."""
    top = archive_stem(component, platform, version, variant)
    try:
        zf = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise UnsafeArchiveError(f"{wheel.name} is not a readable wheel: {exc}", archive=wheel.name) from exc
    with zf:
        try:
            members = wheel_members(zf, component=component, version=version, platform=platform,
                                    archive=wheel.name)
            meta = wheel_metadata(zf, wheel.name)
            licence = [m for name in ("LICENSE.txt", "LICENSE") for m in members
                       if m.path == f"licenses/{component}/{name}" and m.size <= SMALL_LIMIT]
            license_text = zf.read(licence[0].source) if licence else b""
            with open(dest, "wb") as out:
                if is_windows(platform):
                    _write_zip(zf, members, top, component, out,
                               level=None if preset == STORE else min(9, max(1, int(preset))))
                else:
                    _write_tar(zf, members, top, component, out, preset=preset)
        except (zipfile.BadZipFile, EOFError) as exc:  # a member that does not inflate to its CRC
            raise UnsafeArchiveError(f"{wheel.name} is corrupt: {exc}", archive=wheel.name) from exc
    sha, md5 = hashlib.sha256(), hashlib.md5(usedforsecurity=False)
    size = 0
    with open(dest, "rb") as fh:
        while chunk := fh.read(CHUNK):
            sha.update(chunk)
            md5.update(chunk)
            size += len(chunk)
    return Packed(sha.hexdigest(), md5.hexdigest(), size, meta.summary, meta.license, license_text)


def _write_tar(zf: zipfile.ZipFile, members: list[Member], top: str, component: str, out: IO[bytes], *,
               preset: XzPreset) -> None:
    def info(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(name)
        ti.type, ti.mode, ti.mtime = kind, mode, MTIME
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        return ti

    def xz_stream() -> IO[bytes]:
        if preset == STORE:
            return cast(IO[bytes], StoredXZWriter(out))
        return lzma.LZMAFile(out, "w", preset=int(preset))

    with xz_stream() as xz, tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tf:
        tf.addfile(info(top, tarfile.DIRTYPE, 0o755))
        for m in members:
            name = f"{top}/{archive_member(m.path, component)}"
            if m.kind == "dir":
                tf.addfile(info(name, tarfile.DIRTYPE, 0o755))
            elif m.kind == "link":
                ti = info(name, tarfile.SYMTYPE, 0o777)
                ti.linkname = m.target
                tf.addfile(ti)
            else:
                ti = info(name, tarfile.REGTYPE, m.mode)
                ti.size = m.size
                with zf.open(m.source) as src:  # zipfile checks the member's size and CRC
                    tf.addfile(ti, src)


def _write_zip(zf: zipfile.ZipFile, members: list[Member], top: str, component: str, out: IO[bytes], *,
               level: int | None) -> None:
    """``level`` None: stored members."""
    def info(arcname: str, mode: int) -> zipfile.ZipInfo:
        zi = zipfile.ZipInfo(arcname, date_time=ZIP_DATE)
        zi.create_system = 3  # Unix: the external attributes carry the mode
        zi.external_attr = mode << 16
        return zi

    method = zipfile.ZIP_STORED if level is None else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(out, "w", compression=method, compresslevel=level) as zo:
        zo.writestr(info(f"{top}/", stat.S_IFDIR | 0o755), b"", compress_type=zipfile.ZIP_STORED)
        for m in members:
            arcname = f"{top}/{archive_member(m.path, component)}"
            if m.kind == "dir":
                zo.writestr(info(arcname + "/", stat.S_IFDIR | 0o755), b"", compress_type=zipfile.ZIP_STORED)
            elif m.kind == "link":
                raise PlanError(f"{top}.zip: {m.path} would be a symlink, which a zip archive cannot hold",
                                component=component)
            else:
                zi = info(arcname, stat.S_IFREG | m.mode)
                zi.compress_type = method
                zi._compresslevel = level  # type: ignore[attr-defined]  # no public setter before 3.13
                zi.file_size = m.size  # decides zip64 before the first byte is written
                with zf.open(m.source) as src, zo.open(zi, "w") as dst:
                    shutil.copyfileobj(src, dst, CHUNK)


# ------------------------------------------------------------------------------------------------
# An .xz stream of LZMA2's *uncompressed* chunks: `mirror --source pypi --xz-preset store` (I/O).
#
# liblzma has no store level: preset 0 still runs its match finder over every byte, about 6 MB/s on
# a CI core for the fatbins of cuBLAS (it halves them): a minute and a half for cuBLAS's 600 MB alone.
# LZMA2 itself has uncompressed chunks (control byte 1 with a dictionary
# reset, 2 without; a big-endian size - 1; up to 64 KiB of bytes as they are), which every xz reader
# reads at copying speed. This writes one such stream: one block of them, its CRC32, the index and the
# footer, as the .xz file format (version 1.2.1) lays them out; Python's own lzma and xz(1)
# read it back.

XZ_CHUNK = 1 << 16  # the most an LZMA2 chunk holds
_MAGIC = b"\xfd7zXZ\x00"
_FLAGS = b"\x00\x01"  # check: CRC32
_LZMA2 = 0x21
_DICT_1MIB = 16  # LZMA2's dictionary-size property: 2 << (16 // 2 + 11) bytes


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _crc(data: bytes) -> bytes:
    return struct.pack("<I", zlib.crc32(data))


def _padded(data: bytes) -> bytes:
    return data + b"\x00" * (-len(data) % 4)


# size byte, flags (one filter, no sizes), LZMA2 with its one-byte property, padded, then its CRC32
_BLOCK_BODY = _padded(bytes([0, 0, _LZMA2, 1, _DICT_1MIB]))
_BLOCK_HEADER = bytes([(len(_BLOCK_BODY) + 4) // 4 - 1]) + _BLOCK_BODY[1:]
_BLOCK_HEADER += _crc(_BLOCK_HEADER)


class StoredXZWriter(io.RawIOBase):
    """A write-only file: what is written goes to ``out`` as an .xz stream of uncompressed chunks.
    ``close()`` ends the stream (and leaves ``out`` open)."""

    def __init__(self, out: IO[bytes]) -> None:
        super().__init__()
        self._out = out
        self._pending = bytearray()
        self._size = 0         # uncompressed bytes so far
        self._data_size = 0    # the block's compressed data so far
        self._crc = 0
        out.write(_MAGIC + _FLAGS + _crc(_FLAGS) + _BLOCK_HEADER)

    def tell(self) -> int:
        return self._size

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(data).cast("B")
        self._crc = zlib.crc32(view, self._crc)
        self._size += len(view)
        self._pending += view
        while len(self._pending) >= XZ_CHUNK:
            self._chunk(self._pending[:XZ_CHUNK])
            del self._pending[:XZ_CHUNK]  # a bytearray drops its head without moving the rest
        return len(view)

    def _chunk(self, data: bytes | bytearray | memoryview) -> None:
        control = 1 if self._data_size == 0 else 2  # the first one resets the dictionary
        self._out.write(struct.pack(">BH", control, len(data) - 1))
        self._out.write(data)
        self._data_size += 3 + len(data)

    def close(self) -> None:
        if self.closed:
            return
        if self._pending:
            self._chunk(self._pending)
        self._out.write(b"\x00")  # LZMA2's end marker
        self._data_size += 1
        unpadded = len(_BLOCK_HEADER) + self._data_size + 4
        self._out.write(b"\x00" * (-self._data_size % 4) + struct.pack("<I", self._crc))
        index = _padded(b"\x00" + _varint(1) + _varint(unpadded) + _varint(self._size))
        index += _crc(index)
        backward = struct.pack("<I", len(index) // 4 - 1)
        self._out.write(index + _crc(backward + _FLAGS) + backward + _FLAGS + b"YZ")
        super().close()
