"""Putting a file of the unpacked cache into a tree: clone (copy-on-write), hard link, or copy.

``clone``    a reflink: FICLONE on Linux (btrfs, XFS, bcachefs, overlayfs on them), clonefile(2) on
             macOS (APFS). The two files share blocks until one is written: editing a file in the
             prefix never touches the cache. Where the filesystem cannot, a copy.
``hardlink`` one inode for the cache entry and every prefix made from it: the fastest, and the
             least disk, but editing a file in place in the prefix (``patchelf``, ``strip``) edits
             the cache entry and every other prefix linked to it. Falls back to a copy across
             filesystems.
``copy``     an independent copy through the kernel's fast paths (copy_file_range, sendfile).
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from pathlib import Path

from cudaredist import fsops
from cudaredist.errors import UsageError
from cudaredist.localfs import umask_keeps

ENV_LINK_MODE = "CUDAREDIST_LINK_MODE"
LINK_MODES = ("clone", "hardlink", "copy")
DEFAULT_LINK_MODE = "clone"
_FICLONE = 0x40049409  # _IOW(0x94, 9, int)
_BINARY = getattr(os, "O_BINARY", 0)
# errors meaning "this filesystem (pair) cannot do that": fall back, never fail
_UNSUPPORTED = {errno.EXDEV, errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL, errno.ENOSYS, errno.EPERM,
                errno.EMLINK, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}


def link_mode(given: str | None = None) -> str:
    value = (given or os.environ.get(ENV_LINK_MODE) or DEFAULT_LINK_MODE).strip().lower()
    if value not in LINK_MODES:
        raise UsageError(f"unknown link mode {value!r}: use one of {', '.join(LINK_MODES)}")
    return value


def place(src: str | Path, dest: str | Path, mode: str, perm: int, size: int | None = None) -> str:
    """Create ``dest`` (which must not exist) with ``src``'s bytes; returns how: clone|hardlink|copy.

    ``perm`` is applied to clones and copies; a hard link shares the cache file's own mode, which
    the unpacked cache keeps equal to the recorded one. ``size``: ``src``'s, when known (no fstat).
    A caller that saw a clone come back as a copy may ask for ``copy`` for the next files between
    the same two filesystems: the same result, without the failing ioctl each time."""
    # the cache adds unpacked/<64 hex>/tree/ to every path: Windows needs \\?\ past MAX_PATH
    src_os, dest_os = fsops.long_path(src), fsops.long_path(dest)
    if mode == "hardlink":
        try:
            os.link(src_os, dest_os)
            return "hardlink"
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED:
                raise
    if mode == "clone" and sys.platform == "darwin" and _clonefile(src_os, dest_os):  # pragma: no cover
        os.chmod(dest_os, perm)
        return "clone"
    # One open of each side: the clone is tried on the new file and, where the filesystem cannot
    # (ext4, tmpfs, NTFS), the copy goes on into that same file; no second create, no unlink.
    fd_in = os.open(src_os, os.O_RDONLY | _BINARY)
    try:
        # created with its mode where the umask leaves it whole (no fchmod then); else 0600 and set
        exact = umask_keeps(perm)
        fd_out = os.open(dest_os, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _BINARY, perm if exact else 0o600)
        try:
            how = "clone" if mode == "clone" and _clone_fd(fd_in, fd_out) else "copy"
            if how == "copy":
                _copy_fd(fd_in, fd_out, size)
            if hasattr(os, "fchmod") and not exact:
                os.fchmod(fd_out, perm)
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)
    if not hasattr(os, "fchmod"):  # pragma: no cover - Windows: only the read-only bit
        os.chmod(dest_os, perm)
    return how


def _clone_fd(fd_in: int, fd_out: int) -> bool:
    """A reflink of ``fd_in`` into the empty ``fd_out`` (Linux FICLONE); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    import fcntl

    try:
        fcntl.ioctl(fd_out, _FICLONE, fd_in)
        return True
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED and exc.errno != errno.EBADF:
            raise
    return False


def _clonefile(src: str, dest: str) -> bool:  # pragma: no cover - macOS only
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.clonefile(os.fsencode(src), os.fsencode(dest), 0) == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:
        return False
    raise OSError(err, os.strerror(err), str(dest))


def _copy_fd(fi: int, fo: int, size: int | None = None) -> None:
    """A whole-file copy in the kernel where it can (copy_file_range, then sendfile), else 1 MiB reads."""
    left = os.fstat(fi).st_size if size is None else size
    kernel = [f for f in (_copy_file_range, _sendfile) if f is not None]
    while left > 0 and kernel:
        try:
            n = kernel[0](fi, fo, left)
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED:
                raise  # ENOSPC, EIO: the caller reports it
            kernel.pop(0)  # this path cannot: the next one goes on from the same offsets
            continue
        if n == 0:
            break
        left -= n
    if left > 0:
        os.lseek(fi, os.lseek(fo, 0, os.SEEK_CUR), os.SEEK_SET)
        while chunk := os.read(fi, 1 << 20):
            view = memoryview(chunk)
            while view:
                view = view[os.write(fo, view):]


# looked up in os on each call (tests replace os.copy_file_range and os.write alike)
_copy_file_range: Callable[[int, int, int], int] | None = (
    (lambda fi, fo, count: os.copy_file_range(fi, fo, count)) if hasattr(os, "copy_file_range") else None)
_sendfile: Callable[[int, int, int], int] | None = (
    (lambda fi, fo, count: os.sendfile(fo, fi, None, count))
    if hasattr(os, "sendfile") and sys.platform.startswith("linux") else None)

