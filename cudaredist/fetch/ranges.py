"""Byte ranges on disk: a reader following a file being written (:class:`GrowingFile`), the in-order
hasher behind segmented downloads built on it, and resumable partial files.

A segmented download writes several ranges of one pre-sized file at once; :class:`OrderedHasher`
hashes it front to back right behind the writers, so no second pass reads the file. A partial
download keeps ``<file>.valid`` beside it, saying how much of its start is in place, so a later
run resumes it with a Range request (:func:`resume_point`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import threading
from collections.abc import Callable
from pathlib import Path

from cudaredist.hashing import CHUNK

Progress = Callable[[int], None]
_BINARY = getattr(os, "O_BINARY", 0)


class DownloadFailed(Exception):
    """Raised in the reader when the download it follows failed (the writer holds the real error)."""


class GrowingFile(io.RawIOBase):
    """A reader over a file that a download is still writing, so extraction overlaps the transfer.

    The writer publishes how many bytes from the start (or from ``start``: one range of a segmented
    download, :class:`OrderedHasher`) are in place (contiguous, in order) and finally either
    ``finish()``es (all bytes there and verified) or ``fail()``s; the reader blocks until the bytes
    it wants are there. Bytes read this way are not yet verified: they only ever go into a staging
    tree that is discarded unless the download's size and sha256 check out."""

    def __init__(self, start: int = 0) -> None:
        super().__init__()
        self._cond = threading.Condition()
        self.available = start  # the file's offset up to which bytes from ``start`` are in place
        self._done = False
        self._failed: BaseException | None = None
        self._fh: io.FileIO | None = None
        self._pos = start

    # -- writer side -------------------------------------------------------------------------------
    def attach(self, path: Path) -> None:
        """Follow ``path``; opened now, so renaming it into the cache later does not matter."""
        with self._cond:
            if self._fh is None:
                # Unbuffered: read-ahead would cache bytes of a pre-sized file not yet written.
                self._fh = open(path, "rb", buffering=0)  # noqa: SIM115 - closed in close()

    def publish(self, available: int) -> None:
        with self._cond:
            if available > self.available:
                self.available = available
                self._cond.notify_all()

    def finish(self) -> None:
        with self._cond:
            self._done = True
            self._cond.notify_all()

    def fail(self, exc: BaseException) -> None:
        with self._cond:
            self._failed = exc
            self._cond.notify_all()

    # -- reader side ---------------------------------------------------------------------------------
    def readable(self) -> bool:
        return True

    def readinto(self, buf: memoryview | bytearray) -> int:  # type: ignore[override]
        want = len(buf)
        with self._cond:
            while self.available <= self._pos and not self._done and self._failed is None:
                self._cond.wait()
            if self._failed is not None:
                raise DownloadFailed(str(self._failed))
            n = min(want, self.available - self._pos)
        if n <= 0:
            return 0  # done and everything read
        assert self._fh is not None, "publish() before attach()"
        self._fh.seek(self._pos)
        got = self._fh.readinto(memoryview(buf)[:n]) or 0  # straight into the reader's buffer
        self._pos += got
        return got

    def close(self) -> None:
        with self._cond:
            if self._fh is not None:
                self._fh.close()
                self._fh = None
        super().close()


class OrderedHasher:
    """Hashes a file being written by several ranges, in order, while they download.

    Each range is followed as a :class:`GrowingFile`: its bytes are read back from the page cache
    right behind its writer, so no second pass over the file is needed once the last range arrives.
    """

    def __init__(self, path: Path, bounds: list[tuple[int, int]], watch: tuple[Progress, ...],
                 h: hashlib._Hash) -> None:
        self.bounds = bounds
        self.watch = watch  # each told how many leading bytes are hashed
        self.ranges = [GrowingFile(start) for start, _end in bounds]
        for followed in self.ranges:
            followed.attach(path)
        self.first_response = threading.Event()  # range 0 wrote, or failed: range_ok is known
        self.range_ok = False  # whether the server honoured range 0's Range header
        self._thread = threading.Thread(target=self._run, args=(h,), daemon=True)
        self._thread.start()

    def advance(self, idx: int, pos: int) -> None:
        """Range ``idx`` is written up to the file offset ``pos``."""
        if idx == 0 and not self.first_response.is_set():
            self.range_ok = True
            self.first_response.set()
        self.ranges[idx].publish(pos)

    def finish(self, idx: int) -> None:
        self.first_response.set()  # (range 0 is the first to finish: the others start after it wrote)
        self.ranges[idx].finish()

    def _run(self, h: hashlib._Hash) -> None:
        for (start, end), followed in zip(self.bounds, self.ranges, strict=True):
            while start < end:
                chunk = followed.read(min(CHUNK, end - start))
                if not chunk:
                    return  # range failed; the caller reports its error
                h.update(chunk)
                start += len(chunk)
                for watch in self.watch:
                    watch(start)

    def join(self) -> None:
        for followed in self.ranges:
            followed.finish()
        self._thread.join()
        for followed in self.ranges:
            followed.close()


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
