"""Extraction follows the download: the bytes a reader sees are exactly the file's, in every
transfer mode, and an install extracts tar members while the archive is still arriving."""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudaredist.cache.store import Cache
from cudaredist.fetch.client import RetryPolicy, make_client
from cudaredist.fetch.ranges import DownloadFailed, GrowingFile
from cudaredist.fetch.transport import Transport
from cudaredist.install import Installer
from cudaredist.plan import Archive, Plan, PlannedArchive
from tests.archives import Dir, make_tar_xz
from tests.faultserver import FaultServer
from tests.hosts import posix_streaming

SIZE = 400_000
BLOB = "/blob.bin"


@pytest.fixture
def data() -> bytes:
    return random.Random(11).randbytes(SIZE)


@pytest.fixture
def srv(tmp_path: Path, data: bytes) -> Iterator[FaultServer]:
    root = tmp_path / "www"
    root.mkdir()
    (root / "blob.bin").write_bytes(data)
    with FaultServer(root) as s:
        yield s


def follow_download(t: Transport, url: str, dest: Path, data: bytes) -> tuple[bytes, list[int]]:
    """Download with a reader thread following the file; returns what it read and what it was told."""
    follower = GrowingFile()
    seen: list[int] = []
    got = bytearray()

    def read() -> None:
        while chunk := follower.read(50_000):
            got.extend(chunk)

    def watch(n: int) -> None:
        seen.append(n)
        follower.publish(n)

    dest.write_bytes(b"")
    follower.attach(dest)
    reader = threading.Thread(target=read)
    reader.start()
    try:
        t.download(url, dest, size=len(data), sha256=hashlib.sha256(data).hexdigest(), watch=watch)
    except BaseException as exc:
        follower.fail(exc)
        raise
    finally:
        follower.finish()
        reader.join(10)
        follower.close()
    return bytes(got), seen


@pytest.mark.parametrize("segmented", [False, True], ids=["plain", "segmented"])
@pytest.mark.parametrize("fault", ["none", "reset", "ignore-range"])
def test_reader_sees_exactly_the_files_bytes(srv: FaultServer, data: bytes, tmp_path: Path,
                                             segmented: bool, fault: str) -> None:
    if fault == "reset":
        srv.reset(BLOB, at=SIZE // 3)
    elif fault == "ignore-range":
        srv.reset(BLOB, at=SIZE // 3)  # forces a resume, which the server then answers with 200
        srv.ignore_range(BLOB)
    t = Transport(make_client(timeout=2), retry=RetryPolicy(backoff=0.01), sleep=lambda s: None,
                  connections=4 if segmented else 1, segment_size=64 << 10)
    with t:
        got, seen = follow_download(t, srv.url(BLOB), tmp_path / "dl", data)
    assert got == data
    assert seen == sorted(seen) and seen[-1] == SIZE


def test_reader_is_told_when_the_download_fails(tmp_path: Path) -> None:
    follower = GrowingFile()
    (tmp_path / "x").touch()
    follower.attach(tmp_path / "x")
    errors: list[BaseException] = []

    def read() -> None:
        try:
            follower.read(10)
        except DownloadFailed as exc:
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.05)
    follower.fail(RuntimeError("HTTP 404"))
    reader.join(5)
    follower.close()
    assert len(errors) == 1 and "404" in str(errors[0])


@posix_streaming
def test_install_extracts_while_the_archive_downloads(tmp_path: Path) -> None:
    """The transfer stalls half way; members from the first half are already extracted (into the
    unpacked cache, from which the staging tree is filled once the archive verified)."""
    rng = random.Random(3)
    members: dict[str, object] = {"top/": Dir()}
    for i in range(40):  # incompressible, so the tar.xz is as big as its content
        members[f"top/lib/f{i:02d}.bin"] = rng.randbytes(20_000)
    root = tmp_path / "www"
    arch = make_tar_xz(root / "big-archive.tar.xz", {k.rstrip("/"): v for k, v in members.items()})  # type: ignore[misc]
    raw = arch.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    item = PlannedArchive("big", "1", Archive("big-archive.tar.xz", digest, len(raw)), "")
    prefix = tmp_path / "prefix"
    seen_during_stall: list[list[str]] = []
    with FaultServer(root) as srv:
        item = PlannedArchive(item.component, item.version, item.archive, srv.url("/big-archive.tar.xz"))
        srv.stall("/big-archive.tar.xz", at=len(raw) * 3 // 4, seconds=1.5)
        plan = Plan("1.0.0", "", "linux-x86_64", srv.base, "custom", (item,))
        t = Transport(make_client(timeout=5), retry=RetryPolicy(backoff=0.01), connections=1)
        inst = Installer(t, Cache(tmp_path / "cache"))
        worker = threading.Thread(target=inst.install, args=(plan, prefix))
        worker.start()
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline and not seen_during_stall:
            stages = list(tmp_path.glob("cache/unpacked/.tmp-*/tree/lib/*.bin"))
            if len(stages) >= 10:
                seen_during_stall.append([p.name for p in stages])
            time.sleep(0.02)
        worker.join(30)
        t.close()
    assert seen_during_stall, "no member was extracted before the download finished"
    assert len(list((prefix / "lib").iterdir())) == 40
