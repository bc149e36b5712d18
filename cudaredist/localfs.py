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


def umask_keeps(mode: int) -> bool:
    """Whether a file created with ``mode`` gets exactly it (no chmod after): the umask takes none."""
    return mode & ~UMASK == mode


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def free_bytes(directory: Path) -> int | None:
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return None


def read_only(directory: Path) -> bool:
    """Is ``directory`` on a filesystem mounted read-only, or one this process may not write in
    (a shared cache others filled)? False when that cannot be told."""
    try:
        if hasattr(os, "statvfs") and os.statvfs(directory).f_flag & os.ST_RDONLY:
            return True
        return directory.is_dir() and not os.access(directory, os.W_OK)
    except OSError:
        return False


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
CACHE_OPTION = "--cache-dir (or CUDAREDIST_CACHE_DIR)"


def local_error(exc: OSError, *, doing: str = "write to", path: Path | str | None = None,
                where: Path | str | None = None, option: str = "", kept: str = "", what: str = "",
                written: int = 0, needs: int = 0, symlink: bool = False,
                cls: type[LocalDiskError] = LocalDiskError) -> LocalDiskError:
    """``exc`` (raised trying to ``doing`` ``path``) as one paragraph saying what to do: the one
    reading of a failed file operation on this machine.

    ``where``: the directory the user chose with ``option`` (default: ``path``); ``kept``: what was
    left as it was, said last; ``what`` needs ``needs`` bytes and had ``written`` when the disk filled
    up; ``symlink``: the failed call was symlink(), so EPERM/ENOSYS mean "no symlinks here".
    """
    shown = str(path if path is not None else exc.filename or "")
    exc = directory_as_file(exc, shown)
    code, where, other = exc.errno or 0, str(where or shown), option or "location"
    reason = exc.strerror or (os.strerror(code) if code else str(exc) or type(exc).__name__)
    if code == _errno.EEXIST and shown and os.path.lexists(shown) and not os.path.isdir(shown):
        reason = "it is a file, not a directory"  # mkdir(parents=True) says only "File exists"
    end = f"; {kept}." if kept else "."
    held = holder_hint(exc)
    if held:
        message = f"cannot {doing} {shown}: {held}. Close it, or wait for it to finish, and run again{end}"
    elif not shown:
        message = f"a file operation failed: {reason}; --verbose shows where it happened"
    elif code in _NO_SPACE:
        free = free_bytes(Path(where))
        need = [f"more than {mb(written)} (written when it filled up)"] if written else []
        need += [f"about {mb(needs)}"] if needs else []
        needs_text = f": the {what} needs {' and '.join(need)}" if need and what else ""
        free_text = f", {mb(free)} free now" if free is not None else ""
        message = (f"no space left on the device holding {where}{needs_text}{free_text}. Free space "
                   f"there or choose a {other} on another filesystem{end}")
    elif symlink and code in _NO_LINKS:
        message = (f"the filesystem holding {where} does not support symbolic links ({reason}), which "
                   f"this tree needs ({shown}). Choose a {other} on another filesystem{end}")
    elif code in (_errno.EACCES, _errno.EPERM):
        message = (f"cannot {doing} {where}: permission denied" + (f" ({shown})" if shown != where else "")
                   + f". Choose a {other} you own, or fix the permissions of {where}{end}")
    elif code == _errno.EROFS:
        message = (f"cannot {doing} {where}: it is on a read-only filesystem. Choose a {other} on a "
                   f"writable one{end}")
    elif code == _errno.ENAMETOOLONG:
        message = (f"the path {shown} is too long for the filesystem holding {where}. Choose a shorter "
                   f"{other}{end}")
    elif code in (_errno.ENOTDIR, _errno.EEXIST, _errno.EISDIR):
        message = (f"cannot {doing} {shown}: a file stands where a directory should be, or a directory "
                   f"where a file should be ({reason}). Remove it or choose another {other}{end}")
    elif code == _errno.ENOENT:
        message = f"cannot {doing} {shown}: {reason}; check that it exists, or choose another {other}{end}"
    else:
        message = (f"cannot {doing} {shown} ({reason}); the local disk refused it, not the archive. "
                   f"Check {where} or choose another {other}{end}")
    return cls(message, path=shown, where=where, errno=code)


def disk_error(exc: OSError, *, path: Path | str, where: Path | str, cache: bool = False,
               written: int = 0, needs: int = 0, symlink: bool = False,
               cached: str = "download") -> LocalDiskError:
    """:func:`local_error` for a write into the prefix under ``where``, or (``cache``) of a
    ``cached`` thing ("download", "unpacked copy") into the cache under ``where``."""
    return local_error(exc, path=path, where=where, written=written, needs=needs, symlink=symlink,
                       option=CACHE_OPTION if cache else "--prefix", what=cached if cache else "tree",
                       kept=f"the partial {cached} was removed" if cache else
                       "the prefix was left as it was and verified downloads stay in the cache")


def check_free_space(directory: Path, needed: int, *, what: str, option: str = "--prefix") -> None:
    """Refuse early only when the space is clearly insufficient (``needed`` is a lower bound);
    ``option`` names where the user chose ``directory`` (``--prefix``, ``--cache-dir``)."""
    free = free_bytes(directory)
    if free is not None and free < needed:
        raise LocalDiskError(
            f"not enough space on the device holding {directory}: {mb(free)} free, and {what} needs "
            f"at least {mb(needed)}. Free space there or choose a {option} on another filesystem; "
            "nothing was downloaded or changed.", path=str(directory), where=str(directory),
            errno=_errno.ENOSPC)


def directory_as_file(exc: OSError, path: Path | str | None = None) -> OSError:
    """``exc`` as POSIX reports opening a directory as a file (EISDIR, "Is a directory"): Windows
    says "Permission denied" (EACCES), which would send the user to fix permissions that are fine."""
    where = str(path if path is not None else exc.filename or "")
    if WINDOWS and exc.errno == _errno.EACCES and where and os.path.isdir(where):
        return IsADirectoryError(_errno.EISDIR, os.strerror(_errno.EISDIR), where)
    return exc
