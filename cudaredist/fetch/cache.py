"""The download cache: content-addressed archives, cached index pages and manifests.

Layout under the cache root (``--cache-dir`` > ``CUDAREDIST_CACHE_DIR`` > the user cache dir):

    archives/<sha256>            verified archive bytes, named by their hash
    archives/<sha256>.json       where it came from (url, file name, size), for ``cache list``
    index/<key>/                 listing.html and redistrib_*.json per base URL (for --offline)
    tmp/                         partial downloads (<sha256>.part, resumed by the next run); only
                                 ever renamed into archives/ after they verify
    locks/                       one lock file per entry being written
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cudaredist import fsops
from cudaredist.errors import BusyError

ENV_CACHE_DIR = "CUDAREDIST_CACHE_DIR"
CHUNK = 1 << 20


def default_cache_dir() -> Path:
    env = os.environ.get(ENV_CACHE_DIR)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("cudaredist", appauthor=False))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    sha256: str
    path: Path
    size: int
    name: str
    url: str
    last_used: float


class Cache:
    def __init__(self, root: Path | None = None, *, lock_timeout: float = 600.0) -> None:
        self.root = (root or default_cache_dir()).expanduser().absolute()
        self.lock_timeout = lock_timeout

    # -- paths ---------------------------------------------------------------------------------
    @property
    def archives(self) -> Path:
        return self.root / "archives"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    def archive_path(self, sha256: str) -> Path:
        return self.archives / sha256.lower()

    def index_dir(self, base_url: str) -> Path:
        key = hashlib.sha256(base_url.rstrip("/").encode()).hexdigest()[:24]
        return self.root / "index" / key

    # -- locking -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, name: str, *, timeout: float | None = None,
             waiting: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold the entry lock ``name``; ``waiting()`` is called while another process holds it
        (it may raise, e.g. to give up on Ctrl-C in a worker thread)."""
        import filelock

        wait = self.lock_timeout if timeout is None else timeout
        (self.root / "locks").mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(str(self.root / "locks" / f"{name}.lock"), timeout=wait)
        try:
            if waiting is None:
                lock.acquire()
            else:
                deadline = time.monotonic() + wait
                while True:
                    waiting()
                    try:
                        lock.acquire(timeout=max(0.0, min(0.1, deadline - time.monotonic())))
                        break
                    except filelock.Timeout:
                        if time.monotonic() >= deadline:
                            raise
        except filelock.Timeout as exc:
            raise BusyError(
                f"the cache entry {name} in {self.root} is locked by another cudaredist process "
                f"for more than {wait:g}s; retry, or raise --lock-timeout",
                prefix=str(self.root)) from exc
        try:
            yield
        finally:
            lock.release()

    # -- archives ------------------------------------------------------------------------------
    def lookup(self, sha256: str, size: int) -> Path | None:
        """The cached path if an entry of the right size exists (its hash is checked on use)."""
        p = self.archive_path(sha256)
        try:
            st = p.stat()
        except OSError:
            return None
        return p if st.st_size == size else None

    def evict(self, sha256: str) -> None:
        for p in (self.archive_path(sha256), self.archive_path(sha256).with_suffix(".json")):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    def touch(self, sha256: str) -> None:
        with contextlib.suppress(OSError):
            os.utime(self.archive_path(sha256))

    def drop_partials(self, hint: str) -> int:
        """Delete partial downloads ``hint.*``; call with that entry's lock held (their writer is gone)."""
        count = 0
        if self.tmp.is_dir():
            for p in self.tmp.glob(f"{glob.escape(hint)}.*"):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
                    count += 1
        return count

    def partial(self, sha256: str) -> Path:
        """Where the download of ``sha256`` is written (write it with that entry's lock held)."""
        self.tmp.mkdir(parents=True, exist_ok=True)
        return self.tmp / f"{sha256.lower()}.part"

    def new_temp(self, hint: str) -> Path:
        self.tmp.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=self.tmp, prefix=f"{hint}.", suffix=".part")
        os.close(fd)
        return Path(name)

    def commit(self, temp: Path, sha256: str, *, url: str, name: str) -> Path:
        """Move a verified temp file to its content address (atomic; same filesystem)."""
        self.archives.mkdir(parents=True, exist_ok=True)
        final = self.archive_path(sha256)
        meta = {"url": url, "name": name, "size": temp.stat().st_size, "sha256": sha256}
        meta_tmp = temp.with_suffix(".meta")
        meta_tmp.write_text(json.dumps(meta))
        fsops.replace(temp, final)
        fsops.replace(meta_tmp, final.with_suffix(".json"))
        return final

    def entries(self) -> list[CacheEntry]:
        out: list[CacheEntry] = []
        if not self.archives.is_dir():
            return out
        for p in sorted(self.archives.iterdir()):
            if p.suffix == ".json" or len(p.name) != 64:
                continue
            meta: dict[str, object] = {}
            with contextlib.suppress(OSError, ValueError):
                meta = json.loads(p.with_suffix(".json").read_text())
            st = p.stat()
            out.append(CacheEntry(p.name, p, st.st_size, str(meta.get("name", "")),
                                  str(meta.get("url", "")), st.st_mtime))
        return out

    # -- index pages and manifests (for --offline) ---------------------------------------------
    def store_index(self, base_url: str, name: str, data: bytes) -> None:
        d = self.index_dir(base_url)
        d.mkdir(parents=True, exist_ok=True)
        (d / "base_url").write_text(base_url)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{name}.", suffix=".part")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, d / name)

    def load_index(self, base_url: str, name: str) -> bytes | None:
        try:
            return (self.index_dir(base_url) / name).read_bytes()
        except OSError:
            return None

    def cached_index_names(self, base_url: str) -> list[str]:
        d = self.index_dir(base_url)
        return sorted(p.name for p in d.iterdir()) if d.is_dir() else []

    # -- maintenance ---------------------------------------------------------------------------
    def prune(self, *, older_than_days: float = 30.0) -> tuple[int, int]:
        """Drop partial downloads and archives unused for ``older_than_days``; (files, bytes) freed."""
        count = freed = 0
        cutoff = time.time() - older_than_days * 86400
        if self.tmp.is_dir():
            for p in self.tmp.iterdir():
                with contextlib.suppress(OSError):
                    # a partial download younger than an hour may belong to a running install,
                    # and a resumable one (<sha256>.part) is kept for a week
                    keep = 7 * 86400 if len(p.name.split(".")[0]) == 64 else 3600
                    if p.stat().st_mtime < time.time() - keep:
                        freed += p.stat().st_size
                        p.unlink()
                        count += 1
        for e in self.entries():
            if e.last_used < cutoff:
                with self.lock(e.sha256):
                    freed += e.size
                    self.evict(e.sha256)
                    count += 1
        return count, freed

    def clear(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
