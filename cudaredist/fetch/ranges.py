"""Byte ranges on disk: the in-order hasher behind segmented downloads, and resumable partial files.

A segmented download writes several ranges of one pre-sized file at once; :class:`OrderedHasher`
hashes it front to back right behind the writers, so no second pass reads the file. A partial
download keeps ``<file>.valid`` beside it, saying how much of its start is in place, so a later
run resumes it with a Range request (:func:`resume_point`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

from cudaredist.hashing import CHUNK

Progress = Callable[[int], None]
_BINARY = getattr(os, "O_BINARY", 0)


class OrderedHasher:
    """Hashes a file being written by several ranges, in order, while they download.

    The bytes are read back from the page cache right behind the writers, so no
    second pass over the file is needed once the last range arrives.
    """

    def __init__(self, path: Path, bounds: list[tuple[int, int]],
                 watch: tuple[Progress, ...] = (), seed: hashlib._Hash | None = None) -> None:
        self.path = path
        self._seed = seed
        self.bounds = bounds
        self.watch = watch  # each told how many leading bytes are hashed
        self.written = [0] * len(bounds)
        self.finished = [False] * len(bounds)
        self.cond = threading.Condition()
        self.first_response = threading.Event()  # range 0 wrote, or failed: range_ok is known
        self.range_ok = False  # whether the server honoured range 0's Range header
        self._digest: str | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def advance(self, idx: int, pos: int) -> None:
        """Range ``idx`` is written up to the file offset ``pos``."""
        if idx == 0 and not self.first_response.is_set():
            self.range_ok = True
            self.first_response.set()
        with self.cond:
            self.written[idx] = pos - self.bounds[idx][0]
            self.cond.notify_all()

    def finish(self, idx: int) -> None:
        if idx == 0 and not self.first_response.is_set():
            self.first_response.set()
        with self.cond:
            self.finished[idx] = True
            self.cond.notify_all()

    def _run(self) -> None:
        h = self._seed or hashlib.sha256()
        # Unbuffered: read-ahead would keep bytes of the pre-sized file that are not written yet.
        with open(self.path, "rb", buffering=0) as fh:
            for idx, (start, end) in enumerate(self.bounds):
                done = 0
                while start + done < end:
                    with self.cond:
                        while self.written[idx] <= done and not self.finished[idx]:
                            self.cond.wait()
                        avail = self.written[idx]
                        if avail <= done and self.finished[idx]:
                            self._digest = ""  # range failed; caller reports its error
                            return
                    fh.seek(start + done)
                    todo = avail - done
                    while todo:
                        data = fh.read(min(todo, CHUNK))
                        if not data:
                            break
                        h.update(data)
                        todo -= len(data)
                        done += len(data)
                    for watch in self.watch:
                        watch(start + done)
        self._digest = h.hexdigest()

    def result(self) -> str:
        with self.cond:
            for i in range(len(self.finished)):
                self.finished[i] = True
            self.cond.notify_all()
        self._thread.join()
        return self._digest or ""


def marker_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".valid")


class Marker:
    """Beside a segmented download (whose file is pre-sized, holes and all), the length of the
    prefix that is in place, rewritten in place as it grows: what a killed run can resume from.

    Close it however the download ends (``contextlib.closing``), since on Windows an open
    handle keeps the marker from being deleted (and the cleanup's error would hide the real one).
    """

    def __init__(self, dest: Path, start: int) -> None:
        self._fd: int | None = os.open(marker_path(dest),
                                       os.O_RDWR | os.O_CREAT | os.O_TRUNC | _BINARY, 0o644)
        self._lock = threading.Lock()
        try:
            self.update(start)
        except BaseException:
            self.close()
            raise

    def update(self, n: int) -> None:
        with self._lock:
            if self._fd is not None:
                # one write of the whole value: a kill never tears it. Seek and write under the
                # lock rather than os.pwrite, which Windows lacks.
                os.lseek(self._fd, 0, os.SEEK_SET)
                os.write(self._fd, b"%020d" % n)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def resume_point(dest: Path, size: int) -> int:
    """How many leading bytes of the partial download ``dest`` a resumed download can keep."""
    try:
        have = dest.stat().st_size
    except OSError:
        return 0
    try:
        raw = marker_path(dest).read_bytes().strip()
        have = min(have, int(raw)) if raw else 0
    except FileNotFoundError:
        pass
    except (OSError, ValueError):
        return 0
    return have if 0 < have <= size else 0


def hash_prefix(dest: Path, offset: int) -> tuple[hashlib._Hash, int]:
    """The sha256 of the first ``offset`` bytes of ``dest`` (a partial download being resumed), and
    how many there were (fewer when the file is shorter than said: resume from what is there)."""
    h = hashlib.sha256()
    if offset:
        with open(dest, "rb") as fi:
            left = offset
            while left and (chunk := fi.read(min(CHUNK, left))):
                h.update(chunk)
                left -= len(chunk)
        offset -= left
    return h, offset


def discard_partial(dest: Path) -> None:
    """Delete a partial download and its marker, as far as the OS lets it: this runs while another
    error is being reported, and a file another process holds (a scanner, on Windows) must not
    replace that error. What stays is dropped by a later run (stale, or it fails its hash)."""
    for p in (dest, marker_path(dest)):
        with contextlib.suppress(OSError):
            p.unlink()
