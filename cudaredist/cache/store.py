"""The cache root and its archives, index pages and locks (the layout: :mod:`cudaredist.cache`)."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cudaredist import fsops
from cudaredist.errors import BusyError, CacheError, LocalDiskError, UsageError
from cudaredist.localfs import CACHE_OPTION as OPTION
from cudaredist.localfs import local_error, read_only

if TYPE_CHECKING:
    import filelock

ENV_CACHE_DIR = "CUDAREDIST_CACHE_DIR"
ENV_LOCK_TIMEOUT = "CUDAREDIST_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 600.0
MARKER = ".cudaredist-cache"
FORMAT = 1
CACHEDIR_TAG = "CACHEDIR.TAG"
TAG_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"
_TAG_TEXT = (f"{TAG_SIGNATURE}\n# This file is a cache directory tag created by cudaredist.\n"
             "# For information about cache directory tags see https://bford.info/cachedir/\n")
OURS = frozenset({"archives", "unpacked", "index", "sbom", "tmp", "locks", CACHEDIR_TAG, MARKER})
ARCHIVE_NAME = re.compile(r"[0-9a-f]{64}(\.json)?")
PARTIAL_NAME = re.compile(r"([0-9a-f]{16,64})\..*")
INDEX_KEY = re.compile(r"[0-9a-f]{24}")
_MARKING = re.compile(rf"\.({re.escape(MARKER)}|{re.escape(CACHEDIR_TAG)})\..*\.part")
_PREPARING = threading.Lock()
_GATES: dict[str, threading.Lock] = {}  # the one in-process lock of each lock file, by its path
_GATING = threading.Lock()
# How long a fetched index page or manifest answers for the server (pip's and uv's PyPI pages get
# max-age=600 from PyPI): a warm install within it needs no network at all.
ENV_INDEX_TTL = "CUDAREDIST_INDEX_TTL"
DEFAULT_INDEX_TTL = 600.0
HOPS = ".from"  # beside a stored index page: the URLs it was redirected through (trust judges them)
PARTIAL_DAYS = 7.0  # a partial download kept this long for a later run to resume, then dropped


def index_ttl_default() -> float:
    """``CUDAREDIST_INDEX_TTL`` seconds (0: always ask the server), else 600."""
    raw = os.environ.get(ENV_INDEX_TTL, "").strip()
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_INDEX_TTL
    except ValueError:
        return DEFAULT_INDEX_TTL


def default_cache_dir() -> Path:
    if env := os.environ.get(ENV_CACHE_DIR):
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("cudaredist", appauthor=False))


@dataclass(frozen=True)
class CacheEntry:
    sha256: str
    path: Path
    size: int
    name: str
    url: str
    last_used: float


def lock_wait(given: float | None = None) -> float:
    """Seconds to wait for a lock another process holds (a prefix, a cache entry, a mirror):
    ``--lock-timeout``, else CUDAREDIST_LOCK_TIMEOUT, else 600; the one reading of either."""
    if given is not None:
        return given
    raw = os.environ.get(ENV_LOCK_TIMEOUT, "").strip()
    try:
        return max(float(raw), 0.0) if raw else DEFAULT_LOCK_TIMEOUT
    except ValueError:
        raise UsageError(f"{ENV_LOCK_TIMEOUT}={raw!r} is not a number of seconds; set it like "
                         f"{ENV_LOCK_TIMEOUT}=120, or unset it for the default (600)") from None


@contextlib.contextmanager
def hold(path: Path, wait: float, busy: str, owner: Path, *, doing: str, where: Path, option: str,
         cls: type[LocalDiskError] = LocalDiskError,
         waiting: Callable[[], None] | None = None) -> Iterator[filelock.BaseFileLock]:
    """Hold the lock file ``path`` of ``owner`` (the one way cudaredist waits for another process or
    thread): a :class:`BusyError` saying ``busy`` after ``wait`` seconds, a local error (``doing``
    ``where``) when it cannot be made. ``waiting()`` is called while another holds it (it may raise,
    e.g. to give up on Ctrl-C in a worker thread). A lock file its previous holder removed (an
    uninstalled prefix's, maintenance's) is not taken: filelock >= 4 opens the new one instead."""
    import filelock

    lock = filelock.FileLock(str(path), timeout=wait)
    deadline = time.monotonic() + wait
    # the threads of this process queue on a gate per path and only its holder asks filelock, which
    # would make them poll the file (50 ms sleeps; five index pages stored at once lost 50 ms)
    with _GATING:
        gate = _GATES.setdefault(os.path.abspath(path), threading.Lock())
    with contextlib.ExitStack() as held:
        try:
            for take, release in ((lambda s: gate.acquire(timeout=s), gate.release),
                                  (lambda s: _take_file(lock, s), lock.release)):
                if not _until(deadline, take, waiting):
                    raise BusyError(busy, path=str(owner), lock=lock.lock_file)
                held.callback(release)
        except OSError as exc:
            raise local_error(exc, doing=doing, path=where, option=option, cls=cls) from exc
        yield lock


def _until(deadline: float, take: Callable[[float], bool], waiting: Callable[[], None] | None) -> bool:
    """Try ``take(seconds)`` in slices of at most 0.1 s, ``waiting()`` before each, until it is true
    (True) or the ``deadline`` (monotonic) has passed (False)."""
    while True:
        if waiting is not None:
            waiting()
        if take(max(0.0, min(0.1, deadline - time.monotonic()))):
            return True
        if time.monotonic() >= deadline:
            return False


def _take_file(lock: filelock.BaseFileLock, seconds: float) -> bool:
    import filelock

    try:
        lock.acquire(timeout=seconds)
    except filelock.Timeout:
        if not os.path.lexists(lock.lock_file):
            # no holder has a lock whose file is not there: filelock takes a file it cannot
            # create (ENOENT in /proc) for a race and retries; the disk's reason
            os.close(os.open(lock.lock_file, os.O_WRONLY | os.O_CREAT, 0o666))
        return False
    return True


class Cache:
    def __init__(self, root: Path | None = None, *, lock_timeout: float | None = None,
                 index_ttl: float = 0.0) -> None:
        self.root = (root or default_cache_dir()).expanduser().absolute()
        self.archives = self.root / "archives"
        self.tmp = self.root / "tmp"
        self.lock_timeout = lock_wait(lock_timeout)
        # seconds a stored index page answers for the server (0: never; install gives the TTL)
        self.index_ttl = index_ttl
        self._ready = False
        # a marked cache this process cannot write (a read-only mount): read as it is, no locks
        self.read_only = False

    # -- paths ---------------------------------------------------------------------------------
    def archive_path(self, sha256: str) -> Path:
        return self.archives / sha256.lower()

    def index_dir(self, base_url: str) -> Path:
        key = hashlib.sha256(base_url.rstrip("/").encode()).hexdigest()[:24]
        return self.root / "index" / key

    # -- the root: tagged, marked, and never a directory that is not ours ---------------------------
    def _names(self) -> set[str]:
        """The root's entries, less the temp files of a marker or tag being written right now."""
        return {n for n in os.listdir(self.root) if not _MARKING.fullmatch(n)}

    def _older_cache(self) -> bool:
        """Written by a cudaredist before the marker: only our names at the top, and in archives/
        only sha256-named files. One it cannot read raises (OSError): no verdict on it either way."""
        return self._names() <= OURS and (not self.archives.is_dir() or all(
            ARCHIVE_NAME.fullmatch(n) for n in os.listdir(self.archives)))

    def _mark(self) -> None:
        # the marker first: once it is there, no other process takes the root for someone's data
        for name, text in ((MARKER, json.dumps({"format": FORMAT}) + "\n"), (CACHEDIR_TAG, _TAG_TEXT)):
            if not (self.root / name).is_file():
                fsops.write_atomic(self.root / name, text.encode())

    def prepare(self) -> None:
        """Make the root ready for writing: created, tagged and marked. A directory that holds other
        files and is not an older cudaredist cache is refused (it is someone's data, not a cache)."""
        if self._ready:
            return
        with _PREPARING:  # the fetcher's threads share one Cache
            try:
                if (self.root / MARKER).is_file() and read_only(self.root):
                    # nothing in it can change through this process, and no lock file can be made
                    # there: what it holds is used as it is, as pip reads a read-only cache
                    self.read_only = self._ready = True
                    return
                if not self.maintainable("use"):
                    self.root.mkdir(parents=True, exist_ok=True)
                self._mark()
            except OSError as exc:
                raise local_error(exc, doing="use the cache directory", path=self.root, option=OPTION,
                                  cls=CacheError) from exc
            self._ready = True

    def maintainable(self, doing: str) -> bool:
        """May cudaredist write and delete in the root? False when there is nothing yet; raises if it is
        not ours."""
        try:
            if not self.root.exists():
                return False
            if not self.root.is_dir():
                raise CacheError(f"the cache directory {self.root} is a file, not a cudaredist cache; "
                                 f"refusing to {doing} it: choose another {OPTION}, or move that file away",
                                 path=str(self.root))
            if (self.root / MARKER).is_file():
                return True
            if not self._names():
                return False
            if not self._older_cache():
                raise CacheError(
                    f"{self.root} is not a cudaredist cache (it has no {MARKER} marker and holds files "
                    f"cudaredist did not write); refusing to {doing} it. Point {OPTION} at a new or empty "
                    "directory, or at the cache itself (`cudaredist cache dir` prints the default).",
                    path=str(self.root))
            self._mark()  # adopt the cache an older cudaredist wrote
            return True
        except OSError as exc:
            raise local_error(exc, doing=f"{doing} the cache directory", path=self.root, option=OPTION,
                              cls=CacheError) from exc

    # -- locking -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def try_lock(self, *names: str) -> Iterator[bool]:
        """Take the entry locks ``names`` without waiting: yields False when another process holds one."""
        with contextlib.ExitStack() as held:
            try:
                for name in names:
                    held.enter_context(self.lock(name, timeout=0))
            except BusyError:
                yield False
                return
            yield True

    @contextlib.contextmanager
    def lock(self, name: str, *, timeout: float | None = None,
             waiting: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold the entry lock ``name`` (``waiting``: see :func:`hold`)."""
        wait = self.lock_timeout if timeout is None else timeout
        self.prepare()
        if self.read_only:
            yield
            return
        path = self.root / "locks" / f"{name}.lock"  # filelock makes locks/
        with hold(path, wait, f"the cache entry {name} in {self.root} is busy: another cudaredist process "
                  f"has held its lock for more than {wait:g}s; retry, or raise --lock-timeout", self.root,
                  doing="lock", where=path, option=OPTION, cls=CacheError, waiting=waiting):
            yield

    # -- archives ------------------------------------------------------------------------------
    def lookup(self, sha256: str, size: int) -> Path | None:
        """The cached path if an entry of the right size exists (its hash is checked on use)."""
        p = self.archive_path(sha256)
        try:
            st = p.stat()
        except OSError:
            return None
        return p if st.st_size == size else None

    def touch(self, sha256: str) -> None:
        with contextlib.suppress(OSError):
            os.utime(self.archive_path(sha256))

    def partial(self, sha256: str) -> Path:
        """Where the download of ``sha256`` is written (write it with that entry's lock held), once
        the partial downloads an older cudaredist left for it (``<sha16>.*``: their writer is gone) go."""
        for p in self.tmp.glob(f"{glob.escape(sha256[:16])}.*"):
            p.unlink(missing_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        return self.tmp / f"{sha256.lower()}.part"

    def commit(self, temp: Path, sha256: str, *, url: str, name: str) -> Path:
        """Move a verified temp file to its content address (atomic; same filesystem)."""
        self.archives.mkdir(exist_ok=True)
        final = self.archive_path(sha256)
        meta_tmp = temp.with_suffix(".meta")
        meta_tmp.write_text(json.dumps({"url": url, "name": name, "size": temp.stat().st_size,
                                        "sha256": sha256}))
        # the sidecar first: a kill between the two renames leaves a .json without its archive
        # (maintenance drops those), never a stray file in tmp/ beside a committed archive
        fsops.replace(meta_tmp, final.with_suffix(".json"))
        fsops.replace(temp, final)
        return final

    def entries(self) -> list[CacheEntry]:
        out: list[CacheEntry] = []
        if self.root.exists() and not self.root.is_dir():
            raise CacheError(f"the cache directory {self.root} is a file; point {OPTION} at the cache",
                             path=str(self.root))
        if not self.archives.is_dir():
            return out
        try:
            names = sorted(os.listdir(self.archives))
        except OSError as exc:
            raise local_error(exc, doing="read the cache directory", path=self.archives, option=OPTION,
                              cls=CacheError) from exc
        for n in names:
            p = self.archives / n
            if p.suffix == ".json" or not ARCHIVE_NAME.fullmatch(n):
                continue
            meta: dict[str, object] = {}
            with contextlib.suppress(OSError, ValueError):
                meta = json.loads(p.with_suffix(".json").read_text())
            try:
                st = p.stat()
            except FileNotFoundError:  # removed meanwhile (a prune or clear running)
                continue
            out.append(CacheEntry(p.name, p, st.st_size, str(meta.get("name", "")),
                                  str(meta.get("url", "")), st.st_mtime))
        return out

    # -- index pages and manifests (for --offline) ---------------------------------------------
    def index_page(self, base_url: str, name: str, fetch: Callable[[], tuple[bytes, Sequence[str]]],
                   check: Callable[[bytes], object] | None = None,
                   usable: Callable[[tuple[str, ...]], bool] = lambda hops: True
                   ) -> tuple[bytes, tuple[str, ...]]:
        """``name`` from ``base_url`` and the URLs it was redirected through (the last the one that
        answered): the stored copy while it is fresh (:meth:`fresh_index`) and ``usable`` accepts
        its hops (the caller's trust, judged on each use), else ``fetch()``'s answer, stored for
        later runs and ``--offline`` once ``check`` (which raises) accepts the bytes: a refused
        manifest is asked for again next time."""
        fresh = self.fresh_index(base_url, name)
        if fresh is not None and usable(fresh[1]):
            return fresh
        data, hops = fetch()
        if check is not None:
            check(data)
        self.store_index(base_url, name, data, hops)
        return data, tuple(hops)

    def store_index(self, base_url: str, name: str, data: bytes, hops: Sequence[str] = ()) -> None:
        """``data`` as ``name``, and beside it (``NAME.from``) the URLs it came through."""
        self.prepare()
        if self.read_only:  # a page fetched again is used, not kept
            return
        d = self.index_dir(base_url)
        with self.lock(f"index-{d.name}"):  # a clear removes the folder under this lock
            try:
                d.mkdir(parents=True, exist_ok=True)
                (d / "base_url").write_text(base_url)
                fsops.write_atomic(d / f"{name}{HOPS}", json.dumps(list(hops)).encode())
                fsops.write_atomic(d / name, data)
            except OSError as exc:
                raise local_error(exc, doing="write the index cache", path=d, option=OPTION,
                                  cls=CacheError) from exc

    def fresh_index(self, base_url: str, name: str) -> tuple[bytes, tuple[str, ...]] | None:
        """The stored copy of ``name`` from ``base_url`` and its hops if it was fetched less than
        ``index_ttl`` seconds ago (its file's mtime: :meth:`store_index` writes a new file each
        time), else None; so is a copy whose hops were not kept (an older cudaredist's)."""
        if self.index_ttl <= 0:
            return None
        try:
            age = time.time() - (self.index_dir(base_url) / name).stat().st_mtime
        except OSError:
            return None
        if not -60 < age < self.index_ttl:  # a clock set back: not trusted to be fresh
            return None
        data, hops = self.load_index(base_url, name), self.index_hops(base_url, name)
        return None if data is None or hops is None else (data, hops)

    def index_hops(self, base_url: str, name: str) -> tuple[str, ...] | None:
        """The URLs the stored ``name`` was redirected through when fetched (() : none), or None
        when not known."""
        try:
            hops = json.loads((self.index_dir(base_url) / f"{name}{HOPS}").read_bytes())
        except (OSError, ValueError):
            return None
        return tuple(hops) if isinstance(hops, list) and all(isinstance(h, str) for h in hops) else None

    def load_index(self, base_url: str, name: str) -> bytes | None:
        try:
            return (self.index_dir(base_url) / name).read_bytes()
        except OSError:
            return None

    def cached_index_names(self, base_url: str) -> list[str]:
        d = self.index_dir(base_url)
        return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def evict(entry: Path) -> bool:
    """Remove one cache entry, its lock held by the caller: an archive (``archive_path``) and its
    sidecar, or an unpacked entry's folder (renamed aside first: at once no entry, then removed).
    The one remover of entries: ``maintenance.py`` decides which go, the fetcher and the install
    drop one that fails its checks. False when Windows says a process has the archive open (a
    sharing violation: in use, so left for the next clean)."""
    if entry.is_dir() and not entry.is_symlink():
        gone = entry.with_name(f".gone-{entry.name[:16]}-{uuid.uuid4().hex[:8]}")
        with contextlib.suppress(OSError):
            fsops.rename(entry, gone)
            fsops.rmtree(gone)
        return True
    for p in (entry, entry.with_suffix(".json")):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            if fsops.holder_hint(exc):
                return False
            raise
    return True
