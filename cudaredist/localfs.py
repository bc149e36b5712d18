"""What the local filesystem allows: disk errors a user can act on, free space, case folding, the umask."""

from __future__ import annotations

import errno as _errno
import os
import shutil
import tempfile
import unicodedata
from pathlib import Path

from cudaredist.errors import LocalDiskError
from cudaredist.fsops import WINDOWS, holder_hint

_WAIT = ("close it (or wait for the scan or build to finish) and run the command again; nothing about "
         "permissions needs changing")


def _read_umask() -> int:
    """The process umask, without changing it where the OS can tell (Linux: /proc/self/status)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)  # elsewhere: set and restore, once, while the process is single-threaded
    os.umask(old)
    return old


# Read once at import, before any worker thread exists: os.umask() sets process-wide state, so
# calling it from a thread would give files another thread creates meanwhile the wrong modes.
UMASK = _read_umask()


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def free_bytes(directory: Path) -> int | None:
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return None


def fold(path: str) -> str:
    """A path as a case-insensitive filesystem compares it (NTFS, APFS, exFAT): case and
    Unicode normalisation folded (canonical caseless matching, so folding errs toward equality)."""
    return unicodedata.normalize("NFD", unicodedata.normalize("NFD", path).casefold())


def is_case_insensitive(directory: Path) -> bool:
    """Whether ``directory``'s filesystem treats names differing only in case as one: create a
    file and look for its case-swapped name."""
    fd, name = tempfile.mkstemp(dir=directory, prefix=".case-probe-")
    os.close(fd)
    try:
        swapped = os.path.join(os.path.dirname(name), os.path.basename(name).swapcase())
        return os.path.lexists(swapped)
    finally:
        os.unlink(name)


_NO_SPACE = {_errno.ENOSPC, getattr(_errno, "EDQUOT", _errno.ENOSPC)}
_NO_LINKS = {_errno.ENOSYS, _errno.EOPNOTSUPP, _errno.EPERM, getattr(_errno, "ENOTSUP", _errno.EOPNOTSUPP)}


def disk_error(exc: OSError, *, path: Path | str, where: Path | str, cache: bool = False,
               written: int = 0, needs: int = 0, symlink: bool = False,
               cached: str = "download") -> LocalDiskError:
    """``exc`` (raised writing ``path`` under ``where``) as one paragraph saying what to do.

    ``cache``: ``where`` is the download cache (the advice names --cache-dir, not --prefix);
    ``written``/``needs``: bytes written so far / an estimate of the whole, for ENOSPC;
    ``symlink``: the failed call was symlink(), so EPERM/ENOSYS mean "no symlinks here";
    ``cached``: what was being written into the cache ("download", "unpacked copy").
    """
    code = exc.errno or 0
    reason = exc.strerror or str(exc)
    option = "--cache-dir (or CUDAREDIST_CACHE_DIR)" if cache else "--prefix"
    kept = (f"the partial {cached} was removed" if cache else
            "the prefix was left as it was and verified downloads stay in the cache")
    held = holder_hint(exc)
    if held:
        message = f"cannot write {path}: {held}. Close it, or wait for it to finish, and run again; {kept}."
    elif code in _NO_SPACE:
        free = free_bytes(Path(where))
        need = []
        if written:
            need.append(f"more than {mb(written)} (written when it filled up)")
        if needs:
            need.append(f"about {mb(needs)}")
        needs_text = f": the {cached if cache else 'tree'} needs {' and '.join(need)}" if need else ""
        free_text = f", {mb(free)} free now" if free is not None else ""
        message = (f"no space left on the device holding {where}{needs_text}{free_text}. Free space "
                   f"there or choose a {option} on another filesystem; {kept}.")
    elif symlink and code in _NO_LINKS:
        message = (f"the filesystem holding {where} does not support symbolic links ({reason}), which "
                   f"this tree needs ({path}). Choose a {option} on another filesystem; {kept}.")
    elif code in (_errno.EACCES, _errno.EPERM):
        message = (f"cannot write to {where}: permission denied ({path}). Choose a {option} you own; "
                   f"{kept}.")
    elif code == _errno.EROFS:
        message = (f"cannot write to {where}: it is on a read-only filesystem. Choose a {option} on a "
                   f"writable one; {kept}.")
    elif code == _errno.ENAMETOOLONG:
        message = (f"the path {path} is too long for the filesystem holding {where}. Choose a shorter "
                   f"{option}; {kept}.")
    elif code in (_errno.ENOTDIR, _errno.EEXIST, _errno.EISDIR):
        message = (f"cannot create {path}: a file stands where a directory should be, or a directory "
                   f"where a file should be ({reason}). Remove it or choose another {option}; {kept}.")
    else:
        message = (f"cannot write {path} ({reason}); the local disk refused it, not the archive. "
                   f"Check {where} or choose another {option}; {kept}.")
    return LocalDiskError(message, path=str(path), where=str(where), errno=code)


def check_free_space(directory: Path, needed: int, *, what: str) -> None:
    """Refuse early only when the space is clearly insufficient (``needed`` is a lower bound)."""
    free = free_bytes(directory)
    if free is not None and free < needed:
        raise LocalDiskError(
            f"not enough space on the device holding {directory}: {mb(free)} free, and {what} needs "
            f"at least {mb(needed)}. Free space there or choose a --prefix on another filesystem; "
            "nothing was downloaded or changed.", path=str(directory), where=str(directory),
            errno=_errno.ENOSPC)


# -- any other file operation: what failed, where, and the option that chose the place -----------------
def next_step(code: int | None, path: str, option: str = "") -> str:
    """What a user can do about ``code`` at ``path``; ``option`` names the option that chose it."""
    other = f"choose another {option}" if option else "choose another location"
    if code in (_errno.EACCES, _errno.EPERM):
        return (f"choose a {option} you can write to, or fix the permissions of {path}" if option
                else f"fix the permissions of {path}, or run as a user who may write there")
    if code in (_errno.ENOSPC, getattr(_errno, "EDQUOT", -1)):
        return f"free space on the device holding {path}" + (f", or {other} on another device"
                                                             if option else "")
    if code == _errno.EROFS:
        return f"{path} is on a read-only file system: {other} on a writable one"
    if code in (_errno.ENOTDIR, _errno.EEXIST):
        return f"a file stands where a directory is needed in {path}: {other}, or move that file away"
    if code == _errno.EISDIR:
        return f"{path} is a directory where a file is needed: {other}"
    if code == _errno.ENAMETOOLONG:
        return f"the path is too long for this file system: {other} with a shorter path"
    if code == _errno.ENOENT:
        return f"check that {path} exists"
    return f"check {path} and its file system; --verbose shows where it happened"


def directory_as_file(exc: OSError, path: Path | str | None = None) -> OSError:
    """``exc`` as POSIX reports opening a directory as a file (EISDIR, "Is a directory"): Windows
    says "Permission denied" (EACCES), which would send the user to fix permissions that are fine."""
    where = str(path if path is not None else exc.filename or "")
    if WINDOWS and exc.errno == _errno.EACCES and where and os.path.isdir(where):
        return IsADirectoryError(_errno.EISDIR, os.strerror(_errno.EISDIR), where)
    return exc


def local_error(exc: OSError, *, doing: str, path: Path | str | None = None, option: str = "",
                cls: type[LocalDiskError] = LocalDiskError) -> LocalDiskError:
    """``exc`` as one paragraph: "cannot <doing> <path>: <strerror>; <next step>"."""
    where = str(path if path is not None else exc.filename or "")
    exc = directory_as_file(exc, where)
    reason = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc) or type(exc).__name__)
    if exc.errno == _errno.EEXIST and where and os.path.lexists(where) and not os.path.isdir(where):
        reason = "it is a file, not a directory"  # mkdir(parents=True) says only "File exists"
    held = holder_hint(exc)
    if held:
        return cls(f"cannot {doing} {where or exc.filename}: {held}; {_WAIT}",
                   path=where, where=where, errno=exc.errno or 0)
    if not where:
        return cls(f"a file operation failed: {reason}; --verbose shows where it happened",
                   errno=exc.errno or 0)
    return cls(f"cannot {doing} {where}: {reason}; {next_step(exc.errno, where, option)}",
               path=where, where=where, errno=exc.errno or 0)
