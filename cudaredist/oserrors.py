"""An OSError on this machine -> a :class:`LocalError` saying what failed, where, and what to do."""

from __future__ import annotations

import errno as _errno
import os
from pathlib import Path

from cudaredist.errors import LocalError


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


def local_error(exc: OSError, *, doing: str, path: Path | str | None = None, option: str = "",
                cls: type[LocalError] = LocalError) -> LocalError:
    """``exc`` as one paragraph: "cannot <doing> <path>: <strerror>; <next step>"."""
    where = str(path if path is not None else exc.filename or "")
    reason = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc) or type(exc).__name__)
    if exc.errno == _errno.EEXIST and where and os.path.lexists(where) and not os.path.isdir(where):
        reason = "it is a file, not a directory"  # mkdir(parents=True) says only "File exists"
    if not where:
        return cls(f"a file operation failed: {reason}; --verbose shows where it happened",
                   errno=exc.errno)
    return cls(f"cannot {doing} {where}: {reason}; {next_step(exc.errno, where, option)}",
               path=where, errno=exc.errno)
