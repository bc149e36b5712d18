"""Real ``python -m cudaredist install`` processes interrupted: Ctrl-C (SIGINT) wherever the install
waits ends it within about a second with exit code 130, the prefix as it was and no partial
download left; a download killed with the process (SIGKILL) is resumed by the next run with Range."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cudaredist.cache import Cache
from tests.faultserver import FaultServer
from tests.fetch.test_faults import NVCC, build_fault_mirror
from tests.invariants import assert_installed, leftovers, partials, snapshot
from tests.test_concurrency import install_cmd, install_here, kill, sha_of, start, wait_for

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX signals")

LATENCY = 1.5  # seconds from SIGINT to exit; measured well under a second on an idle machine


class BlackHole:
    """A TCP port that accepts connections and never sends a byte."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.held: list[socket.socket] = []
        self.accepted = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            self.accepted.set()

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.fixture
def blackhole() -> Iterator[BlackHole]:
    bh = BlackHole()
    yield bh
    bh.close()


@pytest.fixture(autouse=True, scope="module")
def _ctrl_c_reaches_the_installs() -> Iterator[None]:
    """A job started in the background by a non-interactive shell (``.ci/run &``) starts with SIGINT
    ignored, and a child inherits an ignored signal: then no install here could see Ctrl-C. A
    handler is reset to the default by exec, so with one here each install gets a terminal's Ctrl-C."""
    before = signal.getsignal(signal.SIGINT)
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultServer]:
    root = tmp_path_factory.mktemp("interrupt")
    build_fault_mirror(root / "mirror")
    with FaultServer(root / "mirror") as srv:
        yield srv


@pytest.fixture
def srv(served: FaultServer) -> FaultServer:
    with served.lock:
        served.scripts.clear()
        served.requests.clear()
    return served


def interrupt(proc: object, ready: Callable[[], bool], what: str) -> float:
    """Wait until ``ready()``, send SIGINT, and return the seconds until the process exited."""
    import subprocess

    assert isinstance(proc, subprocess.Popen)
    wait_for(ready, proc, what)
    time.sleep(0.3)  # let it settle into the wait
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    return time.monotonic() - t0


def part_size(cache: Path) -> int:
    """The largest partial download in ``cache`` (others may be committed meanwhile)."""
    sizes = [0]
    for p in (cache / "tmp").glob("*.part"):
        with contextlib.suppress(FileNotFoundError):
            sizes.append(p.stat().st_size)
    return max(sizes)


STAGES = ["stalled-read", "retry-backoff", "first-byte-never-comes", "prefix-lock", "cache-lock"]


@pytest.mark.parametrize("stage", STAGES)
def test_ctrl_c_exits_within_a_second(srv: FaultServer, blackhole: BlackHole, tmp_path: Path,
                                      stage: str) -> None:
    prefix, cache = tmp_path / "inst" / "cuda", tmp_path / "cache"
    install_here("12.9", prefix, cache, srv.base)
    before = snapshot(prefix)
    base = srv.base
    held: list[object] = []
    if stage == "stalled-read":
        srv.stall(NVCC, at=100_000, seconds=120)
        ready = lambda: part_size(cache) >= 100_000  # noqa: E731
    elif stage == "retry-backoff":
        srv.status(NVCC, 503, times=None, retry_after="50")
        ready = lambda: len(srv.requests_for(NVCC)) >= 1  # noqa: E731
    elif stage == "first-byte-never-comes":
        base = blackhole.base
        ready = blackhole.accepted.is_set
    elif stage == "prefix-lock":
        import filelock

        lock = filelock.FileLock(str(prefix.parent / ".cuda.cudaredist.lock"))
        lock.acquire()
        held.append(lock)
        ready = lambda: len(srv.requests_for("/redistrib_13.0.1.json")) >= 1  # noqa: E731
    else:
        # resolved through a cache of its own: the install finds no fresh manifest in its cache
        # (CUDAREDIST_INDEX_TTL) and asks the server, which says it has got that far
        sha = sha_of("cuda_nvcc", "13.0", tmp_path / "scratch-cache", srv.base)
        ctx = Cache(cache).lock(sha)
        ctx.__enter__()
        held.append(ctx)
        seen = len(srv.requests_for("/redistrib_13.0.1.json"))  # sha_of read it: the install's comes next
        ready = lambda: len(srv.requests_for("/redistrib_13.0.1.json")) > seen  # noqa: E731
    try:
        proc = start(*install_cmd("13.0", prefix, cache, base, "--lock-timeout", "120"))
        latency = interrupt(proc, ready, stage)
        _, err = proc.communicate()
    finally:
        for h in held:
            if hasattr(h, "release"):
                h.release()
            else:
                h.__exit__(None, None, None)  # type: ignore[attr-defined]
    print(f"{stage}: exit {latency:.3f}s after SIGINT")
    assert proc.returncode == 130, err
    assert latency < LATENCY, f"{stage}: {latency:.2f}s from SIGINT to exit"
    assert "Traceback" not in err and "interrupted" in err
    assert snapshot(prefix) == before
    assert leftovers(prefix) == []
    assert partials(Cache(cache)) == []  # no partial download, no marker


def test_killed_download_resumes_with_range(srv: FaultServer, tmp_path: Path) -> None:
    prefix, cache = tmp_path / "inst" / "cuda", tmp_path / "cache"
    srv.stall(NVCC, at=100_000, seconds=120)
    proc = start(*install_cmd("13.0", prefix, cache, srv.base))
    wait_for(lambda: part_size(cache) >= 100_000, proc, "the partial download")
    kill(proc)
    have = part_size(cache)
    assert have == 100_000
    with srv.lock:
        srv.scripts.clear()
        srv.requests.clear()
    p2 = start(*install_cmd("13.0", prefix, cache, srv.base))
    _, err = p2.communicate(timeout=60)
    assert p2.returncode == 0, err
    assert srv.ranges_for(NVCC) == [f"bytes={have}-"]  # only the missing bytes were asked for
    assert_installed(prefix, "13.0.1", Cache(cache))
    assert partials(Cache(cache)) == []


# -- fallback from a mirror that does not answer ------------------------------------------------------
@pytest.mark.e2e  # waits out a real timeout (slow)
@pytest.mark.parametrize("how", ["black-holed", "refusing"])
def test_unanswering_mirror_falls_back_within_seconds(srv: FaultServer, blackhole: BlackHole,
                                                      tmp_path: Path, how: str) -> None:
    """The mirror is asked first for the listing, the manifest and (through a lock) every archive."""
    if how == "black-holed":
        mirror = blackhole.base
    else:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        mirror = f"http://127.0.0.1:{s.getsockname()[1]}/"
        s.close()  # nothing listens there: connections are refused
    prefix, cache = tmp_path / "inst" / "cuda", tmp_path / "cache"
    t0 = time.monotonic()
    proc = start(*install_cmd("13.0", prefix, cache, srv.base, "--mirror", mirror))
    _, err = proc.communicate(timeout=120)
    took = time.monotonic() - t0
    print(f"{how} mirror, plain install: {took:.1f}s")
    assert proc.returncode == 0, err
    assert took < 30
    assert_installed(prefix, "13.0.1", Cache(cache))
    # through a lock every archive's URL list starts with the mirror
    lock = tmp_path / "cuda.lock"
    proc = start("lock", "13.0", "-p", "linux-x86_64", "--base-url", srv.base, "-o", str(lock))
    assert proc.communicate(timeout=60)[0] is not None and proc.returncode == 0
    with srv.lock:
        srv.requests.clear()
    t0 = time.monotonic()
    proc = start("install", "--lock", str(lock), "--prefix", str(tmp_path / "other"), "--platform",
                 "linux-x86_64", "--mirror", mirror, "--cache-dir", str(tmp_path / "cache2"), "-q")
    _, err = proc.communicate(timeout=120)
    took = time.monotonic() - t0
    print(f"{how} mirror, install --lock: {took:.1f}s")
    assert proc.returncode == 0, err
    assert took < 30
    assert len(srv.requests_for(NVCC)) == 1  # each archive once, from the base
    assert_installed(tmp_path / "other", "13.0.1", Cache(tmp_path / "cache2"))
