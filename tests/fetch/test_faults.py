"""Installs through a fault-injecting server: each fault either heals (retry, resume, fallback)
or fails cleanly, and either way the prefix and the cache stay sound.

Every test first installs 12.9.1 into the prefix, then installs 13.0.1 while the server
misbehaves on one archive (cuda_nvcc, ~300 kB so it can break mid-body and be split
into ranges), and checks the outcome plus the invariants of ``tests/invariants.py``.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cudaredist.cache.store import Cache
from cudaredist.errors import FetchError, IntegrityError
from cudaredist.fetch.client import RetryPolicy, make_client
from cudaredist.fetch.transport import Transport
from cudaredist.install import Installer
from cudaredist.record import read_record
from cudaredist.sources.nvidia.index import Index
from tests.archives import NVCC_12, Exe, MirrorArchive, build_mirror, resolve_plan, toolkit
from tests.faultserver import FaultServer
from tests.invariants import assert_installed, assert_intact, snapshot

NVCC = "/cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-13.0.88-archive.tar.xz"


def build_fault_mirror(root: Path) -> None:
    """12.9.1 (small, its own archives) and 13.0.1 whose cuda_nvcc carries 300 kB of noise."""
    old = [MirrorArchive(a.component, a.platform, a.version.replace("13.0.", "12.9."), a.members)
           for a in toolkit("linux-x86_64") if a.component in NVCC_12]
    build_mirror(root, "12.9.1", old)
    new = toolkit("linux-x86_64")
    new[0].members = {**new[0].members, "bin/ptxas": Exe(random.Random(13).randbytes(300_000))}
    build_mirror(root, "13.0.1", new)


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@dataclass
class Rig:
    srv: FaultServer
    cache: Cache
    prefix: Path
    sleeps: Sleeps
    size: int
    sha: str

    def transport(self, **kw: Any) -> Transport:
        retry = kw.pop("retry", RetryPolicy(backoff=0.01))
        return Transport(make_client(timeout=0.3), retry=retry, sleep=self.sleeps, **kw)

    def install(self, train: str, transport: Transport | None = None, base: str | None = None,
                bases: list[str] | None = None) -> None:
        t = transport or self.transport()
        try:
            plan = resolve_plan(Index(t, self.cache), train, bases=bases or [base or self.srv.base],
                                platform="linux-x86_64", profile="nvcc")
            Installer(t, self.cache, jobs=4, lock_timeout=10).install(plan, self.prefix)
        finally:
            t.close()

    def nvcc_requests(self) -> list[str | None]:
        return self.srv.ranges_for(NVCC)


@dataclass(frozen=True)
class Served:
    srv: FaultServer
    template: Path  # prefix/ with 12.9.1 installed, cache/ holding its archives
    size: int
    sha: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One mirror and server for the module; the 12.9.1 install is made once and copied per test."""
    root = tmp_path_factory.mktemp("faults")
    build_fault_mirror(root / "mirror")
    with FaultServer(root / "mirror") as srv:
        r = Rig(srv, Cache(root / "template" / "cache"), root / "template" / "prefix", Sleeps(), 0, "")
        r.install("12.9")
        with r.transport() as t:
            plan = resolve_plan(Index(t, r.cache), "13.0", bases=[srv.base], platform="linux-x86_64",
                                profile="nvcc")
        nvcc = next(i for i in plan.items if i.component == "cuda_nvcc")
        yield Served(srv, root / "template", nvcc.archive.size, nvcc.archive.sha256)


@pytest.fixture
def rig(served: Served, tmp_path: Path) -> Rig:
    shutil.copytree(served.template / "prefix", tmp_path / "inst" / "cuda", symlinks=True)
    shutil.copytree(served.template / "cache", tmp_path / "cache", symlinks=True)
    with served.srv.lock:
        served.srv.scripts.clear()
        served.srv.requests.clear()
    return Rig(served.srv, Cache(tmp_path / "cache"), tmp_path / "inst" / "cuda", Sleeps(), served.size,
               served.sha)


Script = Callable[[FaultServer], object]
SEG = {"connections": 4, "segment_size": 64 << 10}  # ~300 kB in four ranges


def _seq(*calls: Script) -> Script:
    return lambda s: [c(s) for c in calls]


# id -> (fault, transport options, check on the nvcc requests' Range headers)
HEALS = [
    pytest.param(lambda s: s.reset(NVCC, at=100_000), {},
                 lambda rs, _: rs == [None, "bytes=100000-"], id="reset-resumes"),
    pytest.param(lambda s: s.reset(NVCC, at=100_000, rst=True), {},
                 lambda rs, _: len(rs) == 2 and (rs[1] or "bytes=").startswith("bytes="), id="rst-resumes"),
    pytest.param(_seq(*(lambda s, n=n: s.reset(NVCC, at=n) for n in (60_000, 120_000, 180_000, 240_000))),
                 {"retry": RetryPolicy(attempts=2, backoff=0.01)},
                 lambda rs, _: rs == [None] + [f"bytes={n}-" for n in (60_000, 120_000, 180_000, 240_000)],
                 id="four-resets-with-progress"),
    pytest.param(lambda s: s.status(NVCC, 503, times=2), {},
                 lambda rs, sl: rs == [None] * 3 and len(sl) == 2, id="503-twice"),
    pytest.param(lambda s: s.status(NVCC, 429, retry_after="4"), {},
                 lambda rs, sl: rs == [None] * 2 and sl == [4.0], id="429-retry-after"),
    pytest.param(lambda s: s.stall(NVCC, at=100_000, seconds=3), {},
                 lambda rs, _: rs == [None, "bytes=100000-"], id="stall-times-out-resumes"),
    pytest.param(_seq(lambda s: s.ignore_range(NVCC), lambda s: s.reset(NVCC, at=100_000)), {},
                 lambda rs, _: rs == [None, "bytes=100000-"], id="range-ignored-starts-over"),
    pytest.param(lambda s: None, SEG, lambda rs, _: len(rs) == 4 and None not in rs, id="segmented"),
    pytest.param(lambda s: s.reset(NVCC, at=200_000), SEG,
                 lambda rs, _: len(rs) == 5 and sum(r.startswith("bytes=200000-") for r in rs) == 1,
                 id="segmented-reset-mid-segment"),
    pytest.param(lambda s: s.stall(NVCC, at=30_000, seconds=3), SEG,
                 lambda rs, _: len(rs) == 5 and sum(r.startswith("bytes=30000-") for r in rs) == 1,
                 id="segmented-stall"),
    pytest.param(lambda s: s.ignore_range(NVCC), SEG,
                 lambda rs, _: len(rs) == 2 and rs[0].startswith("bytes=0-") and rs[1] is None,
                 id="segmented-range-ignored-single-stream"),
    pytest.param(_seq(lambda s: s.ignore_range(NVCC), lambda s: s.reset(NVCC, at=200_000, times=2)), SEG,
                 lambda rs, _: rs[:2] == [rs[0], None] and rs[-1] in (None, "bytes=200000-") and len(rs) <= 3,
                 id="segmented-range-ignored-then-reset"),
    pytest.param(_seq(lambda s: s.unsized(NVCC), lambda s: s.reset(NVCC, at=100_000)), {},
                 lambda rs, _: rs == [None, "bytes=100000-"], id="unsized-body-cut-resumes"),
    pytest.param(_seq(lambda s: s.unsized(NVCC), lambda s: s.reset(NVCC, at=30_000)), SEG,
                 lambda rs, _: len(rs) == 5 and sum(r.startswith("bytes=30000-") for r in rs) == 1,
                 id="segmented-unsized-cut-mid-segment-resumes"),
    pytest.param(lambda s: s.status(NVCC, 416), {}, lambda rs, _: rs == [None, None], id="416-once"),
]


@pytest.mark.parametrize(("fault", "options", "check"), HEALS)
def test_fault_heals_and_install_completes(rig: Rig, fault: Script, options: dict[str, Any],
                                           check: Callable[[list[Any], list[float]], bool]) -> None:
    fault(rig.srv)
    rig.install("13.0", rig.transport(**options))
    assert_installed(rig.prefix, "13.0.1", rig.cache)
    assert rig.cache.archive_path(rig.sha).is_file()
    ranges = rig.nvcc_requests()
    assert check(ranges, list(rig.sleeps)), (ranges, list(rig.sleeps))


# id -> (fault, transport options, expected error, its fields, number of nvcc requests)
FAILS = [
    pytest.param(lambda s: s.status(NVCC, 404, times=None), {}, FetchError, {"status": 404}, 1, id="404"),
    pytest.param(lambda s: s.status(NVCC, 403, times=None), {}, FetchError, {"status": 403}, 1, id="403"),
    pytest.param(lambda s: s.status(NVCC, 503, times=None), {}, FetchError, {"status": None}, 5,
                 id="503-forever"),
    pytest.param(lambda s: s.reset(NVCC, at=100_000, times=None), {}, FetchError, {}, 5,
                 id="reset-at-the-same-byte"),
    pytest.param(lambda s: s.stall(NVCC, at=100_000, seconds=3, times=None),
                 {"retry": RetryPolicy(attempts=2, backoff=0.01)}, FetchError, {}, 2, id="stall-forever"),
    pytest.param(lambda s: s.flip(NVCC, at=4321), {}, IntegrityError, {"what": "sha256"}, 1,
                 id="flipped-byte"),
    pytest.param(lambda s: s.truncate(NVCC, to=100_000), {}, IntegrityError,
                 {"what": "size", "actual": 100_000}, 1, id="short-file-honest-length"),
    pytest.param(lambda s: s.truncate(NVCC, to=100_000, honest=False), {}, FetchError, {}, 5,
                 id="short-body-dishonest-length"),
    pytest.param(lambda s: s.pad(NVCC, b"\0" * 10), {}, IntegrityError, {"what": "size"}, 1,
                 id="body-longer-than-declared"),
    pytest.param(lambda s: s.always_partial(NVCC), {}, FetchError, {}, 5, id="206-without-range"),
    pytest.param(lambda s: s.status(NVCC, 416, times=None), {}, FetchError, {}, 5, id="416-forever"),
    pytest.param(_seq(lambda s: s.unsized(NVCC), lambda s: s.pad(NVCC, b"\0" * 10)), {}, IntegrityError,
                 {"what": "size"}, 1, id="unsized-body-longer-than-declared"),
    pytest.param(lambda s: s.pad(NVCC, b"\0" * 10), SEG, IntegrityError, {"what": "size"}, 1,
                 id="segmented-body-longer-than-declared"),
    pytest.param(lambda s: s.flip(NVCC, at=250_000), SEG, IntegrityError, {"what": "sha256"}, 4,
                 id="segmented-flipped-byte"),
    pytest.param(lambda s: s.status(NVCC, 404, times=None), SEG, FetchError, {"status": 404}, 1,
                 id="segmented-404"),
    pytest.param(lambda s: s.reset(NVCC, at=250_000, times=None), SEG, FetchError, {}, 8,
                 id="segmented-reset-at-the-same-byte"),
]


@pytest.mark.parametrize(("fault", "options", "error", "fields", "requests"), FAILS)
def test_fault_fails_cleanly_and_next_run_succeeds(rig: Rig, fault: Script, options: dict[str, Any],
                                                   error: type[Exception], fields: dict[str, Any],
                                                   requests: int) -> None:
    before = snapshot(rig.prefix)
    fault(rig.srv)
    with pytest.raises(error) as exc:
        rig.install("13.0", rig.transport(**options))
    for name, value in fields.items():
        assert getattr(exc.value, name) == value, (name, exc.value)
    message = str(exc.value)
    assert rig.srv.url(NVCC) in message  # names the archive and where it came from
    assert len(rig.nvcc_requests()) == requests, rig.nvcc_requests()
    assert_intact(rig.prefix, before, rig.cache, rig.sha)
    assert read_record(rig.prefix)["plan"]["release"] == "12.9.1"  # type: ignore[index]

    with rig.srv.lock:
        rig.srv.scripts.clear()
    rig.install("13.0")
    assert_installed(rig.prefix, "13.0.1", rig.cache)


def test_bad_bytes_from_the_mirror_fall_back_to_the_base(rig: Rig) -> None:
    """A mirror serving other bytes than the manifest lists is skipped for the next URL."""
    with FaultServer(rig.srv.root) as mirror:
        mirror.flip(NVCC, at=10)
        rig.install("13.0", bases=[mirror.base, rig.srv.base])
        assert len(mirror.requests_for(NVCC)) == 1
    assert rig.nvcc_requests() == [None]
    assert_installed(rig.prefix, "13.0.1", rig.cache)


def test_every_url_failing_reports_each(rig: Rig) -> None:
    before = snapshot(rig.prefix)
    with FaultServer(rig.srv.root) as mirror:
        mirror.status(NVCC, 404, times=None)
        rig.srv.status(NVCC, 410, times=None)
        with pytest.raises(FetchError) as exc:
            rig.install("13.0", bases=[mirror.base, rig.srv.base])
    assert mirror.url(NVCC) in str(exc.value) and rig.srv.url(NVCC) in str(exc.value)
    assert_intact(rig.prefix, before, rig.cache, rig.sha)
