"""cache/store.py: the lock every wait goes through, between the threads of one process."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import filelock
import pytest

from cudaredist.cache.store import hold
from cudaredist.errors import BusyError


def _hold(path: Path, wait: float = 30.0,
          waiting: Callable[[], None] | None = None) -> AbstractContextManager[Any]:
    return hold(path, wait, "busy", path.parent, doing="lock", where=path, option="--cache-dir",
                waiting=waiting)


def test_a_thread_waits_for_another_at_the_gate_not_by_polling_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five index pages stored at once lost 50 ms each to filelock's polling (its sleep between
    tries): a thread of the same process now takes the file lock only once the other let go."""
    timeouts: list[str] = []
    real = filelock.FileLock.acquire

    def acquire(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return real(self, *args, **kwargs)
        except filelock.Timeout:
            timeouts.append(threading.current_thread().name)
            raise

    monkeypatch.setattr(filelock.FileLock, "acquire", acquire)
    path = tmp_path / "x.lock"
    order: list[str] = []
    inside = threading.Event()

    def second() -> None:
        inside.wait()
        with _hold(path):
            order.append("second")

    t = threading.Thread(target=second, name="second")
    with _hold(path):
        t.start()
        inside.set()
        t.join(0.5)  # it waits while this one holds the lock
        assert t.is_alive()
        order.append("first")
    t.join(10)
    assert order == ["first", "second"]
    assert timeouts == []  # never sent to try the file while the first thread held it


def test_a_thread_kept_out_past_the_deadline_is_told_busy_and_asked_to_give_up_meanwhile(
        tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    calls: list[int] = []
    errors: list[BaseException] = []

    def second() -> None:
        try:
            with _hold(path, wait=0.5, waiting=lambda: calls.append(1)):
                pass
        except BaseException as exc:  # noqa: BLE001 -- handed to the main thread
            errors.append(exc)

    with _hold(path):
        t = threading.Thread(target=second)
        t.start()
        t.join(10)
    assert len(errors) == 1 and isinstance(errors[0], BusyError)
    assert len(calls) >= 3  # waiting() ran while it waited (Ctrl-C reaches a waiting worker)
    with _hold(path, wait=0.5):  # the gate was given back: the lock is free again
        pass


def test_a_failure_to_make_the_lock_file_gives_the_gate_back(tmp_path: Path) -> None:
    path = tmp_path / "missing-dir-is-a-file" / "x.lock"
    path.parent.write_text("not a directory")
    for _ in range(2):  # a second try is refused the same way, not kept waiting by the first
        with pytest.raises(Exception) as info, _hold(path, wait=0.5):
            pass
        assert not isinstance(info.value, BusyError)


_WAITER = """
import sys, time
from pathlib import Path
from cudaredist.cache.store import hold
path = Path(sys.argv[1])
with hold(path, 30.0, "busy", path.parent, doing="lock", where=path, option="--cache-dir"):
    print("held", flush=True)
    time.sleep(2)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="a lock file held open cannot be removed on Windows")
def test_a_waiter_whose_lock_file_its_holder_removed_holds_the_file_at_the_path(tmp_path: Path) -> None:
    """An uninstall removes its prefix's lock file before it lets go (maintenance removes lock files
    too): the process that waited for it must hold the file now at that path, or a third process
    would make a new file there and hold the same lock at the same time."""
    path = tmp_path / "x.lock"
    with _hold(path):
        waiter = subprocess.Popen([sys.executable, "-c", _WAITER, str(path)], stdout=subprocess.PIPE,
                                  text=True)
        time.sleep(1.0)  # it waits for the file this process holds
        path.unlink()
    with waiter:
        assert waiter.stdout is not None and waiter.stdout.readline() == "held\n"
        with pytest.raises(BusyError), _hold(path, wait=0.5):  # the waiter's lock is the one at the path
            pass
        assert waiter.wait(30) == 0
