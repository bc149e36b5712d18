"""Progress reporting: a small protocol the library calls, and the adapters the CLI picks.

On a TTY: one aggregate tqdm bar (bytes, rate, ETA) plus a line per finished archive.
Elsewhere (CI logs): a few plain lines, never carriage returns. ``--quiet``: nothing.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, TextIO

from cudaredist.localfs import mb


class Reporter:
    """What the library tells about its progress; this base says nothing (``--quiet``)."""

    def start(self, total_bytes: int, archives: int) -> None: ...
    def advance(self, nbytes: int) -> None: ...
    def archive_done(self, name: str, size: int, *, cached: bool) -> None: ...
    def extracted(self, name: str) -> None: ...
    def message(self, text: str) -> None: ...
    def close(self) -> None: ...


class PlainLines(Reporter):
    """For logs: one line per archive and a summary; thread-safe."""

    def __init__(self, stream: TextIO | None = None, *, verbose: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.verbose = verbose
        self._lock = threading.Lock()

    def message(self, text: str) -> None:
        with self._lock:
            print(text, file=self.stream, flush=True)

    def start(self, total_bytes: int, archives: int) -> None:
        self.message(f"fetching {archives} archives, {mb(total_bytes)}")

    def archive_done(self, name: str, size: int, *, cached: bool) -> None:
        how = "cached" if cached else "downloaded"
        self.message(f"  {how:10} {name} ({mb(size)})")

    def extracted(self, name: str) -> None:
        if self.verbose:
            self.message(f"  extracted  {name}")


class TqdmBar(PlainLines):
    """One aggregate bar; per-archive lines are written above it."""

    _bar: Any = None
    _archives = _fetched = _extracted = 0

    def start(self, total_bytes: int, archives: int) -> None:
        from tqdm import tqdm

        self._archives, self._fetched, self._extracted = archives, 0, 0
        self._bar = tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1000,
                         desc=self._phase(), file=self.stream, dynamic_ncols=True, leave=False)

    def _phase(self) -> str:
        """The bar counts bytes fetched; once they are all in, it says that extraction goes on
        (a bar at 100% for seconds looks like a hang)."""
        if self._fetched < self._archives:
            return f"fetched {self._fetched}/{self._archives} archives"
        return f"extracting: {self._extracted}/{self._archives} done"

    def _count(self, fetched: int = 0, extracted: int = 0) -> None:
        with self._lock:
            self._fetched += fetched
            self._extracted += extracted
            if self._bar is not None:
                self._bar.set_description_str(self._phase(), refresh=True)

    def archive_done(self, name: str, size: int, *, cached: bool) -> None:
        super().archive_done(name, size, cached=cached)
        self._count(fetched=1)

    def extracted(self, name: str) -> None:
        super().extracted(name)
        self._count(extracted=1)

    def advance(self, nbytes: int) -> None:
        if self._bar is not None:
            with self._lock:
                self._bar.update(nbytes)

    def message(self, text: str) -> None:
        if self._bar is not None:
            with self._lock:
                self._bar.write(text, file=self.stream)
        else:
            super().message(text)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def pick(*, quiet: bool, verbose: bool, stream: TextIO | None = None) -> Reporter:
    stream = stream or sys.stderr
    if quiet:
        return Reporter()
    if stream.isatty():
        return TqdmBar(stream, verbose=verbose)
    return PlainLines(stream, verbose=verbose)
