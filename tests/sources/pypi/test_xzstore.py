"""The stored-chunk .xz writer behind ``mirror --xz-preset store``: read back by Python's lzma and xz(1)."""

from __future__ import annotations

import io
import lzma
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cudaredist.sources.pypi.repack import XZ_CHUNK as CHUNK
from cudaredist.sources.pypi.repack import StoredXZWriter


def _stored(data: bytes, step: int) -> bytes:
    out = io.BytesIO()
    with StoredXZWriter(out) as xz:
        for i in range(0, len(data), step):
            assert xz.write(data[i:i + step]) == len(data[i:i + step])
        assert xz.tell() == len(data)
    return out.getvalue()


# around the chunk size, written whole or in pieces that straddle the chunks
@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17])
@pytest.mark.parametrize("step", [1 << 30, 7919])
def test_lzma_reads_it_back(size: int, step: int) -> None:
    data = os.urandom(size)
    packed = _stored(data, step)
    assert lzma.decompress(packed) == data
    # uncompressed: the bytes, 3 a chunk, the end marker, then at most the stream's and the block's
    # headers (12 + 12), the block's padding and CRC32 (3 + 4), the index (16) and the footer (12)
    framing = len(packed) - size - (3 * -(-size // CHUNK) + 1)
    assert 0 < framing <= 12 + 12 + 3 + 4 + 16 + 12


@pytest.mark.skipif(shutil.which("xz") is None, reason="xz(1) is not installed (lzma reads it above)")
def test_xz_tests_it_and_tar_unpacks_it(tmp_path: Path) -> None:
    import tarfile

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.bin").write_bytes(os.urandom(5 * CHUNK + 3))
    with open(tmp_path / "a.tar.xz", "wb") as fh, StoredXZWriter(fh) as xz, \
            tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tf:
        tf.add(tmp_path / "src" / "a.bin", "a.bin")
    assert subprocess.run(["xz", "-t", str(tmp_path / "a.tar.xz")]).returncode == 0
    (tmp_path / "out").mkdir()
    subprocess.run(["tar", "-xJf", str(tmp_path / "a.tar.xz"), "-C", str(tmp_path / "out")], check=True)
    assert (tmp_path / "out" / "a.bin").read_bytes() == (tmp_path / "src" / "a.bin").read_bytes()


def test_a_damaged_byte_is_caught() -> None:
    packed = bytearray(_stored(os.urandom(CHUNK + 5), 1 << 30))
    packed[len(packed) // 2] ^= 1  # inside the data: the block's CRC32 no longer matches
    with pytest.raises(lzma.LZMAError):
        lzma.decompress(bytes(packed))
