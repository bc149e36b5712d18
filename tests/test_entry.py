"""The console script's start and end: start-up's objects frozen for the collector; at the end the
exit handlers run, the output is all there, the exit code is the command's, and the interpreter is not
torn down (the process ends once the command is done)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from cudaredist import __version__


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
