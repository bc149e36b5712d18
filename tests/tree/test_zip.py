"""Zips are extracted once complete, through their central directory (as every zip tool reads them):
every flavour Python's zipfile writes extracts, and a hostile or broken zip fails the install with the
staging tree gone, the prefix as it was and the archive dropped from the cache."""

from __future__ import annotations

import hashlib
import io
import os
import random
import struct
import sys
import threading
import time
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from cudaredist.cache.store import Cache
from cudaredist.errors import CudaRedistError, IntegrityError, UnsafeArchiveError
from cudaredist.fetch.client import RetryPolicy, make_client
from cudaredist.fetch.transport import Transport
from cudaredist.install import Installer
from cudaredist.plan import Archive, Plan, PlannedArchive
from cudaredist.tree import extract as extract_module
from cudaredist.tree.extract import extract, is_streamable, redist_mapper
from cudaredist.tree.staging import FileRecord, Tree
from tests.archives import zip_info
from tests.faultserver import FaultServer
from tests.hosts import assert_mode
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


def test_tars_stream_zips_and_wheels_do_not() -> None:
    assert is_streamable("x.tar.xz") and not is_streamable(NAME) and not is_streamable("x.whl")


@pytest.mark.parametrize("flavour", [*FLAVOURS, pytest.param({"zip64_end": True}, id="zip64-end-records")])
def test_every_flavour_extracts(tmp_path: Path, flavour: dict[str, int]) -> None:
    zip64_end = flavour.pop("zip64_end", False)
    data = make(payload(), **flavour)
    data = with_zip64_end(data) if zip64_end else data
    infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    if not zip64_end:  # the flavour is what it says
        assert {zi.flag_bits & 0x08 for zi in infos} == ({0x08} if flavour.get("descriptors") else {0})
        assert {zi.compress_type for zi in infos if zi.file_size} == {flavour["method"]}
    by_path = {r.path: r for r in whole(data, tmp_path)}
    root = tmp_path / "whole-tree"
    assert by_path["bin/nvcc"].mode == 0o755
    assert_mode(root / "bin/nvcc", 0o755)
    assert by_path["include/cuda_runtime.h"].mode == 0o644
    assert (root / "bin/x64/cudart64_13.dll").read_bytes() == payload()[f"{TOP}/bin/x64/cudart64_13.dll"]
    assert (root / "decoy.bin").read_bytes() == payload()[f"{TOP}/decoy.bin"]
    assert (root / "licenses/comp/LICENSE").read_bytes() == b"eula"
    assert (root / "lib/x64").is_dir()


def test_a_zip_of_many_small_members_is_inflated_by_several_threads(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA's cccl zip: 1,700 headers in 3 MB. Creating a file is the cost there, and it runs in
    parallel too: many members take the threads that big ones do, and every member still lands."""
    members = {f"{TOP}/include/h{i:03}.h": f"// header {i}\n".encode() * (i + 1) for i in range(300)}
    writers: set[str] = set()
    add_file = Tree.add_file

    def spy(self: Tree, *args: object) -> None:
        writers.add(threading.current_thread().name)
        add_file(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Tree, "add_file", spy)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    data = make(members, method=zipfile.ZIP_DEFLATED)
    assert len(data) < extract_module.PARALLEL_ZIP_BYTES  # small: parallel for its member count alone
    records = {r.path: r for r in whole(data, tmp_path)}
    for name, content in members.items():
        rel = name.removeprefix(f"{TOP}/")
        assert (tmp_path / "whole-tree" / rel).read_bytes() == content
        assert records[rel].sha256 == hashlib.sha256(content).hexdigest()
    assert len([w for w in writers if w.startswith("inflate")]) == 2, writers


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


def _small() -> bytes:
    return make({f"{TOP}/": 0o40755, f"{TOP}/bin/a.dll": b"MZ" * 5000, f"{TOP}/bin/b.dll": b"MZ b" * 3000,
                 f"{TOP}/LICENSE": b"eula"})



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


def test_warm_install_reads_the_zip_from_the_cache(tmp_path: Path) -> None:
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


def _zips_plan(srv: FaultServer, www: Path, shapes: dict[str, dict[str, bytes]]) -> Plan:
    """A Windows plan of one stored zip per component (``shapes``: component -> its files), served."""
    items = []
    for name, files in shapes.items():
        top = f"{name}-windows-x86_64-1.0-archive"
        data = make({f"{top}/{rel}": body for rel, body in files.items()}, method=zipfile.ZIP_STORED)
        sha = hashlib.sha256(data).hexdigest()
        (www / sha[:8]).mkdir(parents=True)
        (www / sha[:8] / f"{top}.zip").write_bytes(data)
        items.append(PlannedArchive(name, "1.0", Archive(f"{top}.zip", sha, len(data)),
                                    srv.url(f"/{sha[:8]}/{top}.zip")))
    return Plan("1.0.0", "", "windows-x86_64", srv.base, "custom", tuple(items))


def test_the_biggest_downloaded_zip_is_extracted_first(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The biggest archive (the longest extraction) has a thread of its own, which the others give way
    to; small zips arrive first, and a worker that frees up takes the biggest waiting, not the next to
    have arrived."""
    from cudaredist.install import build

    sizes = {"small": 2_000, "mid": 60_000, "big": 300_000, "bigger": 500_000, "huge": 900_000}
    nice = os.getpriority(os.PRIO_PROCESS, 0) if sys.platform.startswith("linux") else None
    with FaultServer(tmp_path / "www") as srv:
        plan = _zips_plan(srv, tmp_path / "www", {name: {f"bin/{name}.dll": random.Random(n).randbytes(n)}
                                                  for name, n in sizes.items()})
        items = plan.items
        order: list[str] = []
        ran: dict[str, tuple[str, int | None]] = {}
        real_place = build.Build.place

        def place(self: build.Build, item: PlannedArchive, *args: object) -> None:
            me = threading.current_thread()
            ran[item.component] = (me.name, None if nice is None else
                                   os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
            if me.name.startswith("extract_"):
                if not order:  # the first extraction holds the one worker until every other zip waits
                    deadline = time.monotonic() + 20
                    while self.downloaded < len(items) and time.monotonic() < deadline:
                        time.sleep(0.01)
                    time.sleep(0.05)  # the last arrival is queued just after it is counted
                order.append(item.component)
            real_place(self, item, *args)  # type: ignore[arg-type]

        monkeypatch.setattr(build.Build, "place", place)
        with _transport(5) as t:
            installer = Installer(t, Cache(tmp_path / "cache"))
            installer.extract_workers = 1
            installer.install(plan, tmp_path / "p")
    assert ran["huge"][0].startswith("extract-lead") and "huge" not in order
    assert sorted(order[1:], key=lambda c: -sizes[c]) == order[1:]
    assert sorted(order) == sorted(set(sizes) - {"huge"})
    if nice is not None:  # Linux: the others run at a lower priority, the lead at the caller's
        assert ran["huge"][1] == nice
        assert {ran[c][1] for c in order} == {min(19, nice + build.GIVE_WAY)}
    assert all((tmp_path / "p" / f"bin/{name}.dll").stat().st_size == n for name, n in sizes.items())


def test_a_warm_install_places_the_entry_with_the_most_files_first(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Placing an unpacked entry costs per file, not per byte: cccl's 1,708 headers (3 MB) take
    longer than libnvvm's five files (124 MB), so they start first."""
    from cudaredist.install import build

    shapes = {"few": {"bin/few.dll": random.Random(1).randbytes(400_000)},
              "many": {f"include/h{i}.h": f"// {i}\n".encode() for i in range(200)},
              "some": {f"lib/s{i}.lib": random.Random(i).randbytes(5_000) for i in range(20)}}
    with FaultServer(tmp_path / "www") as srv:
        plan = _zips_plan(srv, tmp_path / "www", shapes)
        with _transport() as t:
            Installer(t, Cache(tmp_path / "cache")).install(plan, tmp_path / "cold")
            order: list[str] = []
            real_place = build.Build.place

            def place(self: build.Build, item: PlannedArchive, *args: object) -> None:
                order.append(item.component)
                real_place(self, item, *args)  # type: ignore[arg-type]

            monkeypatch.setattr(build.Build, "place", place)
            warm = Installer(t, Cache(tmp_path / "cache"), link_mode="hardlink")
            warm.extract_workers = 1
            result = warm.install(plan, tmp_path / "warm")
    assert result.cached == 3 and order == ["many", "some", "few"]
    assert snapshot(tmp_path / "cold").keys() == snapshot(tmp_path / "warm").keys()


@pytest.mark.parametrize(("spoil", "reason"), [
    pytest.param(lambda d: make({f"{TOP}/a": b"x", f"{TOP}/../evil": b"x"}), "'..'", id="path-traversal"),
    pytest.param(lambda d: make({f"{TOP}/a": b"x", f"{TOP}/lib/link": 0o120777}), "symlink",
                 id="symlink-entry"),
    pytest.param(lambda d: _patch(d, _central(d, 1) + 46 + len(TOP) + 5, "<1s", b"z"), "corrupt",
                 id="central-name-is-not-the-local-one"),
    pytest.param(lambda d: _patch(d, _central(d, 2) + 16, "<I", 0x12345678), "corrupt", id="central-crc"),
    pytest.param(lambda d: d[: _central(d, 1) + 10], "not a readable zip", id="truncated"),
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
