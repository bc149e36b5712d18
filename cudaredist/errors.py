"""The error tree. Every failure a user can cause or meet is one of these.

    CudaRedistError            base; ``str(err)`` is the one-paragraph message for stderr
    ├── UsageError             options that do not go together, an unknown option value (exit 2)
    ├── ManifestError          a redistrib JSON (or a profile file) is malformed
    ├── ResolveError           a train/release does not exist at the base URL
    ├── PlanError              a component/platform/profile cannot be planned
    ├── FetchError             network or file access failed (after retries)
    │   └── OfflineError       --offline and something is not in the cache
    ├── TrustError             hashes would come from an origin nothing authenticates (plain HTTP)
    ├── IntegrityError         size or sha256 of a download or cache entry is wrong
    ├── UnsafeArchiveError     an archive member would escape the prefix or is a device
    ├── ConflictError          two archives write one path with different content
    ├── PrefixError            the prefix cannot be used (not ours, not installed)
    │   └── RecordError        its install record is unreadable or damaged
    ├── BusyError              another process holds a lock (prefix, cache entry, mirror) (exit 75)
    ├── LocalDiskError         a file operation on this machine failed (full, read-only, no permission)
    │   └── CacheError         the cache directory cannot be used, or is not a cudaredist cache
    ├── LockFileError          a lock file is malformed or the resolution drifted from it
    ├── ImportLibraryError     a Windows DLL's export table cannot be read for an import library
    └── ToolError              a program cudaredist ran (e.g. mklink) failed

Each carries the fields its message is built from, so callers test types and
fields, never message text.
"""

from __future__ import annotations


class CudaRedistError(Exception):
    """Base class: the message is complete and actionable on its own."""

    exit_code = 1


class UsageError(CudaRedistError):
    """Options that do not go together, or an environment a command needs that is not there."""

    exit_code = 2


class ManifestError(CudaRedistError):
    def __init__(self, message: str, *, source: str = "", entry: str = "") -> None:
        super().__init__(message)
        self.source = source
        self.entry = entry


class ResolveError(CudaRedistError):
    def __init__(self, message: str, *, requested: str = "", where: str = "",
                 available: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.requested = requested
        self.where = where
        self.available = available


class PlanError(CudaRedistError):
    def __init__(self, message: str, *, component: str = "", release: str = "",
                 platform: str = "") -> None:
        super().__init__(message)
        self.component = component
        self.release = release
        self.platform = platform


class FetchError(CudaRedistError):
    def __init__(self, message: str, *, url: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


class OfflineError(FetchError):
    pass


class TrustError(CudaRedistError):
    """A manifest or index page (the hashes) would come from plain HTTP that nothing authenticates."""

    def __init__(self, message: str, *, url: str = "", host: str = "") -> None:
        super().__init__(message)
        self.url = url
        self.host = host


class IntegrityError(CudaRedistError):
    def __init__(self, message: str, *, url: str = "", what: str = "",
                 expected: str | int = "", actual: str | int = "") -> None:
        super().__init__(message)
        self.url = url
        self.what = what
        self.expected = expected
        self.actual = actual


class UnsafeArchiveError(CudaRedistError):
    def __init__(self, message: str, *, archive: str = "", member: str = "") -> None:
        super().__init__(message)
        self.archive = archive
        self.member = member


class ConflictError(CudaRedistError):
    def __init__(self, message: str, *, path: str = "", first: str = "", second: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.first = first
        self.second = second


class PrefixError(CudaRedistError):
    def __init__(self, message: str, *, prefix: str = "") -> None:
        super().__init__(message)
        self.prefix = prefix


class RecordError(PrefixError):
    """The install record of ``prefix`` cannot be read, or lacks what every command needs
    (``problem`` names the field, e.g. ``plan.platform is missing``)."""

    def __init__(self, message: str, *, prefix: str = "", record: str = "", problem: str = "") -> None:
        super().__init__(message, prefix=prefix)
        self.record = record
        self.problem = problem


class BusyError(CudaRedistError):
    """Another process held the lock of ``path`` (a prefix, a cache entry, a mirror) past the timeout."""

    exit_code = 75  # EX_TEMPFAIL: try again later

    def __init__(self, message: str, *, path: str = "", lock: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.lock = lock


class LockFileError(CudaRedistError):
    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class ImportLibraryError(CudaRedistError):
    def __init__(self, message: str, *, dll: str = "") -> None:
        super().__init__(message)
        self.dll = dll


class LocalDiskError(CudaRedistError):
    """A write on this machine failed (ENOSPC, EACCES, EROFS, ENAMETOOLONG, ...): not the archive's fault.

    ``path`` is what was being written, ``where`` the directory the user chose (the one holding
    the prefix, or the cache), ``errno`` the OS error number (0 for a refusal made in advance).
    """

    def __init__(self, message: str, *, path: str = "", where: str = "", errno: int = 0) -> None:
        super().__init__(message)
        self.path = path
        self.where = where
        self.errno = errno


class CacheError(LocalDiskError):
    """The cache directory cannot be used, or is not a cudaredist cache (nothing in it is touched)."""


class ToolError(CudaRedistError):
    """A program cudaredist ran failed: ``command`` (argv), its exit ``status`` and ``output``."""

    def __init__(self, message: str, *, command: tuple[str, ...] = (), status: int = 0,
                 output: str = "") -> None:
        super().__init__(message)
        self.command = command
        self.status = status
        self.output = output
