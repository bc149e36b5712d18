"""The console script's start and end: start-up's objects frozen for the collector; at the end the
exit handlers run, the output is all there, the exit code is the command's, and the interpreter is not
torn down (the process ends once the command is done)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from cudaredist import __version__
from tests.archives import build_mirror, toolkit


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, check=False)


def test_a_finished_command_ends_the_process_without_teardown() -> None:
    r = _python("""
        import atexit, gc, sys
        from cudaredist.entry import YOUNG, main

        class Torn:
            def __del__(self):
                print("torn down", flush=True)

        kept = Torn()  # freed only by the interpreter's teardown
        atexit.register(lambda: print("exit handler ran"))
        # start-up's objects are frozen (the collector no longer looks at them), and it runs again,
        # its youngest generation collected less often
        atexit.register(lambda: print(gc.get_freeze_count() > 10_000, gc.isenabled(),
                                      gc.get_threshold()[0] == YOUNG > 700))
        sys.argv = ["cudaredist", "--version"]
        main()
        """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"cudaredist {__version__}", "True True True", "exit handler ran"]


def test_the_exit_code_and_message_are_the_commands() -> None:
    r = _python("""
        import sys
        from cudaredist.entry import main

        sys.argv = ["cudaredist", "install", "--prefix", "x"]
        main()
        """)
    assert r.returncode == 2
    assert r.stderr.startswith("error: give a TRAIN")
    r = subprocess.run([sys.executable, "-m", "cudaredist", "install", "13.0", "--jobs", "0"],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2 and "--jobs" in r.stderr


def test_all_output_is_flushed_through_a_pipe() -> None:
    r = _python("""
        import sys
        from cudaredist.entry import leave

        sys.stdout.write("x" * 3_000_000)
        sys.stderr.write("e" * 100_000)
        leave(5)
        """)
    assert r.returncode == 5
    assert len(r.stdout) == 3_000_000 and len(r.stderr) == 100_000


def test_a_thread_still_running_gets_the_ordinary_exit() -> None:
    r = _python("""
        import threading, time
        from cudaredist.entry import leave

        def late():
            time.sleep(0.3)
            print("thread done", flush=True)

        threading.Thread(target=late).start()
        leave(3)
        """)
    assert r.returncode == 3
    assert r.stdout == "thread done\n"


# -- the exit path when stdout or stderr cannot be written, and a signal before the command runs ------
posix = pytest.mark.skipif(os.name == "nt", reason="POSIX descriptors and signals")


def _cudaredist(*args: str, close: int | None = None, **kw: Any) -> subprocess.CompletedProcess[str]:
    """``python -m cudaredist ARGS``, with descriptor ``close`` closed (``>&-``, ``2>&-``)."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.run([sys.executable, "-m", "cudaredist", *args], text=True, timeout=120, check=False,
                          preexec_fn=None if close is None else lambda: os.close(close), **kw)


@posix
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full (a disk that is always full)")
def test_a_full_stdout_is_one_paragraph_and_exit_1() -> None:
    with open("/dev/full", "w") as full:
        r = _cudaredist("--version", stdout=full)
    assert r.returncode == 1
    assert r.stderr.startswith("error: cannot write to stdout: No space left on device")
    assert len(r.stderr.splitlines()) == 1


@posix
def test_a_closed_stdout_fails_a_command_whose_output_is_its_point_and_a_closed_stderr_fails_none(
        tmp_path: Path) -> None:
    build_mirror(tmp_path / "mirror", "13.0.1", toolkit("linux-x86_64"))
    install = ("install", "13.0", "--platform", "linux-x86_64", "--prefix", str(tmp_path / "cuda"),
               "--base-url", str(tmp_path / "mirror"), "--cache-dir", str(tmp_path / "cache"))
    for _ in range(2):  # an install, then a no-op, with nowhere to say how it went
        r = _cudaredist(*install, close=2)
        assert r.returncode == 0, r.stdout
    assert (tmp_path / "cuda" / "bin").is_dir()
    r = _cudaredist("env", "--prefix", str(tmp_path / "cuda"), close=1)
    assert r.returncode == 1
    assert r.stderr.startswith("error: cannot write to stdout: Bad file descriptor")
    assert len(r.stderr.splitlines()) == 1


@posix
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize("moment", ["importing the command line", "after parsing, before the command"])
def test_a_signal_before_the_command_runs_ends_it_with_128_plus_n(signum: int, moment: str) -> None:
    """The signal is raised at that moment (deterministically, not after a delay)."""
    r = _python(f"""
        import builtins, signal, sys
        from cudaredist.entry import main

        real = builtins.__import__
        def hook(name, *args, **kw):
            if name == "cudaredist.cli" and {moment == "importing the command line"}:
                signal.raise_signal({int(signum)})
            return real(name, *args, **kw)

        builtins.__import__ = hook
        import cudaredist.commands.base as base
        if {moment != "importing the command line"}:
            base.set_verbose = lambda v: signal.raise_signal({int(signum)})
        sys.argv = ["cudaredist", "list"]
        main()
        """)
    assert r.returncode == 128 + signum, r.stderr
    said = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted (Ctrl-C)"
    assert r.stderr == f"error: {said}\n"
