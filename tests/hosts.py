"""What the host running the tests can do, for the tests that depend on it.

The suite also runs under the official Windows CPython (under Wine in CI: see
../shared/tools/wine-python.sh, whose header lists Wine's limits). A test that needs a POSIX
feature skips there with ``posix_only``; one that needs what Windows has but Wine lacks skips
only under Wine with ``wine_limit``. Both say why.
"""

from __future__ import annotations

import functools
import os
import platform
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

WINDOWS = os.name == "nt"
UNDER_WINE = WINDOWS and os.environ.get("UNDER_WINE") == "1"


def require_linux_x86_64() -> None:
    """Skip the calling test module unless this host runs linux-x86_64 NVIDIA binaries."""
    if not (sys.platform == "linux" and platform.machine().lower() in ("x86_64", "amd64")):
        pytest.skip("linux-x86_64 NVIDIA binaries run only on a linux-x86_64 host", allow_module_level=True)


def posix_only(why: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(WINDOWS, reason=f"POSIX: {why}")


def wine_limit(why: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(UNDER_WINE, reason=f"Wine: {why}")


def skip_on_windows(why: str) -> None:
    """Skip the running test on Windows (a POSIX feature it cannot do without)."""
    if WINDOWS:
        pytest.skip(f"POSIX: {why}")


@functools.cache
def symlinks_work() -> bool:
    """Whether this host makes symlinks: POSIX does; Windows needs the right (developer mode or
    an elevated shell), and Wine's os.symlink "succeeds" and makes nothing."""
    if not WINDOWS:
        return True
    with tempfile.TemporaryDirectory() as d:
        try:
            os.symlink("target", os.path.join(d, "link"))
        except OSError:
            return False
        return os.path.islink(os.path.join(d, "link"))


def assert_link(path: Path, target: str) -> None:
    """``path`` is a symlink to ``target``, or on a host that cannot make symlinks what the tree
    makes instead: a copy of what ``target`` names (a file's bytes, a directory's entries)."""
    if symlinks_work():
        assert os.readlink(path) == target, path
        return
    assert not os.path.islink(path), path
    real = path.parent / target
    if real.is_dir():
        assert path.is_dir() and sorted(p.name for p in path.iterdir()) == sorted(
            p.name for p in real.iterdir()), path
    else:
        assert path.is_file() and path.read_bytes() == real.read_bytes(), path


def need_cryptography() -> None:
    """Skip under Wine when the cryptography wheel cannot load its Rust extension (its DLL does not
    load there); anywhere else an import error stays an error."""
    if UNDER_WINE:
        try:
            import cryptography.hazmat.bindings._rust  # noqa: F401
        except ImportError as exc:
            pytest.skip(f"Wine: the cryptography wheel's Rust extension does not load ({exc})")


def fd_paths(mp: pytest.MonkeyPatch) -> Callable[[int], str]:
    """fd -> the path of the file it is open on, "/"-separated. Linux names it in /proc; elsewhere
    (Windows has no /proc) the os.open calls made from now on are watched."""
    if sys.platform == "linux":
        return lambda fd: os.readlink(f"/proc/self/fd/{fd}")
    real_open, real_close = os.open, os.close
    paths: dict[int, str] = {}

    def open_(path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        fd = real_open(path, flags, mode, **kw)
        paths[fd] = os.path.abspath(os.fspath(path)).replace(os.sep, "/")
        return fd

    def close(fd: int) -> None:
        paths.pop(fd, None)
        real_close(fd)

    mp.setattr(os, "open", open_)
    mp.setattr(os, "close", close)
    return lambda fd: paths.get(fd, "")


def assert_mode(path: Path, expected: int) -> None:
    """POSIX: ``path``'s permission bits are ``expected``. Windows keeps only a read-only flag (a
    program is one by its name; the record keeps the mode): writable exactly as ``expected`` says."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if WINDOWS:
        assert mode & stat.S_IWRITE == expected & stat.S_IWRITE, (path, oct(mode))
    else:
        assert mode == expected, (path, oct(mode))


# install.py: a Windows host cannot rename a file another handle holds open, so it extracts an
# archive once it is there; what is read while it downloads is checked on every host by the
# tests that drive the streaming readers directly.
posix_streaming = posix_only("extraction while the archive downloads (Windows extracts each archive "
                             "once it is there: it cannot rename a file another handle holds open)")

needs_symlinks = pytest.mark.skipif(
    not symlinks_work(), reason="Wine: no symlinks (os.symlink succeeds and makes nothing); on Windows "
    "they need the symlink right" if UNDER_WINE else "Windows: this host lacks the symlink right")


def split_line(line: str) -> list[str]:
    """A command line as this host's shell reads it back into argv: POSIX quoting here,
    ``subprocess.list2cmdline``'s (backslashes kept, double quotes around a word) on Windows."""
    import shlex

    if not WINDOWS:
        return shlex.split(line)
    return [w[1:-1] if len(w) > 1 and w[0] == w[-1] == '"' else w for w in shlex.split(line, posix=False)]
