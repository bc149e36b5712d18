"""A Windows host in the suite: the official Windows CPython 3.13 under Wine, with this project's
wheel installed for win_amd64 (``.ci/windows-python.sh`` builds it in ``.winpy/``; ``.ci/run`` runs
that first). From Linux, this module runs under it

- the rest of the test suite (a test that cannot run on Windows or under Wine skips with the reason),
- ``tests/windows/test_windows_e2e.py``: the CLI as a Windows runner drives it, against a loopback
  mirror of real windows-x86_64 archives (built here, from NVIDIA's PyPI wheels).

Both run the installed wheel (``--import-mode=append``: this checkout's ``cudaredist`` is not on
their path), and this module first checks that the wheel is this checkout's code.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.realmirror import real_mirror_1302, real_wheel_cache  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(sys.platform == "win32",
                       reason="this is the driver; on Windows the suite runs itself"),
]


def windows_python() -> Path:
    given = os.environ.get("CUDAREDIST_WINDOWS_PYTHON")
    path = Path(given) if given else ROOT / ".winpy" / "python"
    if not path.is_file():
        why = (f"no Windows CPython at {path} (build it with .ci/windows-python.sh: the official "
               "Windows CPython 3.13 under Wine, with this project's wheel)")
        if os.environ.get("CI"):
            pytest.fail(why + "; CI is set and .ci/run should have built it")
        pytest.skip(why)
    return path


def winpath(path: Path) -> str:
    """The path a Wine process sees for a Linux path (Wine maps Z: to /)."""
    return "Z:" + str(path.absolute()).replace("/", "\\")


def _digests(files: list[tuple[str, Path]]) -> dict[str, str]:
    return {rel: hashlib.sha256(p.read_bytes()).hexdigest() for rel, p in files}


def _host_env() -> dict[str, str]:
    """The Linux environment minus what would steer the Windows side (its own conftest isolates the rest)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("CUDAREDIST_", "CUDA_", "PYTEST_", "GITHUB_")) and k != "CUDA_HOME"}


@pytest.fixture(scope="module")
def winpy() -> Path:
    py = windows_python()
    # The wheel in it must be this checkout: a stale .winpy would test old code.
    site = py.parent / "prefix" / "drive_c" / "py313" / "Lib" / "site-packages" / "cudaredist"
    ours = _digests([(p.relative_to(ROOT / "cudaredist").as_posix(), p)
                     for p in (ROOT / "cudaredist").rglob("*.py")])
    theirs = (_digests([(p.relative_to(site).as_posix(), p) for p in site.rglob("*.py")])
              if site.is_dir() else {})
    stale = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
    assert not stale, (f"the wheel in {py.parent} is not this checkout's code "
                       f"({', '.join(stale[:5])} differ): rebuild it with .ci/windows-python.sh")
    return py


# Wine's own server can die under load ("wineserver64: server/sock.c:1331: sock_poll_event: Assertion
# `sock->obj.ops == &sock_ops' failed", or "wineserver crashed, please enable coredumps", each seen in a
# fresh-clone CI run): python.exe is then a zombie whose threads never end, and the run would wait out
# its whole limit. Such a run is ended at once and run again, once; a second crash fails with what both
# printed.
WINESERVER_DIED = re.compile(r"wineserver\S*: .*Assertion .* failed|wineserver crashed")


def _pytest(py: Path, args: list[str], env: dict[str, str], timeout: float) -> tuple[str, dict[str, int]]:
    """Run pytest under the Windows CPython. Its stdin is /dev/null (inherited, it would be the
    xdist worker's channel), its output a file (Wine's services keep a pipe open after the run), and
    a test hung longer than 300 s dumps every thread's stack there before the run is given up."""
    cmd = [str(py), "-m", "pytest", "-p", "no:cacheprovider", "--import-mode=append", "-rfEs",
           "--durations=0", "--durations-min=0.5", "-o", "faulthandler_timeout=300", *args]
    crashed = ""
    for _attempt in range(2):
        rc, out = _run_wine(cmd, env, timeout)
        if rc != "wineserver died":
            break
        crashed += f"{out[-4000:]}\n[wineserver died: this run was ended and started again]\n"
    summary = out.strip().splitlines()[-1] if out.strip() else ""
    words = r"(\d+) (passed|failed|skipped|error|errors|xfailed|deselected)"
    counts = {k: int(n) for n, k in re.findall(words, summary)}
    print(crashed + out[-20000:])
    assert rc is not None, f"under the Windows CPython: no end after {timeout:g}s\n{out[-12000:]}"
    assert rc == 0, f"under the Windows CPython: {summary} ({rc})\n{crashed}{out[-12000:]}"
    return out, counts


def _run_wine(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[int | str | None, str]:
    """(the exit status, None past ``timeout`` or "wineserver died"; the output)."""
    import signal
    import time

    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        ends = time.monotonic() + timeout
        rc: int | str | None = None
        fd, seen, said = log.fileno(), 0, ""
        while (rc := proc.poll()) is None and time.monotonic() < ends:
            time.sleep(2)
            # what was written since the last look (with the end of the one before, which a line may
            # straddle); pread: the child writes through the same file offset, which a seek would move
            new = os.pread(fd, os.fstat(fd).st_size - seen, seen)
            seen += len(new)
            said = said[-1000:] + new.decode("utf-8", errors="replace")
            if WINESERVER_DIED.search(said):
                rc = "wineserver died"
                break
        if not isinstance(rc, int):  # past the limit, or Wine is gone: its processes end here
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            wineserver = Path("/usr/lib/wine/wineserver64")
            if wineserver.exists():  # what the session's Wine still runs (services, devices)
                prefix = Path(cmd[0]).parent / "prefix"  # .winpy/python's WINEPREFIX
                subprocess.run([str(wineserver), "-k"], env={**env, "WINEPREFIX": str(prefix)},
                               capture_output=True, timeout=60, check=False)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        log.seek(0)
        return rc, log.read()


@pytest.mark.timeout(1600)  # the run's own 1500 s limit decides (a loaded machine needs > 900 s)
def test_the_suite_under_the_windows_cpython(winpy: Path) -> None:
    """Every module except the end-to-end ones (tests/windows runs next; tests/e2e need Linux
    toolchains or build mirrors this driver already builds)."""
    out, counts = _pytest(winpy, ["-q", "-m", "not e2e", "tests", "--ignore=tests/windows",
                                  "--ignore=tests/e2e", "--ignore=tests/test_windows_host.py"],
                          _host_env(), timeout=1500)
    assert counts.get("passed", 0) > 500, counts
    # a skip always says why
    for line in out.splitlines():
        if line.startswith("SKIPPED"):
            assert re.search(r"\): \S|: \S", line), line


@pytest.mark.timeout(1600)
def test_the_windows_end_to_end_matrix(winpy: Path, real_mirror_1302: Path,  # noqa: F811
                                       real_wheel_cache: Path) -> None:  # noqa: F811
    env = _host_env() | {"CUDAREDIST_WINDOWS_E2E_MIRROR": winpath(real_mirror_1302),
                         "CUDAREDIST_WINDOWS_E2E_CACHE": winpath(real_wheel_cache)}
    if os.environ.get("CI"):
        env["CI"] = os.environ["CI"]
    # (test_hostcc_windows.py has a driver of its own, below)
    out, counts = _pytest(winpy, ["-v", "tests/windows", "--ignore=tests/windows/test_hostcc_windows.py"],
                          env, timeout=1500)
    assert counts.get("failed", 0) == 0 and counts.get("passed", 0) >= 7, counts


@pytest.mark.timeout(1600)
@pytest.mark.pypi
def test_the_msvc_toolset_choice_under_the_windows_cpython(winpy: Path, tmp_path: Path,
                                                           real_wheel_cache: Path) -> None:  # noqa: F811
    """tests/windows/test_hostcc_windows.py: the fake Visual Studio (MinGW-built stand-ins, so Wine can
    wait on them) and real windows-x86_64 CUDA 13.0 and 13.4 trees (the nvcc profile from NVIDIA's
    wheels), built here and named in CUDAREDIST_WINDOWS_HOSTCC."""
    from tests.fakevs import build_layout
    from tests.realmirror import host_free_env, run_cudaredist

    trees = {}
    for train in ("13.0", "13.4"):
        prefix = tmp_path / f"cuda-{train}"
        r = run_cudaredist("install", train, "--source", "pypi", "--platform", "windows-x86_64", "--prefix",
                           str(prefix), "-q", env=host_free_env(real_wheel_cache))
        assert r.returncode == 0, r.stderr
        trees[train] = winpath(prefix)
    layout = build_layout(tmp_path / "vs", wine=True, winpath=winpath)
    config = tmp_path / "hostcc.json"
    config.write_text(json.dumps({"layout": layout, "trees": trees}), encoding="utf-8")
    env = _host_env() | {"CUDAREDIST_WINDOWS_HOSTCC": winpath(config)}
    if os.environ.get("CI"):
        env["CI"] = os.environ["CI"]
    out, counts = _pytest(winpy, ["-v", "tests/windows/test_hostcc_windows.py"], env, timeout=1500)
    assert counts.get("failed", 0) == 0 and counts.get("passed", 0) == 5, counts


@pytest.mark.parametrize("death", [
    pytest.param("wineserver64: server/sock.c:1331: sock_poll_event: Assertion \\`x' failed.",
                 id="assertion"),
    pytest.param("wineserver crashed, please enable coredumps (ulimit -c unlimited) and restart.",
                 id="crashed"),
])
def test_a_run_whose_wineserver_died_is_ended_and_run_again(tmp_path: Path, death: str) -> None:
    """The driver's own recovery, with a stand-in for .winpy/python: a run prints wineserver's
    last words and hangs, as real ones did; it is ended within seconds and run again, whose result
    is the answer. Dead twice is a failure that shows both runs."""
    import time

    runs = tmp_path / "runs"
    fake = tmp_path / "python"
    # the first $DIES runs crash (0: none)
    fake.write_text(f"""#!/bin/sh
echo run >> {runs}
if [ "$(wc -l < {runs})" -le "$DIES" ]; then
  echo "....{death}"
  sleep 600
fi
echo "3 passed in 0.10s"
""")
    fake.chmod(0o755)
    started = time.monotonic()
    out, counts = _pytest(fake, [], {"PATH": os.environ["PATH"], "DIES": "1"}, timeout=120)
    assert counts == {"passed": 3} and runs.read_text().count("run") == 2, out
    assert time.monotonic() - started < 60
    runs.unlink()
    with pytest.raises(AssertionError, match="wineserver died"):
        _pytest(fake, [], {"PATH": os.environ["PATH"], "DIES": "2"}, timeout=120)
    assert runs.read_text().count("run") == 2
