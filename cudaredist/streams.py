"""What stdout and stderr encode with, so a path outside the ANSI code page prints right or says why.

A Windows console gets text through WriteConsoleW and shows any path. A pipe or file gets bytes,
and Python's default for them is the ANSI code page (cp1252 and the like): a path such as
``C:\\Users\\<Cyrillic name>\\...`` (the managed default) cannot be encoded, and even a Latin one
comes out wrong, since ``for /f`` in cmd and PowerShell decode a program's output with the
console's *output* code page (OEM: 437, 850, 866, or 65001 after ``chcp 65001``). So a pipe or
file is written in that code page, or in UTF-8 with no console at all (a service, a CI agent);
``PYTHONIOENCODING`` and UTF-8 mode (``-X utf8``) still win. Text that code page cannot hold is
refused with one paragraph (:func:`unprintable`), never printed wrong: a path with ``?`` in it is
a different path. stderr, read by people, replaces instead of failing.
"""

from __future__ import annotations

import codecs
import os
import sys
from typing import Any

from cudaredist.errors import UsageError
from cudaredist.fsops import WINDOWS


def console_output_cp() -> int:  # pragma: no cover - Windows only (tests replace it)
    """The console's output code page; 0 when the process has no console."""
    import ctypes

    return int(ctypes.windll.kernel32.GetConsoleOutputCP())  # type: ignore[attr-defined]


def configure(stdout: Any = None, stderr: Any = None) -> None:
    """Set the encodings of a Windows process's redirected std streams (see the module doc); a std
    stream the process was started without (``>&-``, ``2>&-``) becomes the null device first."""
    _closed_as_null()
    if not WINDOWS or os.environ.get("PYTHONIOENCODING") or sys.flags.utf8_mode:
        return
    encoding: str | None = None
    for stream, errors in ((stdout or sys.stdout, "strict"), (stderr or sys.stderr, "backslashreplace")):
        if stream is None or not hasattr(stream, "reconfigure"):
            continue
        try:
            if stream.isatty():
                continue  # the console itself: WriteConsoleW, any character
        except (OSError, ValueError):
            continue
        if encoding is None:  # the console's output code page; UTF-8 without a console (0)
            cp = console_output_cp()
            try:
                encoding = "utf-8" if cp in (0, 65001) else codecs.lookup(f"cp{cp}").name
            except LookupError:
                encoding = "utf-8"
        stream.reconfigure(encoding=encoding, errors=errors)


def _closed_as_null() -> None:
    """Its descriptor taken, no file opened later lands on it (where a child or a stray write reaches
    it); stderr's text is dropped, so a command that succeeds still exits 0; stdout is opened read-only,
    so each write fails (EBADF) and a command whose output is its point says so (commands.base)."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        if getattr(sys, name) is None:
            null = os.open(os.devnull, os.O_WRONLY if fd == 2 else os.O_RDONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, "w" if fd else "r", errors="backslashreplace",  # noqa: SIM115 - the stream itself
                                    closefd=False))


def unprintable(exc: UnicodeEncodeError) -> UsageError:
    """The message for text that this output's encoding cannot hold."""
    text = str(exc.object)
    line = text[text.rfind("\n", 0, exc.start) + 1:].split("\n", 1)[0]
    bad = text[exc.start:exc.end]
    encoding = sys.stdout.encoding or exc.encoding
    if WINDOWS:
        fix = ("switch the console to UTF-8 first (cmd: `chcp 65001`; PowerShell: "
               "`[Console]::OutputEncoding = [Text.UTF8Encoding]::new()`), or set PYTHONIOENCODING=utf-8 "
               "for a file that is read as UTF-8")
    else:
        fix = "use a UTF-8 locale (LANG=C.UTF-8) or set PYTHONIOENCODING=utf-8"
    return UsageError(
        f"cannot print this line: {line.strip()} -- the characters {bad} do not exist in {encoding}, "
        f"the encoding of "
        f"this output (a pipe or file), and a path printed with a stand-in character would name "
        f"another file. To read it, {fix}; or use --json, whose output is ASCII. Nothing was changed.")
