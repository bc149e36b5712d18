"""The error tree. Every failure a user can cause or meet is one of these.

    CudaRedistError            base; ``str(err)`` is the one-paragraph message for stderr
    ├── UsageError             options that clash, an unknown value, a missing environment (exit 2)
    ├── ManifestError          a redistrib JSON (or a profile file) is malformed
    ├── ResolveError           a train/release does not exist at the base URL
    ├── PlanError              a component/platform/profile cannot be planned
    ├── FetchError             network or file access failed (after retries)
    │   └── OfflineError       --offline and something is not in the cache
    ├── TrustError             a manifest or index page (the hashes) would come from unauthenticated HTTP
    ├── IntegrityError         size or sha256 of a download or cache entry is wrong
    ├── UnsafeArchiveError     an archive member would escape the prefix or is a device
    ├── ConflictError          two archives write one path with different content
    ├── PrefixError            the prefix cannot be used (not ours, not installed)
    │   └── RecordError        its install record is unreadable or damaged
    ├── BusyError              another process held a lock (prefix, cache entry, mirror) too long (exit 75)
    ├── LocalDiskError         a file operation on this machine failed (full, read-only, no permission)
    │   └── CacheError         the cache directory cannot be used, or is not a cudaredist cache (left as is)
    ├── LockFileError          a lock file is malformed or the resolution drifted from it
    └── ImportLibraryError     a Windows DLL's export table cannot be read for an import library

Each carries the fields its message is built from, so callers test types and
fields, never message text.
"""

from __future__ import annotations


class CudaRedistError(Exception):
    """Base class: the message is complete and actionable on its own. Keyword arguments set the
    fields a subclass declares (with their defaults as class attributes); an undeclared one is a
    TypeError, as it would be for a hand-written ``__init__``."""

    exit_code = 1

    def __init__(self, message: str, **fields: object) -> None:
        super().__init__(message)
        for name, value in fields.items():
            if not any(name in vars(k).get("__annotations__", {}) for k in type(self).__mro__):
                raise TypeError(f"{type(self).__name__} has no field {name!r}")
            setattr(self, name, value)


class UsageError(CudaRedistError):
    exit_code = 2


class ManifestError(CudaRedistError):
    source: str = ""
    entry: str = ""


class ResolveError(CudaRedistError):
    requested: str = ""
    where: str = ""
    available: tuple[str, ...] = ()


class PlanError(CudaRedistError):
    component: str = ""
    release: str = ""
    platform: str = ""


class FetchError(CudaRedistError):
    url: str = ""
    status: int | None = None


class OfflineError(FetchError):
    pass


class TrustError(CudaRedistError):
    url: str = ""
    host: str = ""


class IntegrityError(CudaRedistError):
    url: str = ""
    what: str = ""
    expected: str | int = ""
    actual: str | int = ""


class UnsafeArchiveError(CudaRedistError):
    archive: str = ""
    member: str = ""


class ConflictError(CudaRedistError):
    path: str = ""
    first: str = ""
    second: str = ""


class PrefixError(CudaRedistError):
    prefix: str = ""


class RecordError(PrefixError):
    """The install record of ``prefix`` cannot be read, or lacks what every command needs."""


class BusyError(CudaRedistError):
    exit_code = 75  # EX_TEMPFAIL: try again later
    path: str = ""
    lock: str = ""


class LockFileError(CudaRedistError):
    path: str = ""


class ImportLibraryError(CudaRedistError):
    dll: str = ""


class LocalDiskError(CudaRedistError):
    """A write on this machine failed (ENOSPC, EACCES, EROFS, ENAMETOOLONG, ...): not the archive's fault.

    ``path`` is what was being written, ``where`` the directory the user chose (the one holding
    the prefix, or the cache), ``errno`` the OS error number (0 for a refusal made in advance).
    """

    path: str = ""
    where: str = ""
    errno: int = 0


class CacheError(LocalDiskError):
    pass
