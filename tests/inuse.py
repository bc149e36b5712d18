"""A file another process holds open, as an editor, a running program or a scan holds one.

On Windows (the Windows CPython, Wine included) a second Python opens it with share mode 0,
so deleting or renaming it fails with a sharing violation (WinError 32), as on a real host.
Elsewhere that refusal is injected into the ``os`` calls that delete or rename it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

_HOLD = ("import _winapi, sys\n"
         "h = _winapi.CreateFile(sys.argv[1], 0x80000000, 0, 0, 3, 0, 0)\n"  # GENERIC_READ, no sharing
         "print('held', flush=True)\n"
         "sys.stdin.readline()\n"
         "_winapi.CloseHandle(h)\n")


def sharing_violation(filename: str = "") -> PermissionError:
    exc = PermissionError(errno.EACCES, "The process cannot access the file because it is being used "
                                        "by another process", filename or None)
    exc.winerror = 32  # type: ignore[attr-defined] - only Windows sets it
    return exc


@contextlib.contextmanager
def held(path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While inside, ``path`` cannot be deleted or renamed (another process has it open)."""
    if os.name == "nt":
        with subprocess.Popen([sys.executable, "-c", _HOLD, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            try:
                assert proc.stdout.readline().strip() == "held"
                yield
            finally:
                proc.stdin.close()  # the holder reads EOF, closes its handle and exits
                proc.wait(60)
        return
    name = path.name
    with monkeypatch.context() as m:
        for call in ("unlink", "remove", "rename", "replace"):
            m.setattr(os, call, _refusing(getattr(os, call), name))
        yield


def _refusing(real: Callable[..., Any], name: str) -> Callable[..., Any]:
    def call(src: Any, *args: Any, **kwargs: Any) -> Any:
        if os.path.basename(os.fspath(src)) == name:
            raise sharing_violation(os.fspath(src))
        return real(src, *args, **kwargs)

    return call
