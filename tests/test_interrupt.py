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

from cudaredist.cache.store import Cache
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


# -- what Ctrl-C leaves in the prefix, and what the message says of it --------------------------------
def _cli(*args: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from cudaredist.cli import app

    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stderr


def _installed(mirror: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    prefix = tmp_path / "inst" / "cuda"
    args = ["install", "13.0", "--prefix", str(prefix), "--platform", "linux-x86_64", "--base-url",
            str(mirror), "-q"]
    code, err = _cli(*args)
    assert code == 0, err
    return prefix, args


def _ctrl_c_on(monkeypatch: pytest.MonkeyPatch, name: str, when: Callable[[tuple[object, ...]], bool],
               *, real: bool = False) -> list[int]:
    """Make ``cudaredist.fsops.<name>`` meet Ctrl-C on the call ``when`` picks: raised in place of it,
    or (``real``) a real SIGINT sent just before it runs. Returns the calls counter."""
    from cudaredist import fsops

    calls = [0]
    original = getattr(fsops, name)

    def patched(*args: object) -> object:
        calls[0] += 1
        if when(args):
            if not real:
                raise KeyboardInterrupt
            os.kill(os.getpid(), signal.SIGINT)  # delivered at the next bytecode: inside this call
        return original(*args)

    monkeypatch.setattr(fsops, name, patched)
    return calls


def test_ctrl_c_during_uninstall_puts_every_file_back(mirror: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the files are moved out: they go back, the message says so, and the tree
    verifies; the next install is a true no-op and an uninstall then removes it all."""
    prefix, args = _installed(mirror, tmp_path)
    before = snapshot(prefix)
    seen = [0]

    def fifth_file(_args: tuple[object, ...]) -> bool:
        seen[0] += 1
        return seen[0] == 5

    _ctrl_c_on(monkeypatch, "rename", fifth_file)
    code, err = _cli("uninstall", "--prefix", str(prefix))
    monkeypatch.undo()
    assert code == 130, err
    assert f"interrupted; nothing was removed: {prefix} was restored as it was" in err
    assert snapshot(prefix) == before
    assert _cli("verify", "--prefix", str(prefix))[0] == 0
    code, err = _cli(*args[:-1])
    assert code == 0 and "already installed" in err, err
    code, err = _cli("uninstall", "--prefix", str(prefix))
    assert code == 0 and not prefix.exists(), err


def test_a_killed_uninstall_is_put_back_before_the_no_op(mirror: Path, tmp_path: Path) -> None:
    """A killed uninstall (SIGKILL: no handler runs) left files moved out and the record in place:
    the next install puts them back before it answers "already installed"."""
    prefix, args = _installed(mirror, tmp_path)
    before = snapshot(prefix)
    trash = prefix / ".cudaredist" / "removing-1234abcd"
    for rel in ("bin/nvcc", "include/cuda_runtime.h", "lib/libcudart.so"):
        (trash / rel).parent.mkdir(parents=True, exist_ok=True)
        os.rename(prefix / rel, trash / rel)
    code, err = _cli(*args[:-1])
    assert code == 0, err
    assert "put back 3 files an interrupted uninstall had moved out" in err and "already installed" in err
    assert snapshot(prefix) == before
    assert _cli("verify", "--prefix", str(prefix))[0] == 0


def test_ctrl_c_after_the_swap_says_the_new_tree_is_in_place(mirror: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the previous tree is deleted (the new one is in place): said as such, the tree
    verifies, and the next run removes what was left of the previous tree."""
    prefix, args = _installed(mirror, tmp_path)
    _ctrl_c_on(monkeypatch, "rmtree", lambda a: "-gone-" in str(a[0]))
    code, err = _cli(*args, "--reinstall")
    monkeypatch.undo()
    assert code == 130, err
    assert (f"interrupted after the new tree was swapped in: {prefix} holds CUDA 13.0.1 (linux-x86_64, "
            "nvcc), complete") in err
    assert "nothing was changed" not in err
    assert _cli("verify", "--prefix", str(prefix))[0] == 0
    assert _cli(*args)[0] == 0
    assert leftovers(prefix) == []


def test_ctrl_c_during_the_swap_waits_for_it(mirror: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A real SIGINT between moving the old tree aside and moving the new one in: the swap
    finishes first (the prefix is never missing), and the message says the new tree is in."""
    prefix, args = _installed(mirror, tmp_path)
    _ctrl_c_on(monkeypatch, "rename", lambda a: "-stage-" in str(a[0]), real=True)
    code, err = _cli(*args, "--reinstall")
    monkeypatch.undo()
    assert code == 130, err
    assert f"interrupted after the new tree was swapped in: {prefix} holds CUDA 13.0.1" in err
    assert prefix.is_dir() and _cli("verify", "--prefix", str(prefix))[0] == 0


def test_ctrl_c_before_the_swap_says_the_prefix_was_left_as_it_was(
        mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix, args = _installed(mirror, tmp_path)
    before = snapshot(prefix)
    _ctrl_c_on(monkeypatch, "rename", lambda a: "-stage-" in str(a[0]))
    code, err = _cli(*args, "--reinstall")
    monkeypatch.undo()
    assert code == 130, err
    assert f"interrupted; {prefix} was left as it was (CUDA 13.0.1 was not installed)" in err
    assert snapshot(prefix) == before and leftovers(prefix) == []


def test_sigterm_unwinds_as_ctrl_c_does(srv: FaultServer, tmp_path: Path) -> None:
    """A cancelled CI job (SIGTERM) mid-download: exit 143 within a second, the prefix as it was,
    no staging tree and no partial download left."""
    prefix, cache = tmp_path / "inst" / "cuda", tmp_path / "cache"
    install_here("12.9", prefix, cache, srv.base)
    before = snapshot(prefix)
    srv.stall(NVCC, at=100_000, seconds=120)
    proc = start(*install_cmd("13.0", prefix, cache, srv.base))
    wait_for(lambda: part_size(cache) >= 100_000, proc, "the partial download")
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and f"interrupted; {prefix} was left as it was" in err
    assert snapshot(prefix) == before
    assert leftovers(prefix) == []
    assert partials(Cache(cache)) == []


def test_ctrl_c_between_managed_trains_names_the_one_installed(mirror: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "toolkits"
    swaps = [0]

    def second_swap(a: tuple[object, ...]) -> bool:
        swaps[0] += "-stage-" in str(a[0])
        return swaps[0] == 2 and "-stage-" in str(a[0])

    _ctrl_c_on(monkeypatch, "rename", second_swap)
    code, err = _cli("install", "13.0", "12.9", "--install-dir", str(root), "--platform", "linux-x86_64",
                     "--base-url", str(mirror), "-q")
    monkeypatch.undo()
    assert code == 130, err
    installed = sorted(p.name for p in root.iterdir() if p.name.startswith("cuda-") and p.is_dir())
    assert len(installed) == 1, installed
    assert f"installed before it: CUDA {installed[0].split('-')[1]} into {root / installed[0]}" in err
    assert "was left as it was" in err


def _ctrl_c_in_the_train_links(monkeypatch: pytest.MonkeyPatch) -> None:
    from cudaredist import managed

    def interrupted(*_args: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(managed, "update_train_links", interrupted)


def test_ctrl_c_while_the_train_links_are_updated_says_the_toolkit_is_installed(
        mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The toolkit is in place when Ctrl-C reaches the train links: said so (never "nothing was
    changed"), and the next install puts the links right."""
    root = tmp_path / "toolkits"
    args = ["install", "13.0", "--install-dir", str(root), "--platform", "linux-x86_64", "--base-url",
            str(mirror), "-q"]
    _ctrl_c_in_the_train_links(monkeypatch)
    code, err = _cli(*args)
    monkeypatch.undo()
    assert code == 130, err
    assert "nothing was changed" not in err
    tk = root / "cuda-13.0.1-linux-x86_64"
    assert f"interrupted while updating the train links of {root}" in err
    assert f"installed before it: CUDA 13.0.1 into {tk}" in err
    assert _cli("verify", "--prefix", str(tk))[0] == 0
    assert not (root / "cuda-13.0-linux-x86_64").exists()
    code, err = _cli(*args[:-1])
    assert code == 0 and "already installed" in err, err
    assert os.readlink(root / "cuda-13.0-linux-x86_64") == tk.name


def test_ctrl_c_after_an_uninstall_names_what_was_removed(mirror: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "toolkits"
    code, err = _cli("install", "13.0", "--install-dir", str(root), "--platform", "linux-x86_64",
                     "--base-url", str(mirror), "-q")
    assert code == 0, err
    tk = root / "cuda-13.0.1-linux-x86_64"
    _ctrl_c_in_the_train_links(monkeypatch)
    code, err = _cli("uninstall", "13.0", "--install-dir", str(root))
    monkeypatch.undo()
    assert code == 130, err
    assert "nothing was changed" not in err and not tk.exists()
    assert f"interrupted while updating the train links of {root}" in err
    assert f"removed before it: {tk}" in err


def test_sigterm_after_an_uninstall_keeps_its_exit_status(mirror: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM where the test above has Ctrl-C: what was removed is named, and the status is still
    SIGTERM's 143 (once a step had said what it left, adding what the command had done made it 130)."""
    from cudaredist import managed
    from cudaredist.interrupts import Terminated

    root = tmp_path / "toolkits"
    code, err = _cli("install", "13.0", "--install-dir", str(root), "--platform", "linux-x86_64",
                     "--base-url", str(mirror), "-q")
    assert code == 0, err
    tk = root / "cuda-13.0.1-linux-x86_64"

    def terminated(*_args: object) -> object:
        raise Terminated()

    monkeypatch.setattr(managed, "update_train_links", terminated)
    code, err = _cli("uninstall", "13.0", "--install-dir", str(root))
    monkeypatch.undo()
    assert code == 143, err
    assert f"interrupted while updating the train links of {root}" in err
    assert f"removed before it: {tk}" in err


def test_a_real_ctrl_c_during_uninstall_leaves_the_tree_whole_or_gone(tmp_path: Path) -> None:
    """SIGINT to a real `cudaredist uninstall` the moment it starts moving files out: either every
    file went back (and the message says so) or the uninstall had committed and completed (and the
    message says that): never a half-removed tree under its record."""
    import subprocess

    from tests.archives import MirrorArchive, build_mirror

    mirror, prefix = tmp_path / "mirror", tmp_path / "inst" / "cuda"
    build_mirror(mirror, "13.0.1", [MirrorArchive("cuda_cccl", "linux-x86_64", "13.0.85", {
        f"include/many/{i // 100}/h{i}.h": b"x" for i in range(4000)})])
    moving = lambda: any((prefix / ".cudaredist").glob("removing-*"))  # noqa: E731
    for _attempt in range(3):  # a loaded machine may let a whole uninstall pass between two looks
        code, err = _cli("install", "13.0", "--prefix", str(prefix), "--platform", "linux-x86_64", "--only",
                         "--component", "cuda_cccl", "--base-url", str(mirror), "-q")
        assert code == 0, err
        before = snapshot(prefix)
        proc = start("uninstall", "--prefix", str(prefix))
        while proc.poll() is None and not moving():
            time.sleep(0.001)
        if proc.poll() is None:
            break
        proc.communicate()
    else:
        pytest.fail("three uninstalls finished before SIGINT could be sent")
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    print(f"uninstall: exit {proc.returncode}: {err.strip()}")
    assert "Traceback" not in err, err
    if (prefix / ".cudaredist" / "record.json").exists():
        assert proc.returncode == 130 and f"{prefix} was restored as it was" in err, err
        assert snapshot(prefix) == before
    else:
        assert proc.returncode in (0, 130), err
        assert proc.returncode == 0 or "it was completed first" in err, err
        assert not prefix.exists()


def test_ctrl_c_while_the_main_thread_waits_for_workers_is_raised_once_the_wait_is_out() -> None:
    """Raised inside ``concurrent.futures.wait``, KeyboardInterrupt can come while the wait takes back
    a lock that a finishing worker holds; the worker's release then fails ("release unlocked lock",
    a traceback on stderr after Ctrl-C: stalled-read, CI, stop 42). The main thread's waits go
    through ``interrupts.wait_first``, which holds the signal until the wait has returned."""
    import traceback
    from concurrent.futures import ThreadPoolExecutor

    from cudaredist import interrupts

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # xdist's workers ignore it
    release = threading.Event()
    try:
        with ThreadPoolExecutor(1) as pool:
            busy = pool.submit(release.wait, 10)
            main = threading.main_thread().ident
            assert main is not None
            threading.Timer(0.05, signal.pthread_kill, args=(main, signal.SIGINT)).start()
            with pytest.raises(KeyboardInterrupt) as info:
                for _ in range(50):
                    interrupts.wait_first({busy}, timeout=0.2)
            release.set()
            assert busy.result() is True  # the worker finished cleanly
    finally:
        release.set()
        signal.signal(signal.SIGINT, previous)
    where = traceback.extract_tb(info.tb)[-1]
    assert where.filename == interrupts.__file__, f"raised inside {where.filename}:{where.lineno}"
    assert signal.getsignal(signal.SIGINT) is previous


def test_results_are_in_order_and_the_first_failure_in_that_order_is_raised() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from cudaredist import interrupts

    def slow_square(n: int) -> int:
        time.sleep(0.01 * (5 - n))  # finishing in reverse order
        if n == 3:
            raise ValueError(n)
        return n * n

    with ThreadPoolExecutor(4) as pool:
        assert interrupts.results([pool.submit(slow_square, n) for n in (0, 1, 2, 4)]) == [0, 1, 4, 16]
        with pytest.raises(ValueError, match="3"):
            interrupts.results([pool.submit(slow_square, n) for n in range(5)])
        done = list(interrupts.as_done([pool.submit(slow_square, n) for n in (0, 4)]))
        assert [f.result() for f in done] == [16, 0]  # as each completes
