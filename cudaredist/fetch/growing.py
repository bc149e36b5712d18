"""A reader over a file that a download is still writing, so extraction overlaps the transfer.

The writer publishes how many bytes from the start are in place (contiguous, in order)
and finally either ``close()``s (all bytes there and verified) or ``fail()``s. The
reader blocks until the bytes it wants are there. Bytes read this way are not yet
verified: they only ever go into a staging tree that is discarded unless the
download's size and sha256 check out.
"""

from __future__ import annotations

import io
import threading
from pathlib import Path


class DownloadFailed(Exception):
    """Raised in the reader when the download it follows failed (the writer holds the real error)."""


class GrowingFile(io.RawIOBase):
    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition()
        self.available = 0  # bytes from the start in place (published)
        self._done = False
        self._failed: BaseException | None = None
        self._fh: io.FileIO | None = None
        self._pos = 0

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
