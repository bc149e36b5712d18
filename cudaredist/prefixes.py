"""A prefix as a place: its lock, what a killed run left beside (or in) it, its record required
(or why it is missing), ``verify`` of the tree against it, and the uninstall.

The install record itself (what the tree holds, and whether it is what a request means today) is
:mod:`cudaredist.record`.
"""

from __future__ import annotations

import contextlib
import glob
import os
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudaredist import fsops, interrupts, sbom
from cudaredist.cache.store import ENV_LOCK_TIMEOUT, hold
from cudaredist.errors import PrefixError
from cudaredist.fsops import WINDOWS
from cudaredist.hashing import sha256_file
from cudaredist.interrupts import Interrupted
from cudaredist.record import RECORD_DIR, RECORD_FILE, SBOM_FILE, read_record, record_path
from cudaredist.redo import request_argv, shell_line


def canonical_prefix(prefix: Path | str) -> Path:
    p = Path(os.path.abspath(os.path.expanduser(str(prefix))))
    return p.resolve() if p.is_symlink() else p


def leftovers(prefix: Path) -> list[Path]:
    """Staging and moved-aside trees that a killed run left beside ``prefix``."""
    return sorted(prefix.parent.glob(f".{glob.escape(prefix.name)}.cudaredist-*"))


@contextlib.contextmanager
def prefix_lock(prefix: Path, timeout: float) -> Iterator[None]:
    """Hold ``.NAME.cudaredist.lock`` beside ``prefix``; removed on the way out when the prefix is
    gone (an uninstall), so a waiter that got the removed file takes the lock again. (filelock
    makes the folders above it: a parent that cannot be made is reported as the lock's.)"""
    with hold(prefix.parent / f".{prefix.name}.cudaredist.lock", timeout,
              f"{prefix} is busy: another cudaredist process has held its lock for {timeout:g}s. "
              f"Retry later, or wait longer with --lock-timeout / {ENV_LOCK_TIMEOUT}.", prefix,
              doing="create the lock file of the prefix in", where=prefix.parent, option="--prefix") as lock:
        try:
            yield
        finally:
            if not WINDOWS and not os.path.lexists(prefix):  # Windows' filelock removes it itself
                with contextlib.suppress(OSError):
                    os.unlink(lock.lock_file)


def recover(prefix: Path) -> list[str]:
    """Clean what a killed run left beside ``prefix`` (call with the prefix lock held).

    A moved-aside tree is put back when the prefix is missing (a swap cut short). One that
    cannot be deleted yet (a process still holds a file in it) is left for a later run, with
    a note: it is not in the way of anything. Files a killed uninstall had moved out of the tree
    go back while its record is there (the record goes last: until then the uninstall can be undone)."""
    actions: list[str] = []
    for p in leftovers(prefix):
        if p.name.startswith(f".{prefix.name}.cudaredist-old-") and not os.path.lexists(prefix):
            fsops.rename(p, prefix)
            actions.append(f"restored {prefix} from an interrupted swap")
            continue
        try:
            fsops.rmtree(p)
            actions.append(f"removed leftover {p.name}")
        except OSError as exc:
            actions.append(f"warning: {not_removed(p, exc)}")
    return actions + _undo_removing(prefix)


def _undo_removing(prefix: Path) -> list[str]:
    """Put back what a killed uninstall moved out of ``prefix`` while its record is there (it was
    not committed); once the record is gone only the emptying was cut short: finished here."""
    actions: list[str] = []
    for trash in _removing(prefix):
        if record_path(prefix).is_file():
            with interrupts.deferred():
                back = _put_back(prefix, trash)
            actions.append(f"put back {back} files an interrupted uninstall had moved out of {prefix}")
        else:
            with contextlib.suppress(OSError):
                fsops.rmtree(trash)
    return actions


def tidy(prefix: Path, timeout: float) -> list[str]:
    """:func:`recover` under the prefix lock, when a killed run left something beside ``prefix``
    (no lock taken otherwise): before the no-op check, so that it needs no network."""
    if not leftovers(prefix) and not _removing(prefix):
        return []
    with prefix_lock(prefix, timeout):
        return recover(prefix)


def cut_short(prefix: Path) -> str:
    """When ``prefix`` is missing because a swap was cut short (the previous tree still moved aside
    beside it), what to do about it; else ""."""
    if os.path.lexists(prefix):
        return ""
    old = next((p for p in leftovers(prefix) if p.name.startswith(f".{prefix.name}.cudaredist-old-")), None)
    if old is None:
        return ""
    try:
        rec = read_record(old)
    except PrefixError:
        rec = None
    redo = f"`{shell_line(request_argv(rec, prefix))}`" if rec is not None else \
        "the next `cudaredist install` on this prefix"
    return (f"{prefix} does not exist: an install was cut short while it swapped trees, and the previous "
            f"tree is still at {old}; {redo} puts it back (or move it back yourself)")


def require_record(prefix: Path) -> dict[str, Any]:
    rec = read_record(prefix)
    if rec is None:  # a swap cut short says so, else nothing is installed there
        raise PrefixError(cut_short(prefix) or f"{prefix} holds no cudaredist install (no {RECORD_DIR}/"
                          f"{RECORD_FILE})", prefix=str(prefix))
    return rec


def refuse_foreign(prefix: Path) -> None:
    """A :class:`PrefixError` when ``prefix`` holds something that is not a cudaredist install."""
    ours = (prefix / RECORD_DIR).is_dir()
    if not ours and prefix.exists() and (not prefix.is_dir() or any(prefix.iterdir())):
        what = "is a file, not a directory" if not prefix.is_dir() else \
            "exists and does not hold a cudaredist install"
        raise PrefixError(
            f"{prefix} {what}; refusing to replace it. Choose another --prefix, empty it, or "
            "pass --replace-foreign to replace it (everything in it is deleted).",
            prefix=str(prefix))


def not_removed(tree: Path, exc: OSError) -> str:
    held = fsops.holder_hint(exc)
    why = held or f"{exc.strerror or exc}: {exc.filename or tree}"
    return (f"the previous tree {tree} could not be removed yet ({why}); the next cudaredist run on "
            f"this prefix removes it, or delete it yourself once nothing uses it")



def _removing(prefix: Path) -> list[Path]:
    """The folders an uninstall moves the tree's files into (one a killed uninstall left)."""
    return sorted((prefix / RECORD_DIR).glob("removing-*"))


def _put_back(prefix: Path, trash: Path) -> int:
    """Move what ``trash`` holds (each entry at its path in the tree) back into ``prefix``; returns
    the entries put back. Nothing is overwritten; ``trash`` goes once it is empty."""
    back = 0
    for dirpath, dirnames, filenames in os.walk(trash):
        rel = os.path.relpath(dirpath, trash)
        here = prefix if rel == "." else prefix / rel
        keep = []
        for name in [*filenames, *dirnames]:
            moved = os.path.join(dirpath, name)
            if not os.path.lexists(here / name):
                # a file, a link, or a directory the tree lacks (a link the install had to copy): whole
                with contextlib.suppress(OSError):
                    fsops.rename(moved, here / name)
                    back += 1
            elif name in dirnames and not fsops.is_link(moved):
                keep.append(name)  # a directory the tree has: only the folder around files moved out of it
        dirnames[:] = keep
    _remove_empty(trash)
    return back


def _remove_empty(top: Path) -> None:
    """The empty directories of ``top`` (and ``top`` when it empties), bottom up: files stay."""
    dirs: list[str] = []
    for dirpath, dirnames, _files in os.walk(top):
        # never into a link or a junction (os.walk follows junctions: they are not islink)
        dirnames[:] = [d for d in dirnames if not fsops.is_link(os.path.join(dirpath, d))]
        dirs.append(dirpath)
    for dirpath in sorted(dirs, key=len, reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)  # only succeeds when empty


def uninstall(prefix: Path) -> int:
    """Remove exactly what the record lists (and then empty directories); returns files removed.

    All or nothing: every recorded path is first moved into ``.cudaredist/removing-*`` in the
    prefix, at its own path there (a rename, which fails where a delete would: a file another
    process holds open on Windows); if one cannot move, or Ctrl-C comes, the ones moved go back
    and nothing is removed. Deleting the record is the commit: from then on the uninstall
    completes, Ctrl-C or not (a killed one is put back or finished by :func:`recover`). Files the
    user added stay; recorded paths under a directory that has become a symlink are left alone
    rather than deleted through it, and a real directory stands where a link was recorded unless
    the install made that directory itself (a link it had to copy).
    """
    rec = require_record(prefix)
    # (path, whether the install made a directory there: a link it had to copy)
    entries = [(f["path"], f.get("copy") == "directory") for f in rec["files"] + rec.get("links", [])]
    _undo_removing(prefix)  # files a killed uninstall moved out go back first
    trash = prefix / RECORD_DIR / f"removing-{uuid.uuid4().hex[:8]}"
    moved = 0
    made: set[Path] = {trash}
    committed = False
    try:
        trash.mkdir()
        for rel, made_dir in entries:
            # ours to delete: a recorded path that is relative, clean and reached without following a
            # symlink or a junction
            parts = rel.split("/")
            if not rel or rel.startswith("/") or "\\" in rel or ":" in parts[0] or any(
                    x in ("", ".", "..") for x in parts) or any(
                    fsops.is_link(prefix.joinpath(*parts[:i])) for i in range(1, len(parts))):
                continue
            p = prefix / rel
            # never followed: a link (or a junction) is moved, not its target
            if fsops.is_link(p) or p.is_file() or (made_dir and p.is_dir()):
                to = trash / rel  # at its own path: what is moved out can be put back from it alone
                if to.parent not in made:
                    to.parent.mkdir(parents=True, exist_ok=True)
                    made.add(to.parent)
                try:
                    fsops.rename(p, to)
                except FileNotFoundError:
                    continue
                moved += 1
            # a real directory where the record says a link or a file was is the user's: it stays
        with interrupts.deferred():  # the commit, then what follows from it: Ctrl-C waits for the end
            fsops.unlink(record_path(prefix))
            committed = True
            with contextlib.suppress(FileNotFoundError):  # the SBOM beside it (cudaredist.sbom)
                fsops.unlink(sbom.sbom_path(prefix))
            with contextlib.suppress(OSError):  # moved out of the tree already; a scanner's late open
                fsops.rmtree(trash)
            _remove_empty(prefix)  # the directories left empty (files the user added stay)
    except BaseException as exc:
        if not committed:
            with interrupts.deferred():  # a second Ctrl-C waits until every file is back
                _put_back(prefix, trash)
        # committed: Ctrl-C held until the end: the uninstall is complete
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(f"interrupted while the uninstall finished; it was completed first: "
                              f"{moved} files removed from {prefix}" if committed else
                              f"interrupted; nothing was removed: {prefix} was restored as it was",
                              signum=interrupts.signum_of(exc)) from None
        if committed or not isinstance(exc, OSError):
            raise
        held = fsops.holder_hint(exc)
        raise PrefixError(
            f"cannot uninstall {prefix}: "
            + (f"{held}; close it and run the uninstall again" if held
               else f"cannot remove {exc.filename or prefix} ({exc.strerror or exc})")
            + ". Nothing was removed.", prefix=str(prefix)) from exc
    return moved


EXEC_BIT_REMOVED = "the exec bit was removed"  # a verify reason doctor looks for


@dataclass
class VerifyReport:
    prefix: str
    missing: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # added since (torch's lib/x64/libcudart.a): no damage
    checked: int = 0
    reasons: dict[str, str] = field(default_factory=dict)  # changed path -> what changed

    @property
    def ok(self) -> bool:
        return not (self.missing or self.changed)

    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "ok": self.ok, "checked": self.checked,
                "missing": self.missing, "changed": self.changed, "extra": self.extra,
                "reasons": {p: self.reasons[p] for p in self.changed if p in self.reasons}}


def _link_change(p: Path, target: str) -> str | None:
    """Why the link ``p`` -> ``target`` no longer is as recorded ("" when it is, None when it is missing)."""
    try:
        actual = os.readlink(p)
    except OSError:  # not a link: a copy where symlinks could not be made (Windows), else a change
        if not os.path.lexists(p):
            return None
        if WINDOWS:
            return ""
        return f"a symlink to {target} was replaced by a {'directory' if p.is_dir() else 'file'}"
    return "" if actual == target else f"the symlink points to {actual}, not {target}"


def _keeps_exec_bits(prefix: Path) -> bool:
    """Does the filesystem under ``prefix`` store exec bits? (Windows, exFAT and FAT do not: every
    file reads back with the same mode whatever was set.)"""
    if WINDOWS:
        return False
    probe = prefix / RECORD_DIR / f".mode-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        os.chmod(probe, 0o644)
        off = os.stat(probe).st_mode & 0o111
        os.chmod(probe, 0o755)
        on = os.stat(probe).st_mode & 0o111
        return not off and bool(on)
    except OSError:
        return True  # cannot probe (a read-only tree): compare, as on any POSIX filesystem
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


def _file_change(p: Path, st: os.stat_result, f: dict[str, Any], fast: bool, modes: bool = True) -> str:
    """Why the regular file ``p`` no longer matches its record entry ``f`` ("" when it does)."""
    if stat.S_ISLNK(st.st_mode):
        return f"a file was replaced by a symlink to {os.readlink(p)}"
    if not stat.S_ISREG(st.st_mode):
        return "a file was replaced by a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
    if st.st_size != f["size"]:
        return f"size {st.st_size}, recorded {f['size']}"
    if modes and "mode" in f:  # Windows, exFAT and FAT have no exec bits to compare
        want = int(str(f["mode"]), 8) & 0o111
        if bool(st.st_mode & 0o111) != bool(want):
            return EXEC_BIT_REMOVED if want else "an exec bit was added"
    if not fast and sha256_file(p) != f["sha256"]:
        return "content differs (sha256)"
    return ""


def verify(prefix: Path, *, fast: bool = False, record: dict[str, Any] | None = None) -> VerifyReport:
    """Re-hash every recorded file and compare its exec bits, link targets and kind; ``fast``
    compares sizes, modes and link targets only. ``record``: the prefix's, when the caller has read it."""
    rec = require_record(prefix) if record is None else record
    report = VerifyReport(str(prefix))
    modes = _keeps_exec_bits(prefix)
    fixups = rec.get("links", [])  # platform fix-ups such as lib64 -> lib
    for f in rec["files"] + fixups:
        rel, p = f["path"], prefix / f["path"]
        why: str | None = None  # None: missing
        if "link" in f:
            why = _link_change(p, f["link"])
            if why and f in fixups and p.is_dir() and not p.is_symlink():
                why = ""  # a fix-up materialised as a directory copy when the link could not be made
        else:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):  # a folder above it a file
                why = _file_change(p, p.lstat(), f, fast, modes)
        if why is None:
            report.missing.append(rel)
        elif why:
            report.changed.append(rel)
            report.reasons[rel] = why
    if why := sbom.stale(prefix, rec):  # the SBOM beside the record
        report.changed.append(rel := f"{RECORD_DIR}/{SBOM_FILE}")
        report.reasons[rel] = why
    report.checked = len(rec["files"]) + len(fixups)
    report.missing.sort()
    report.changed.sort()
    links = {x["path"] for x in fixups}
    found: set[str] = set()  # every file and symlink under the tree (POSIX, relative), not inside a fix-up
    for dirpath, dirnames, filenames in os.walk(prefix):
        rel_dir = os.path.relpath(dirpath, prefix).replace(os.sep, "/")
        base = "" if rel_dir == "." else f"{rel_dir}/"
        found.update(base + n for n in filenames)
        # a link or a junction is one entry, never walked into (its target is not the tree's)
        ends = {d for d in dirnames if fsops.is_link(os.path.join(dirpath, d)) or base + d in links}
        found.update(base + d for d in ends)
        dirnames[:] = [d for d in dirnames if d not in ends and (base or d != RECORD_DIR)]
    report.extra = sorted(found - {f["path"] for f in rec["files"]} - links)
    return report
