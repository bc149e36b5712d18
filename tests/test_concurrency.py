"""Real ``python -m cudaredist`` processes: SIGKILLed at each stage of an install, several at once
on one prefix and one cache, and stopped by a held lock. The prefix is always as it was or
complete, the next run cleans up, and the cache is never poisoned."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import filelock
import pytest

from cudaredist.cache.store import Cache
from cudaredist.fetch.transport import Transport
from cudaredist.install import Installer
from cudaredist.record import read_record
from cudaredist.sources.nvidia.index import Index
from tests.archives import NVCC_12, Members, MirrorArchive, build_mirror, resolve_plan, toolkit
from tests.faultserver import FaultServer
from tests.invariants import assert_installed, cache_problems, leftovers, snapshot

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL and POSIX process groups")

NVCC = "/cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-13.0.88-archive.tar.xz"
MANY = 2000  # files in 13.0.1's cuda_nvcc: extracting them takes long enough to be caught at it


def build_big_mirror(root: Path) -> None:
    """12.9.1: three tiny archives. 13.0.1: the toolkit, its cuda_nvcc with MANY small files."""
    old = [MirrorArchive(a.component, a.platform, a.version.replace("13.0.", "12.9."), a.members)
           for a in toolkit("linux-x86_64") if a.component in NVCC_12]
    build_mirror(root, "12.9.1", old)
    rnd = random.Random(2026)
    many: Members = {f"bin/many/{i // 100:02d}/f{i:04d}": rnd.randbytes(64) * 8 for i in range(MANY)}
    new = toolkit("linux-x86_64")
    new[0].members = {**new[0].members, **many}
    build_mirror(root, "13.0.1", new)


@dataclass(frozen=True)
class Served:
    srv: FaultServer

    @property
    def base(self) -> str:
        return self.srv.base


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("big")
    build_big_mirror(root / "mirror")
    with FaultServer(root / "mirror") as srv:
        yield Served(srv)


@pytest.fixture
def srv(served: Served) -> FaultServer:
    with served.srv.lock:
        served.srv.scripts.clear()
        served.srv.requests.clear()
    return served.srv


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "cudaredist", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def install_cmd(train: str, prefix: Path, cache: Path, base: str, *extra: str) -> list[str]:
    return ["install", train, "--prefix", str(prefix), "--platform", "linux-x86_64", "--base-url", base,
            "--cache-dir", str(cache), "-q", *extra]


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> tuple[int, str]:
    p = start(*args, env=env)
    _, err = p.communicate(timeout=timeout)
    return p.returncode, err


def install_here(train: str, prefix: Path, cache: Path, base: str) -> None:
    """A quick in-process install to set the scene."""
    with Transport() as t:
        plan = resolve_plan(Index(t, Cache(cache)), train, bases=[base], platform="linux-x86_64",
                            profile="nvcc")
        Installer(t, Cache(cache), lock_timeout=30).install(plan, prefix)


def sha_of(component: str, train: str, cache: Path, base: str) -> str:
    with Transport() as t:
        plan = resolve_plan(Index(t, Cache(cache)), train, bases=[base], platform="linux-x86_64",
                            profile="nvcc")
    return next(i.archive.sha256 for i in plan.items if i.component == component)


def wait_for(cond: Callable[[], bool], proc: subprocess.Popen[str], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"the install ended ({proc.returncode}) before {what}: {proc.stderr.read()}"
                                 if proc.stderr else f"the install ended before {what}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL


def staged_files(prefix: Path) -> int:
    return sum(len(files) for stage in leftovers(prefix) if "-stage-" in stage
               for _, _, files in os.walk(prefix.parent / stage))


# -- SIGKILL at each stage ---------------------------------------------------------------------------
def test_kill_while_downloading(srv: FaultServer, tmp_path: Path) -> None:
    prefix, cache = tmp_path / "inst" / "cuda", tmp_path / "cache"
    install_here("12.9", prefix, cache, srv.base)
    before = snapshot(prefix)
    srv.stall(NVCC, at=100_000, seconds=60)  # the transfer hangs mid-body (of ~139 kB) until the kill

    proc = start(*install_cmd("13.0", prefix, cache, srv.base))
    tmp = cache / "tmp"
    wait_for(lambda: any(p.stat().st_size > 0 for p in tmp.glob("*.part")) if tmp.is_dir() else False,
             proc, "the download to start writing")
    kill(proc)

    assert snapshot(prefix) == before
    assert any("-stage-" in name for name in leftovers(prefix))  # killed inside the transaction
    assert list(tmp.glob("*.part"))  # the partial download is all that is left of it
    assert not Cache(cache).archive_path(sha_of("cuda_nvcc", "13.0", cache, srv.base)).exists()

    with srv.lock:
        srv.scripts.clear()
    code, err = run(*install_cmd("13.0", prefix, cache, srv.base))
    assert code == 0, err
    assert_installed(prefix, "13.0.1", Cache(cache))  # no staging leftovers, no partials


def test_kill_while_extracting(srv: FaultServer, tmp_path: Path) -> None:
    prefix, cache = tmp_path / "inst" / "cuda", tmp_path / "cache"
    install_here("12.9", prefix, cache, srv.base)
    before = snapshot(prefix)

    proc = start(*install_cmd("13.0", prefix, cache, srv.base))
    wait_for(lambda: staged_files(prefix) > 50, proc, "extraction to be under way")
    kill(proc)

    extracted = staged_files(prefix)
    assert 50 < extracted < MANY, extracted  # caught in the middle of cuda_nvcc
    assert snapshot(prefix) == before
    assert read_record(prefix)["plan"]["release"] == "12.9.1"  # type: ignore[index]

    code, err = run(*install_cmd("13.0", prefix, cache, srv.base))
    assert code == 0, err
    assert_installed(prefix, "13.0.1", Cache(cache))


def test_kill_while_swapping(srv: FaultServer, tmp_path: Path) -> None:
    """Caught while the replaced tree (MANY files) is being deleted after the swap."""
    prefix, cache = tmp_path / "inst" / "cuda", tmp_path / "cache"
    install_here("13.0", prefix, cache, srv.base)

    proc = start(*install_cmd("12.9", prefix, cache, srv.base))
    def moved_aside() -> bool:  # -old- until the swap finished, then -gone- while it is deleted
        return any("-old-" in name or "-gone-" in name for name in leftovers(prefix))

    wait_for(moved_aside, proc, "the swap")
    kill(proc)

    # Between the two renames the prefix is briefly absent; otherwise it is the new tree.
    assert moved_aside()
    if os.path.lexists(prefix):
        rec = read_record(prefix)
        assert rec is not None and rec["plan"]["release"] == "12.9.1"
    code, err = run(*install_cmd("12.9", prefix, cache, srv.base))
    assert code == 0, err
    assert_installed(prefix, "12.9.1", Cache(cache))


# -- several at once ---------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", [
    pytest.param(("a", "a", "a", "a"), id="one-prefix"),
    pytest.param(("a", "b", "a", "b"), id="two-prefixes"),
])
def test_concurrent_installs_share_prefix_and_cache(srv: FaultServer, tmp_path: Path,
                                                    layout: tuple[str, ...]) -> None:
    cache = tmp_path / "cache"
    srv.stall(NVCC, at=100_000, seconds=0.3, times=None)  # the first downloader holds the entry a while
    trains = ["13.0", "12.9", "13.0", "12.9"]
    procs = [start(*install_cmd(t, tmp_path / p / "cuda", cache, srv.base, "--lock-timeout", "120"))
             for t, p in zip(trains, layout, strict=True)]
    results = [(p.wait(timeout=120), p.communicate()[1]) for p in procs]
    assert [code for code, _ in results] == [0, 0, 0, 0], results

    for p in sorted(set(layout)):
        prefix = tmp_path / p / "cuda"
        code, err = run("verify", "--prefix", str(prefix))
        assert code == 0, err
        rec = read_record(prefix)
        assert rec is not None and rec["plan"]["release"] in ("13.0.1", "12.9.1")
        assert leftovers(prefix) == []
    assert cache_problems(Cache(cache)) == []
    assert len(srv.requests_for(NVCC)) == 1  # downloaded once, then found in the cache


def test_held_lock_gives_a_busy_error_after_the_timeout(srv: FaultServer, tmp_path: Path) -> None:
    prefix, cache = tmp_path / "inst" / "cuda", tmp_path / "cache"
    install_here("12.9", prefix, cache, srv.base)
    before = snapshot(prefix)
    with filelock.FileLock(str(prefix.parent / ".cuda.cudaredist.lock")):
        t0 = time.monotonic()
        flag = start(*install_cmd("13.0", prefix, cache, srv.base, "--lock-timeout", "0.5"))
        env = start(*install_cmd("13.0", prefix, cache, srv.base), env={"CUDAREDIST_LOCK_TIMEOUT": "0.5"})
        results = [(p.wait(timeout=30), p.communicate()[1]) for p in (flag, env)]
        assert time.monotonic() - t0 < 15
    for code, err in results:
        assert code == 75, err
        assert "is busy" in err and "--lock-timeout" in err and "Traceback" not in err
    assert snapshot(prefix) == before and leftovers(prefix) == []

    code, err = run(*install_cmd("13.0", prefix, cache, srv.base, "--lock-timeout", "0.5"))
    assert code == 0, err
    assert_installed(prefix, "13.0.1", Cache(cache))


def test_racing_installs_with_a_short_timeout_finish_or_report_busy(srv: FaultServer, tmp_path: Path) -> None:
    prefix, cache = tmp_path / "inst" / "cuda", tmp_path / "cache"
    trains = ["13.0", "12.9", "13.0", "12.9"]
    procs = [start(*install_cmd(t, prefix, cache, srv.base, "--lock-timeout", "0.05")) for t in trains]
    results = [(p.wait(timeout=120), p.communicate()[1]) for p in procs]
    codes = [code for code, _ in results]
    assert set(codes) <= {0, 75} and 0 in codes, results
    assert all("is busy" in err for code, err in results if code == 75)
    code, err = run("verify", "--prefix", str(prefix))
    assert code == 0, err
    assert leftovers(prefix) == [] and cache_problems(Cache(cache)) == []
