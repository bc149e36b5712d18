"""An .xz stream of LZMA2's *uncompressed* chunks: ``mirror --source pypi --xz-preset store`` (I/O).

liblzma has no store level: preset 0 still runs its match finder over every byte, about 6 MB/s on
a CI core for the fatbins of cuBLAS (it halves them): a minute and a half for cuBLAS's 600 MB alone.
LZMA2 itself has uncompressed chunks (control byte 1 with a dictionary
reset, 2 without; a big-endian size - 1; up to 64 KiB of bytes as they are), which every xz reader
reads at copying speed. This writes one such stream: one block of them, its CRC32, the index and the
footer, as the .xz file format (version 1.2.1) lays them out; Python's own :mod:`lzma` and xz(1)
read it back.
"""

from __future__ import annotations

import io
import struct
import zlib
from typing import IO

CHUNK = 1 << 16  # the most an LZMA2 chunk holds
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

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._size

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(data).cast("B")
        self._crc = zlib.crc32(view, self._crc)
        self._size += len(view)
        self._pending += view
        while len(self._pending) >= CHUNK:
            self._chunk(self._pending[:CHUNK])
            del self._pending[:CHUNK]  # a bytearray drops its head without moving the rest
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
