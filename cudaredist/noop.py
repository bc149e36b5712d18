"""A repeated no-op ``install --prefix`` answered before the command line is built (I/O).

The no-op of ``cudaredist install TRAIN --prefix P`` reads the prefix's record and nothing else (no
network, no cache), yet importing and building typer's command line takes 0.1-0.15 s of the 0.2 s it
costs. So when the full command line has decided a no-op, it keeps what it printed in
``P/.cudaredist/noop.json``, under a key of everything that decision read: the arguments, the
working directory, every ``CUDAREDIST_*`` variable, the host, the Python and cudaredist's version;
beside the identity (inode, size, mtime) of the record it read. The same command again finds its
answer there, checks the record is still that file and that no killed run left anything beside the
prefix, and prints the answer (``--json`` too: a no-op's JSON depends on the record alone), without
typer.

Any other command line goes the full way: another argument, an option not in :data:`REPLAYABLE`
(those that act: ``--reinstall``, ``--refresh``, ``--lock`` ...: :data:`ACTING`; a test makes every
install option be classified), a rewritten or removed record. The key is a hash, so no variable's
value (a token in a mirror URL) is written. Best effort both ways: a stamp that cannot be read or
written means the full way, never an error.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

from cudaredist import __version__

STAMP = "noop.json"
RECORD = os.path.join(".cudaredist", "record.json")
MAX_ANSWERS = 16
# install's options whose effect on a no-op is all in the arguments (each also with "=VALUE")
REPLAYABLE = frozenset({
    "--prefix", "--install-dir", "--platform", "-p", "--profile", "--component", "-c", "--only",
    "--with", "-w", "--base-url", "--channel", "--mirror", "--no-fallback", "--trusted-host", "--cache-dir",
    "--offline", "--jobs", "-j", "--link-mode", "--lock-timeout", "--quiet", "-q", "--verbose", "-v",
    "--source", "--index-url", "--json"})
# the ones that act, or answer from what a file holds now: always the full way
ACTING = frozenset({"--reinstall", "--refresh", "--replace-foreign", "--force", "--lock", "--help"})


def prefix_of(argv: list[str]) -> str | None:
    """The --prefix of an ``install`` command line that a stamp may answer, else None."""
    if argv[:1] != ["install"]:
        return None
    found: list[str] = []
    for i, arg in enumerate(argv[1:], 1):
        if arg == "--":
            return None
        if arg.startswith("-"):
            name, eq, value = arg.partition("=")
            if name not in REPLAYABLE:
                return None
            if name == "--prefix":
                found.append(value if eq else (argv[i + 1] if i + 1 < len(argv) else ""))
    return found[0] if len(found) == 1 and found[0] else None


def _key(argv: list[str]) -> str:
    import hashlib

    host = (os.uname().machine if hasattr(os, "uname")
            else os.environ.get("PROCESSOR_ARCHITEW6432") or os.environ.get("PROCESSOR_ARCHITECTURE", ""))
    env = sorted((k, v) for k, v in os.environ.items() if k.upper().startswith("CUDAREDIST_"))
    body = json.dumps([__version__, sys.executable, sys.platform, host, os.getcwd(), argv, env])
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def _identity(prefix: str) -> list[int] | None:
    """The record file's (inode, size, mtime), if no killed run left staging beside the prefix (the
    rule of :func:`cudaredist.record.leftovers`, which the installer cleans first)."""
    prefix = os.path.abspath(os.path.expanduser(prefix))
    st = os.stat(os.path.join(prefix, RECORD))
    parent, name = os.path.split(prefix)
    mark = f".{name}.cudaredist-"
    if any(entry.startswith(mark) for entry in os.listdir(parent or ".")):
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def _stamp_path(prefix: str) -> str:
    return os.path.join(os.path.abspath(os.path.expanduser(prefix)), ".cudaredist", STAMP)


def lookup(argv: list[str]) -> tuple[tuple[str, str] | None, list[int] | None]:
    """(what the full command line printed, stdout and stderr, for this no-op if it still holds;
    the record's identity now, for :func:`remember`): one stat and one listing for the entry point."""
    prefix = prefix_of(argv)
    if prefix is None:
        return None, None
    try:
        ident = _identity(prefix)
    except OSError:
        return None, None
    if ident is None:
        return None, None
    try:
        with open(_stamp_path(prefix), encoding="utf-8") as fh:
            stamp = json.load(fh)
        said = stamp.get("answers", {}).get(_key(argv)) if stamp.get("record") == ident else None
    except (OSError, ValueError, AttributeError):
        said = None
    if isinstance(said, list) and len(said) == 2 and all(isinstance(x, str) for x in said):
        return (said[0], said[1]), ident
    return None, ident


def answer(argv: list[str]) -> tuple[str, str] | None:
    """What the full command line printed (stdout, stderr) for this no-op, if it still holds."""
    return lookup(argv)[0]


def before(argv: list[str]) -> list[int] | None:
    """The record's identity before the full command line reads it (None: nothing to remember)."""
    prefix = prefix_of(argv)
    if prefix is None:
        return None
    try:
        return _identity(prefix)
    except OSError:
        return None


def remember(argv: list[str], ident: list[int] | None, out: str, err: str) -> None:
    """Keep what this no-op printed (``out``, ``err``) as the answer to ``argv``, if the record is
    still the file it was before the command line read it (``ident``, from :func:`before`): one a
    concurrent install rewrote meanwhile gets no answer it did not give."""
    prefix = prefix_of(argv)
    if prefix is None or ident is None:
        return
    path = _stamp_path(prefix)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        if _identity(prefix) != ident:
            return
        try:
            with open(path, encoding="utf-8") as fh:
                stamp = json.load(fh)
            answers = dict(stamp["answers"]) if stamp.get("record") == ident else {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            answers = {}
        answers[_key(argv)] = [out, err]
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"record": ident, "answers": dict(list(answers.items())[-MAX_ANSWERS:])}, fh)
        os.replace(tmp, path)
    except OSError:  # a read-only prefix, a full disk: the next no-op takes the full way
        with contextlib.suppress(OSError):
            os.unlink(tmp)
