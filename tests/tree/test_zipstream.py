"""Zips read front to back while they download (cudaredist.tree.zipstream): every flavour Python's zipfile
writes extracts exactly as the whole-file reader does, an install extracts members before the last
byte arrives, and a zip whose parts disagree fails with the staging tree gone and the prefix as it was."""

from __future__ import annotations

import hashlib
import io
import random
import struct
import threading
import time
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from cudaredist.cache import Cache
from cudaredist.errors import CudaRedistError, IntegrityError, UnsafeArchiveError
from cudaredist.fetch.client import RetryPolicy, make_client
from cudaredist.fetch.transport import Transport
from cudaredist.install import Installer
from cudaredist.plan import Archive, Plan, PlannedArchive
from cudaredist.tree.extract import extract, is_streamable, redist_mapper
from cudaredist.tree.staging import FileRecord, Tree
from cudaredist.tree.zipstream import extract_zip_stream
from tests.archives import zip_info
from tests.faultserver import FaultServer
from tests.hosts import assert_mode, posix_streaming
from tests.invariants import assert_installed, assert_intact, snapshot

TOP = "comp-windows-x86_64-1.0-archive"
NAME = f"{TOP}.zip"


class _Unseekable(io.RawIOBase):
    """An output zipfile cannot seek back in: it then writes data descriptors (flag bit 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.data += b
        return len(b)


def make(members: dict[str, bytes | int], *, method: int = zipfile.ZIP_DEFLATED, descriptors: bool = False,
         force_zip64: bool = False) -> bytes:
    """A zip written by Python's zipfile; an int value is a Unix mode, for a directory when the name
    ends in '/', else for a small script."""
    out: io.BytesIO | _Unseekable = _Unseekable() if descriptors else io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w", method) as zf:
        warnings.simplefilter("ignore")  # duplicate names, on purpose
        for name, body in members.items():
            if isinstance(body, int):
                zi = zip_info(name, date_time=(2026, 1, 1, 0, 0, 0))
                zi.create_system = 3
                zi.external_attr = body << 16
                zi.compress_type = method
                zf.writestr(zi, b"" if name.endswith("/") else b"#!/bin/sh\n")
            else:
                zi = zip_info(name, date_time=(2026, 1, 1, 0, 0, 0))
                zi.compress_type = method
                with zf.open(zi, "w", force_zip64=force_zip64) as dst:
                    dst.write(body)
    return bytes(out.data if isinstance(out, _Unseekable) else out.getvalue())


def payload(seed: int = 5) -> dict[str, bytes | int]:
    rng = random.Random(seed)
    return {
        f"{TOP}/": 0o40755,
        f"{TOP}/bin/x64/cudart64_13.dll": rng.randbytes(150_000),              # incompressible
        f"{TOP}/include/cuda_runtime.h": b"// the runtime API\n" * 5_000,      # compresses well
        f"{TOP}/bin/nvcc": 0o100755,                                            # an exec bit
        f"{TOP}/lib/x64/empty.lib": b"",
        f"{TOP}/lib/x64/": 0o40755,
        f"{TOP}/decoy.bin": b"PK\x07\x08" * 300 + b"PK\x03\x04" * 300,  # signatures inside data
        f"{TOP}/LICENSE": b"eula",
    }


FLAVOURS = [
    pytest.param(dict(method=zipfile.ZIP_DEFLATED), id="deflated"),
    pytest.param(dict(method=zipfile.ZIP_STORED), id="stored"),
    pytest.param(dict(method=zipfile.ZIP_DEFLATED, descriptors=True), id="deflated-descriptor"),
    pytest.param(dict(method=zipfile.ZIP_STORED, descriptors=True), id="stored-descriptor"),
    pytest.param(dict(method=zipfile.ZIP_DEFLATED, force_zip64=True), id="deflated-zip64"),
    pytest.param(dict(method=zipfile.ZIP_STORED, descriptors=True, force_zip64=True),
                 id="stored-descriptor-zip64"),
    pytest.param(dict(method=zipfile.ZIP_DEFLATED, descriptors=True, force_zip64=True),
                 id="deflated-descriptor-zip64"),
]


def with_zip64_end(data: bytes) -> bytes:
    """The same archive ended by a zip64 end record and locator, the classic record deferring to it
    (what a writer does past 65535 entries or 4 GiB, without writing that much)."""
    at = data.rindex(b"PK\x05\x06")
    _sig, _d, _cd, _here, total, size, offset, clen = struct.unpack_from("<4sHHHHIIH", data, at)
    eocd64 = struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, total, total, size, offset)
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, at, 1)
    eocd = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, clen)
    return data[:at] + eocd64 + locator + eocd + data[at + 22:]


def streamed(data: bytes, tree: Tree, name: str = NAME) -> list[FileRecord]:
    extract(None, tree, component="comp", archive=name, mapper=redist_mapper("comp", name),
            fileobj=io.BytesIO(data))
    return tree.finish()


def whole(data: bytes, tmp_path: Path) -> list[FileRecord]:
    path = tmp_path / "whole" / NAME
    path.parent.mkdir()
    path.write_bytes(data)
    tree = Tree(tmp_path / "whole-tree")
    tree.root.mkdir()
    extract(path, tree, component="comp", archive=NAME, mapper=redist_mapper("comp", NAME))
    return tree.finish()


def new_tree(tmp_path: Path) -> Tree:
    root = tmp_path / "stage"
    root.mkdir()
    return Tree(root)


# -- what Python's zipfile writes, read front to back -----------------------------------------------------
def test_zips_are_streamable_wheels_not_yet() -> None:
    assert is_streamable(NAME) and is_streamable("x.tar.xz") and not is_streamable("x.whl")


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_every_flavour_extracts_as_the_whole_file_reader_does(tmp_path: Path,
                                                              flavour: dict[str, int]) -> None:
    data = make(payload(), **flavour)
    infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    # the flavour is what it says
    assert {zi.flag_bits & 0x08 for zi in infos} == ({0x08} if flavour.get("descriptors") else {0})
    assert {zi.compress_type for zi in infos if zi.file_size} == {flavour["method"]}
    tree = new_tree(tmp_path)
    records = streamed(data, tree)
    assert records == whole(data, tmp_path)
    by_path = {r.path: r for r in records}
    assert by_path["bin/nvcc"].mode == 0o755
    assert_mode(tree.root / "bin/nvcc", 0o755)
    assert by_path["include/cuda_runtime.h"].mode == 0o644
    assert (tree.root / "bin/x64/cudart64_13.dll").read_bytes() == payload()[f"{TOP}/bin/x64/cudart64_13.dll"]
    assert (tree.root / "licenses/comp/LICENSE").read_bytes() == b"eula"
    assert (tree.root / "lib/x64").is_dir()


class _Trickle(io.RawIOBase):
    """Short reads of random length, as a download that is still arriving gives them."""

    def __init__(self, data: bytes, seed: int) -> None:
        super().__init__()
        self._data = io.BytesIO(data)
        self._rng = random.Random(seed)

    def readable(self) -> bool:
        return True

    def readinto(self, buf: memoryview | bytearray) -> int:  # type: ignore[override]
        chunk = self._data.read(min(len(buf), self._rng.choice((1, 3, 29, 4096, 70_000))))
        buf[: len(chunk)] = chunk
        return len(chunk)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_short_reads_change_nothing(tmp_path: Path, flavour: dict[str, int]) -> None:
    data = make(payload(), **flavour)
    tree = new_tree(tmp_path)
    extract(None, tree, component="comp", archive=NAME, mapper=redist_mapper("comp", NAME),
            fileobj=_Trickle(data, seed=len(data)))
    assert tree.finish() == whole(data, tmp_path)


class _CutAt(io.RawIOBase):
    """Reads that never cross ``at``: a download whose bytes so far end exactly there."""

    def __init__(self, data: bytes, at: int) -> None:
        super().__init__()
        self._data = io.BytesIO(data)
        self._at = at

    def readable(self) -> bool:
        return True

    def readinto(self, buf: memoryview | bytearray) -> int:  # type: ignore[override]
        pos = self._data.tell()
        n = len(buf) if pos >= self._at else min(len(buf), self._at - pos)
        chunk = self._data.read(n)
        buf[: len(chunk)] = chunk
        return len(chunk)


def test_deflate_stream_shorter_than_its_header_says(tmp_path: Path) -> None:
    """The header claims more compressed bytes than the deflate stream holds. Whether the stream's
    end falls inside a read or at its end, the reader refuses instead of waiting for output."""
    data = _small()
    info = zipfile.ZipFile(io.BytesIO(data)).infolist()[1]
    at = info.header_offset
    csize = struct.unpack_from("<I", data, at + 18)[0]
    spoiled = _patch(data, at + 18, "<I", csize + 5)
    end = at + 30 + len(info.filename) + len(info.extra) + csize  # where the deflate stream ends
    for i, raw in enumerate([io.BytesIO(spoiled), _CutAt(spoiled, end)]):
        (tmp_path / str(i)).mkdir()
        with pytest.raises(UnsafeArchiveError, match="after the end of its deflate stream"):
            extract(None, new_tree(tmp_path / str(i)), component="comp", archive=NAME,
                    mapper=redist_mapper("comp", NAME), fileobj=raw)


def test_zip64_end_records(tmp_path: Path) -> None:
    data = with_zip64_end(make(payload()))
    assert zipfile.ZipFile(io.BytesIO(data)).testzip() is None  # a valid zip for zipfile too
    assert streamed(data, new_tree(tmp_path)) == whole(data, tmp_path)


def test_archive_comment_is_allowed(tmp_path: Path) -> None:
    buf = io.BytesIO(make(payload()))
    with zipfile.ZipFile(buf, "a") as zf:
        zf.comment = b"built by a tool"
    assert streamed(buf.getvalue(), new_tree(tmp_path)) == whole(buf.getvalue(), tmp_path)


# -- hostile and broken archives ------------------------------------------------------------------------
def _central(data: bytes, index: int) -> int:
    """Offset of the index-th central directory record."""
    at = data.rindex(b"PK\x05\x06")
    pos = struct.unpack_from("<I", data, at + 16)[0]
    for _ in range(index):
        n, m, k = struct.unpack_from("<HHH", data, pos + 28)
        pos += 46 + n + m + k
    return pos


def _patch(data: bytes, at: int, fmt: str, value: int | bytes) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, at, value)
    return bytes(buf)


def _records(data: bytes) -> tuple[list[bytes], list[bytes]]:
    """(local entries with their data, central records) of a zip whose records are in one order."""
    infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    cd = _central(data, 0)
    starts = [zi.header_offset for zi in infos] + [cd]
    locals_ = [data[a:b] for a, b in zip(starts[:-1], starts[1:], strict=True)]
    centrals = [data[_central(data, i):_central(data, i + 1)] for i in range(len(infos))]
    return locals_, centrals


def _join(locals_: list[bytes], centrals: list[bytes]) -> bytes:
    """Reassemble, pointing each central record at the local entry of the same name."""
    body = bytearray()
    where: dict[bytes, int] = {}
    for rec in locals_:
        if rec[:4] == b"PK\x03\x04":
            where[rec[30:30 + struct.unpack_from("<H", rec, 26)[0]]] = len(body)
        body += rec
    start = len(body)
    for rec in centrals:
        out = bytearray(rec)
        name = bytes(out[46:46 + struct.unpack_from("<H", out, 28)[0]])
        if name in where:
            struct.pack_into("<I", out, 42, where[name])
        body += out
    body += struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(centrals), len(centrals), len(body) - start,
                        start, 0)
    return bytes(body)


def _small() -> bytes:
    return make({f"{TOP}/": 0o40755, f"{TOP}/bin/a.dll": b"MZ" * 5000, f"{TOP}/bin/b.dll": b"MZ b" * 3000,
                 f"{TOP}/LICENSE": b"eula"})


def _drop_central(i: int) -> Callable[[bytes], bytes]:
    def f(data: bytes) -> bytes:
        locals_, centrals = _records(data)
        return _join(locals_, centrals[:i] + centrals[i + 1:])
    return f


def _drop_local(i: int) -> Callable[[bytes], bytes]:
    def f(data: bytes) -> bytes:
        locals_, centrals = _records(data)
        return _join(locals_[:i] + locals_[i + 1:], centrals)
    return f


def _insert_between(data: bytes) -> bytes:
    locals_, centrals = _records(data)
    return _join(locals_[:2] + [b"\0" * 64] + locals_[2:], centrals)


def _local_is_larger(data: bytes) -> bytes:
    """a.dll's local header says it is one byte longer than its data inflates to."""
    at = zipfile.ZipFile(io.BytesIO(data)).infolist()[1].header_offset
    size = struct.unpack_from("<I", data, at + 22)[0]
    return _patch(data, at + 22, "<I", size + 1)


HOSTILE = [
    pytest.param(lambda d: _patch(d, _central(d, 1) + 46 + len(TOP) + 5, "<1s", b"z"),
                 "a name of", id="central-name"),
    pytest.param(lambda d: _patch(d, _central(d, 1) + 24, "<I", 9999), "a size of", id="central-size"),
    pytest.param(lambda d: _patch(d, _central(d, 1) + 20, "<I", 77), "a compressed size of",
                 id="central-compressed-size"),
    pytest.param(lambda d: _patch(d, _central(d, 2) + 16, "<I", 0x12345678), "a CRC of", id="central-crc"),
    pytest.param(lambda d: _patch(d, _central(d, 2) + 42, "<I", 1), "no such entry", id="central-offset"),
    pytest.param(lambda d: _patch(d, _central(d, 2) + 42, "<I", struct.unpack_from(
        "<I", d, _central(d, 1) + 42)[0]), "twice", id="central-offset-twice"),
    pytest.param(lambda d: _patch(d, 14, "<I", 0x12345678), "has CRC", id="local-crc"),
    pytest.param(_local_is_larger, "holds 10000 bytes, its header says 10001", id="local-size"),
    pytest.param(_drop_central(2), "not in the central directory", id="extra-local-entry"),
    pytest.param(_drop_local(2), "no such entry|a name of", id="missing-local-entry"),
    pytest.param(_insert_between, "unexpected bytes", id="bytes-between-members"),
    pytest.param(lambda d: d + b"trailing", "bytes follow the end", id="bytes-after-the-end"),
    pytest.param(lambda d: b"MZ stub" + d, "unexpected bytes", id="bytes-before-the-first"),
    pytest.param(lambda d: _patch(d, d.rindex(b"PK\x05\x06") + 10, "<H", 9), "describes a central",
                 id="end-record-count"),
    pytest.param(lambda d: d[: len(d) // 2], "truncated", id="truncated-in-data"),
    pytest.param(lambda d: d[: _central(d, 1) + 10], "truncated", id="truncated-in-central-directory"),
    pytest.param(lambda d: d[:-3], "truncated", id="truncated-in-end-record"),
    pytest.param(lambda d: d[: _central(d, 0)], "truncated", id="no-central-directory"),
]


@pytest.mark.parametrize(("spoil", "reason"), HOSTILE)
def test_inconsistent_zip_is_refused_while_streaming(tmp_path: Path, spoil: Callable[[bytes], bytes],
                                                     reason: str) -> None:
    good = _small()
    (tmp_path / "ok").mkdir()
    assert streamed(good, new_tree(tmp_path / "ok")), "the unspoiled archive extracts"
    with pytest.raises(UnsafeArchiveError, match=reason) as info:
        streamed(spoil(good), new_tree(tmp_path))
    assert info.value.archive == NAME


@pytest.mark.parametrize(("members", "member", "reason"), [
    pytest.param({f"{TOP}/a": b"x", f"{TOP}/../evil": b"x"}, f"{TOP}/../evil", "'..'", id="dotdot"),
    pytest.param({f"{TOP}/a": b"x", "/abs/evil": b"x"}, "/abs/evil", "absolute", id="absolute"),
    pytest.param({f"{TOP}\\..\\..\\evil": b"x"}, f"{TOP}\\..\\..\\evil", "backslashes", id="backslash"),
    pytest.param({f"{TOP}/inc/a.h": b"x", f"{TOP}/./inc/a.h": b"y"}, f"{TOP}/./inc/a.h", "appears twice",
                 id="duplicate-after-cleaning"),
    pytest.param({f"{TOP}/a": b"x", f"{TOP}/lib/link": 0o120777}, f"{TOP}/lib/link", "is a symlink",
                 id="symlink"),
])
def test_hostile_member_is_refused_while_streaming(tmp_path: Path, members: dict[str, bytes | int],
                                                   member: str, reason: str) -> None:
    tree = new_tree(tmp_path)
    with pytest.raises(UnsafeArchiveError, match=reason) as info:
        streamed(make(members), tree)
    assert info.value.member == member
    assert not (tmp_path / "evil").exists() and not (tmp_path.parent / "evil").exists()


def test_unsupported_compression_names_the_member(tmp_path: Path) -> None:
    data = make({f"{TOP}/a.dll": b"MZ" * 100}, method=zipfile.ZIP_BZIP2)
    with pytest.raises(UnsafeArchiveError, match="compression method 12") as info:
        streamed(data, new_tree(tmp_path))
    assert info.value.member == f"{TOP}/a.dll"


def test_returns_the_members_read(tmp_path: Path) -> None:
    data = make(payload())
    tree = new_tree(tmp_path)
    entries = extract_zip_stream(io.BytesIO(data), tree, component="comp", archive=NAME,
                                 mapper=redist_mapper("comp", NAME))
    infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    assert [(e.name, e.offset, e.crc, e.size, e.compressed) for e in entries] == [
        (zi.filename, zi.header_offset, zi.CRC, zi.file_size, zi.compress_size) for zi in infos]


# -- installs ---------------------------------------------------------------------------------------------
def _plan(srv: FaultServer, data: bytes, *, component: str = "comp") -> Plan:
    sha = hashlib.sha256(data).hexdigest()
    item = PlannedArchive(component, "1.0", Archive(NAME, sha, len(data)), srv.url(f"/{sha[:8]}/{NAME}"))
    return Plan("1.0.0", "", "windows-x86_64", srv.base, "custom", (item,))


def _publish(root: Path, data: bytes) -> None:
    path = root / hashlib.sha256(data).hexdigest()[:8] / NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _transport(connections: int = 1) -> Transport:
    """``connections`` bounds all downloads together; archives here are too small to be split."""
    return Transport(make_client(timeout=5), retry=RetryPolicy(backoff=0.01), sleep=lambda s: None,
                     connections=connections)


@posix_streaming
def test_install_extracts_zip_members_while_the_archive_downloads(tmp_path: Path) -> None:
    """The transfer stalls three quarters in; members from before the stall are already in the staging
    tree, and the installed tree is what the whole-file reader makes of the archive."""
    rng = random.Random(3)
    members: dict[str, bytes | int] = {f"{TOP}/": 0o40755}
    for i in range(40):  # incompressible, so the archive is as big as its content
        members[f"{TOP}/bin/f{i:02d}.dll"] = rng.randbytes(20_000)
    data = make(members)
    root = tmp_path / "www"
    _publish(root, data)
    prefix = tmp_path / "prefix"
    seen_during_stall: list[int] = []
    with FaultServer(root) as srv:
        plan = _plan(srv, data)
        srv.stall(f"/{plan.items[0].archive.sha256[:8]}/{NAME}", at=len(data) * 3 // 4, seconds=1.5)
        t = _transport()
        inst = Installer(t, Cache(tmp_path / "cache"))
        worker = threading.Thread(target=inst.install, args=(plan, prefix))
        worker.start()
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline and not seen_during_stall:
            n = len(list(tmp_path.glob("cache/unpacked/.tmp-*/tree/bin/*.dll")))
            if n >= 10:
                seen_during_stall.append(n)
            time.sleep(0.02)
        worker.join(30)
        t.close()
    assert seen_during_stall, "no zip member was extracted before the download finished"
    assert_installed(prefix, "1.0.0")
    assert sorted(p.name for p in (prefix / "bin").iterdir()) == [f"f{i:02d}.dll" for i in range(40)]
    assert all((prefix / "bin" / f"f{i:02d}.dll").read_bytes() == members[f"{TOP}/bin/f{i:02d}.dll"]
               for i in range(40))


def test_warm_install_streams_the_zip_from_the_cache(tmp_path: Path) -> None:
    data = make(payload(), descriptors=True)
    _publish(tmp_path / "www", data)
    cache = Cache(tmp_path / "cache")
    with FaultServer(tmp_path / "www") as srv, _transport() as t:
        plan = _plan(srv, data)
        first = Installer(t, cache).install(plan, tmp_path / "a")
        second = Installer(t, cache).install(plan, tmp_path / "b")
    assert (first.downloaded, second.cached) == (1, 1)
    for prefix in (tmp_path / "a", tmp_path / "b"):
        assert_installed(prefix, "1.0.0", cache)
        assert_mode(prefix / "bin/nvcc", 0o755)
    assert snapshot(tmp_path / "a").keys() == snapshot(tmp_path / "b").keys()


@pytest.mark.parametrize(("spoil", "reason"), [
    # the streaming reader's checks: the whole-file reader Windows uses reads the central directory
    *(pytest.param(*p.values, id=p.id, marks=posix_streaming) for p in HOSTILE),
    pytest.param(lambda d: make({f"{TOP}/a": b"x", f"{TOP}/../evil": b"x"}), "'..'", id="path-traversal"),
    pytest.param(lambda d: make({f"{TOP}/a": b"x", f"{TOP}/lib/link": 0o120777}), "symlink",
                 id="symlink-entry"),
])
def test_hostile_zip_install_leaves_the_prefix_as_it_was(tmp_path: Path, spoil: Callable[[bytes], bytes],
                                                         reason: str) -> None:
    """The archive hashes right (it is what the index publishes) but its parts disagree: the install
    fails with one clear error, no staging tree stays, the previous tree is untouched and the
    refused archive is not kept in the cache."""
    good = _small()
    bad = spoil(good)
    root = tmp_path / "www"
    _publish(root, good)
    _publish(root, bad)
    prefix = tmp_path / "prefix"
    cache = Cache(tmp_path / "cache")
    with FaultServer(root) as srv, _transport() as t:
        Installer(t, cache).install(_plan(srv, good), prefix)
        before = snapshot(prefix)
        with pytest.raises(CudaRedistError, match=reason) as info:
            Installer(t, cache).install(_plan(srv, bad), prefix)
    assert isinstance(info.value, UnsafeArchiveError)
    assert_intact(prefix, before, cache, hashlib.sha256(bad).hexdigest())
    assert not (tmp_path / "evil").exists()


def test_connection_reset_mid_zip_resumes_under_the_reader(tmp_path: Path) -> None:
    data = make(payload())
    _publish(tmp_path / "www", data)
    with FaultServer(tmp_path / "www") as srv, _transport() as t:
        plan = _plan(srv, data)
        srv.reset(f"/{plan.items[0].archive.sha256[:8]}/{NAME}", at=len(data) // 2)
        Installer(t, Cache(tmp_path / "cache")).install(plan, tmp_path / "prefix")
    assert_installed(tmp_path / "prefix", "1.0.0")
    # the archive's files, plus the tree's own version.json
    assert snapshot(tmp_path / "prefix", skip=(tmp_path / "prefix" / ".cudaredist",
                                               tmp_path / "prefix" / "version.json")) == snapshot(
        _whole_tree(data, tmp_path))


def test_corrupted_download_reports_the_checksum_not_the_zip(tmp_path: Path) -> None:
    """A byte flipped in transit trips the zip reader (CRC or inflate) before the download's own
    check ends; the user is told the download's sha256 was wrong, and nothing is installed."""
    good = _small()
    _publish(tmp_path / "www", good)
    prefix = tmp_path / "prefix"
    cache = Cache(tmp_path / "cache")
    with FaultServer(tmp_path / "www") as srv, _transport() as t:
        plan = _plan(srv, good)
        srv.flip(f"/{plan.items[0].archive.sha256[:8]}/{NAME}", at=200)  # inside a.dll's deflate data
        with pytest.raises(IntegrityError) as info:
            Installer(t, cache).install(plan, prefix)
    assert info.value.what == "sha256"
    assert_intact(prefix, {}, cache)


def _whole_tree(data: bytes, tmp_path: Path) -> Path:
    """The tree the whole-file reader makes of ``data``, as the install lays it out."""
    whole(data, tmp_path)
    return tmp_path / "whole-tree"


def test_a_stalled_stream_does_not_hold_up_the_other_archives(tmp_path: Path) -> None:
    """One extraction worker: the big zip's extraction waits on its stalled download, and the small
    zip is extracted meanwhile rather than after it."""
    rng = random.Random(9)
    big = make({f"{TOP}/": 0o40755} | {f"{TOP}/bin/f{i:02d}.dll": rng.randbytes(20_000) for i in range(20)})
    small_top = "small-windows-x86_64-1.0-archive"
    small = make({f"{small_top}/": 0o40755, f"{small_top}/include/small.h": b"// small"})
    root = tmp_path / "www"
    _publish(root, big)
    (root / "small" / f"{small_top}.zip").parent.mkdir(parents=True)
    (root / "small" / f"{small_top}.zip").write_bytes(small)
    prefix = tmp_path / "prefix"
    seen: list[bool] = []
    with FaultServer(root) as srv, _transport(connections=2) as t:
        plan = _plan(srv, big)
        extra = PlannedArchive("small", "1.0", Archive(f"{small_top}.zip", hashlib.sha256(small).hexdigest(),
                                                       len(small)), srv.url(f"/small/{small_top}.zip"))
        plan = Plan("1.0.0", "", "windows-x86_64", srv.base, "custom", (*plan.items, extra))
        srv.stall(f"/{plan.items[0].archive.sha256[:8]}/{NAME}", at=len(big) // 2, seconds=2.0)
        worker = threading.Thread(target=Installer(t, Cache(tmp_path / "cache"), extract_workers=1).install,
                                  args=(plan, prefix))
        worker.start()
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline and not seen:
            if list(tmp_path.glob(".prefix.cudaredist-stage-*/include/small.h")) or list(
                    tmp_path.glob("cache/unpacked/*/tree/include/small.h")):
                seen.append(True)
            time.sleep(0.02)
        worker.join(30)
    assert seen, "the small zip waited for the stalled one"
    assert_installed(prefix, "1.0.0")
    assert (prefix / "include/small.h").read_bytes() == b"// small"
