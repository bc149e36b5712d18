"""Inflating zip members: zlib-ng (the same API, about twice as fast) where it is installed, else
the standard library's zlib; and a complete zip's deflated member read straight from the file.

zipfile always inflates with the standard library. :class:`DeflatedMember` reads a member the
central directory describes (sizes, CRC) from its local header on, like ``ZipFile.open``: the local
name must be the central one, and the data must inflate to exactly the recorded size and CRC, or
it is a :class:`zipfile.BadZipFile`.
"""

from __future__ import annotations

import struct
import zipfile
from typing import IO

try:
    from zlib_ng import zlib_ng as zlib
except ImportError:  # pragma: no cover - a host without its wheel
    import zlib  # type: ignore[no-redef]

__all__ = ["DeflatedMember", "zlib"]

_LOCAL = struct.Struct("<4sHHHHHIIIHH")
READ = 1 << 20


class DeflatedMember:
    """``read(n)`` of one deflated member of a complete zip, through :data:`zlib`, checked at its end."""

    def __init__(self, fh: IO[bytes], info: zipfile.ZipInfo) -> None:
        fh.seek(info.header_offset)
        head = fh.read(_LOCAL.size)
        if len(head) != _LOCAL.size or head[:4] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"bad local header for {info.orig_filename!r}")
        fields = _LOCAL.unpack(head)
        name = fh.read(fields[9])
        fh.seek(fields[10], 1)  # the extra field
        spelled = name.decode("utf-8" if info.flag_bits & 0x800 else "cp437")
        if spelled != info.orig_filename:
            raise zipfile.BadZipFile(f"file name in directory {info.orig_filename!r} and header "
                                     f"{spelled!r} differ")
        self._fh = fh
        self._info = info
        self._left = info.compress_size
        self._out = 0
        self._crc = 0
        self._d = zlib.decompressobj(-15)
        self._pending = b""

    def read(self, n: int = -1) -> bytes:
        """``n`` bytes (fewer only at the end), as a file's ``read``."""
        want = READ if n is None or n < 0 else n
        if len(self._pending) < want:
            parts = [self._pending]
            have = len(self._pending)
            self._pending = b""
            while have < want and (piece := self._more(want - have)):
                parts.append(piece)
                have += len(piece)
            self._pending = b"".join(parts)
        out, self._pending = self._pending[:want], self._pending[want:]
        return out

    def _more(self, want: int) -> bytes:
        """The next inflated bytes (at most ``want``), b"" at the end (after checking it)."""
        while True:
            if self._d.unconsumed_tail:
                out = self._d.decompress(self._d.unconsumed_tail, want)
            elif self._left > 0:
                raw = self._fh.read(min(READ, self._left))
                if not raw:
                    raise EOFError(f"{self._info.orig_filename!r} is cut short")
                self._left -= len(raw)
                out = self._d.decompress(raw, want)
            else:
                out = self._d.flush()
                if not out:
                    self._check()
                    return b""
            if out:
                self._crc = zlib.crc32(out, self._crc)
                self._out += len(out)
                if self._out > self._info.file_size:
                    raise zipfile.BadZipFile(f"{self._info.orig_filename!r} inflates past its size")
                return out

    def _check(self) -> None:
        info = self._info
        if not self._d.eof or self._out != info.file_size:
            raise zipfile.BadZipFile(f"{info.orig_filename!r} inflates to {self._out} bytes, not "
                                     f"{info.file_size}")
        if self._crc != info.CRC:
            raise zipfile.BadZipFile(f"bad CRC-32 for {info.orig_filename!r}")
