"""Renames, replaces and deletes that survive a Windows host's habits.

On Windows a file another process holds open cannot be renamed or deleted: antivirus scanners
and indexers open fresh DLLs for a moment after they are written, and the call fails with a
sharing violation (WinError 32) or an access denial (WinError 5). Those are retried with a
bounded backoff. A read-only file (as some archives ship them) is made writable before it is
deleted, and paths longer than MAX_PATH get the extended-length ``\\\\?\\`` prefix. On other
hosts the calls behave as the plain ``os`` ones, with the read-only handling of directories.
"""

from __future__ import annotations

import errno
import ntpath
import os
import shutil
import stat
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# Windows error codes worth waiting out: ERROR_ACCESS_DENIED, ERROR_SHARING_VIOLATION,
# ERROR_LOCK_VIOLATION (another handle holds the file for a moment)
TRANSIENT_WINERRORS = frozenset({5, 32, 33})
DELAYS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.0, 1.0)  # about 5 s in all
MAX_PATH = 260
# The one test of the host OS: every module imports it from here (tests flip a module's copy to
# check its Windows rules on any host)
WINDOWS = os.name == "nt"

_sleep: Callable[[float], None] = time.sleep  # tests replace it


def retrying(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, retried while it fails with a transient Windows error (bounded)."""
    for delay in DELAYS:
        try:
            return fn(*args)
        except OSError as exc:
            if getattr(exc, "winerror", None) not in TRANSIENT_WINERRORS:
                raise
        _sleep(delay)
    return fn(*args)


def long_path(path: str | os.PathLike[str], *, nt: bool | None = None) -> str:
    """``path`` as the OS call should get it: on Windows, an absolute path of MAX_PATH or more
    characters becomes an extended-length one (``\\\\?\\C:\\...``, ``\\\\?\\UNC\\server\\share\\...``).
    Pure: ``nt`` picks the rules (default: this host's)."""
    p = os.fspath(path)
    if not (WINDOWS if nt is None else nt):
        return p
    if p.startswith("\\\\?\\") or len(p) < MAX_PATH - 12:  # 12: room for a file name in a directory
        return p
    full = ntpath.normpath(p)
    if full.startswith("\\\\"):
        return "\\\\?\\UNC\\" + full[2:]
    if len(full) >= 3 and full[1] == ":" and full[2] == "\\":
        return "\\\\?\\" + full
    return p  # relative: the prefix would change its meaning


def short_path(path: str) -> str:
    """``path`` without the extended-length prefix (for comparing with plain paths)."""
    if path.startswith("\\\\?\\UNC\\"):
        return "\\\\" + path[8:]
    if path.startswith("\\\\?\\"):
        return path[4:]
    return path


def rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    retrying(os.rename, long_path(src), long_path(dst))


def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    retrying(os.replace, long_path(src), long_path(dst))


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """``data`` at ``path`` through a temp file beside it (``.NAME.*.part``) renamed over it: a
    reader (or a killed run) sees the old content or the new, never part of it."""
    head, name = os.path.split(path)
    tmp = os.path.join(head, f".{name}.{uuid.uuid4().hex[:8]}.part")
    with open(tmp, "xb") as fh:  # not mkstemp: the umask gives the mode, as for any file we write
        fh.write(data)
    replace(tmp, path)


def _make_writable(p: str) -> None:
    try:
        st = os.lstat(p)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode):
        return
    if stat.S_ISDIR(st.st_mode):
        os.chmod(p, stat.S_IRWXU)
    elif WINDOWS:
        os.chmod(p, stat.S_IWRITE | stat.S_IREAD)  # clears FILE_ATTRIBUTE_READONLY


def unlink(path: str | os.PathLike[str]) -> None:
    p = long_path(path)

    def once() -> None:
        try:
            os.unlink(p)
        except PermissionError:
            if not WINDOWS:
                raise
            _make_writable(p)  # a read-only file; a held one fails again, and is retried
            os.unlink(p)

    retrying(once)


def rmtree(path: str | os.PathLike[str]) -> None:
    """Delete a file, a link or a tree: read-only entries made writable, transient errors retried.

    Each entry gets one bounded wait (:func:`retrying`, about 5 s), not the whole walk again
    around it: a file another process keeps open costs seconds, then its error is raised."""
    p = long_path(path)
    if is_link(p) or os.path.isfile(p):
        remove_link(p)  # a link or a junction goes, never its target's contents
        return
    if not os.path.exists(p):
        return

    def again(func: Any, name: str, _exc: Any) -> None:
        # a read-only directory refuses to lose its entries; a read-only file (Windows) to go
        parent = os.path.dirname(name)
        if parent:
            _make_writable(parent)
        _make_writable(name)
        retrying(func, name)

    if sys.version_info >= (3, 12):
        shutil.rmtree(p, onexc=again)
    else:
        shutil.rmtree(p, onerror=again)


def symlink(target: str, dest: str | os.PathLike[str], *, directory: bool = False) -> None:
    """``os.symlink``, and an OSError (EPERM, as without the right) where the host reports success
    and makes nothing (Wine does): callers fall back to a copy either way."""
    where = long_path(dest)
    os.symlink(target, where, target_is_directory=directory)
    if WINDOWS and not os.path.lexists(where):
        raise OSError(errno.EPERM, "the symbolic link was not created", os.fspath(dest))


def is_junction(path: str | os.PathLike[str]) -> bool:
    """A directory junction (Windows' mount-point reparse point, what ``mklink /J`` makes).
    Python's ``islink`` says no to it; ``os.path.isjunction`` exists from 3.12."""
    if not WINDOWS:
        return False
    isjunction = getattr(os.path, "isjunction", None)
    if isjunction is not None:
        return bool(isjunction(path))
    try:  # pragma: no cover - Windows before 3.12
        st = os.lstat(path)
    except OSError:
        return False
    return bool(getattr(st, "st_file_attributes", 0) & stat.FILE_ATTRIBUTE_REPARSE_POINT) and \
        getattr(st, "st_reparse_tag", 0) == 0xA0000003  # IO_REPARSE_TAG_MOUNT_POINT


def is_link(path: str | os.PathLike[str]) -> bool:
    """A symbolic link or a junction: an entry whose target is not ours to walk into or delete."""
    return os.path.islink(path) or is_junction(path)


def remove_link(path: str | os.PathLike[str]) -> None:
    """Remove a symlink or junction itself, never what it points at."""
    if is_junction(path):
        retrying(os.rmdir, long_path(path))  # how a junction is removed; its target stays
    else:
        unlink(path)


def find_held(tree: str | os.PathLike[str], limit: int = 20000) -> str | None:
    """The first file under ``tree`` that another process holds open without sharing delete (so
    the tree cannot be renamed or deleted), or None. Windows only: each file is opened for DELETE
    access with every share mode, which fails with a sharing violation exactly when some other
    handle refuses to share it. Bounded by ``limit`` files. Its one caller asks only on a Windows error
    (``winerror`` 5)."""
    import _winapi

    delete, share_all, open_existing, backup_semantics = 0x00010000, 0x7, 3, 0x02000000
    seen = 0
    for dirpath, dirnames, filenames in os.walk(long_path(tree)):
        dirnames[:] = [d for d in dirnames if not is_link(os.path.join(dirpath, d))]
        for name in filenames:
            seen += 1
            if seen > limit:
                return None
            path = os.path.join(dirpath, name)
            try:
                handle = _winapi.CreateFile(  # type: ignore[attr-defined]
                    path, delete, share_all, 0, open_existing, backup_semantics, 0)
            except OSError as exc:
                if getattr(exc, "winerror", None) in (32, 33):
                    return short_path(path)
                continue
            _winapi.CloseHandle(handle)  # type: ignore[attr-defined]
    return None


def holder_hint(exc: BaseException) -> str:
    """For a sharing or lock violation (WinError 32/33): which file, and that a process holds it."""
    if getattr(exc, "winerror", None) in (32, 33) and isinstance(exc, OSError):
        return (f"another process has {exc.filename or 'a file in it'} open (an editor, a shell whose "
                "current directory is in it, a running program, an antivirus scan)")
    return ""
