"""The install record in ``<prefix>/.cudaredist/record.json``: what was installed, and checks on it."""

from __future__ import annotations

import contextlib
import datetime
import glob
import json
import os
import stat
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudaredist import __version__, fsops
from cudaredist.cache.store import ENV_LOCK_TIMEOUT, hold
from cudaredist.errors import PrefixError, RecordError
from cudaredist.fsops import WINDOWS
from cudaredist.hashing import sha256_file
from cudaredist.plan import Plan, matches

if TYPE_CHECKING:  # the no-op path reads records without loading the archive modules
    from cudaredist.tree.staging import FileRecord

RECORD_DIR = ".cudaredist"
RECORD_FILE = "record.json"
SCHEMA = 1
EXEC_BIT_REMOVED = "the exec bit was removed"  # a verify reason doctor looks for


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
              doing="create the lock file of the prefix in", where=prefix.parent, option="--prefix",
              same=None if WINDOWS else _holds) as lock:
        try:
            yield
        finally:
            if not WINDOWS and not os.path.lexists(prefix):  # Windows' filelock removes it itself
                with contextlib.suppress(OSError):
                    os.unlink(lock.lock_file)


def _holds(lock: Any) -> bool:
    """Is the file ``lock`` holds still the one at its path (not removed by the previous holder)?"""
    fd = getattr(getattr(lock, "_context", None), "lock_file_fd", None)
    try:
        return fd is None or os.fstat(fd).st_ino == os.stat(lock.lock_file).st_ino
    except OSError:
        return False


def recover(prefix: Path) -> list[str]:
    """Clean what a killed run left beside ``prefix`` (call with the prefix lock held).

    A moved-aside tree is put back when the prefix is missing (a swap cut short). One that
    cannot be deleted yet (a process still holds a file in it) is left for a later run, with
    a note: it is not in the way of anything."""
    actions: list[str] = []
    for p in leftovers(prefix):
        kind = p.name[len(prefix.name) + 1:].split("-")[1]
        if kind == "old" and not os.path.lexists(prefix):
            fsops.rename(p, prefix)
            actions.append(f"restored {prefix} from an interrupted swap")
            continue
        try:
            fsops.rmtree(p)
            actions.append(f"removed leftover {p.name}")
        except OSError as exc:
            actions.append(f"warning: {not_removed(p, exc)}")
    return actions


def tidy(prefix: Path, timeout: float) -> list[str]:
    """:func:`recover` under the prefix lock, when a killed run left something beside ``prefix``
    (no lock taken otherwise): before the no-op check, so that it needs no network."""
    if not leftovers(prefix):
        return []
    with prefix_lock(prefix, timeout):
        return recover(prefix)


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


def satisfies(record: dict[str, Any], *, train: str, platform: str, profile: str | None,
              components: Sequence[str], source: str, products: Sequence[str] = (),
              host: str = "") -> bool:
    """Was the tree installed for this request (its train, platform, source, profile, ``--component``
    and ``--with``)? ``cudnn`` is answered by the cuDNN the tree has, as ``13.4`` is by its 13.4.x.
    Whether it still holds all that request means today is :func:`lacking`."""
    from cudaredist.profiles import parse_product_requests

    plan = record.get("plan", {})
    had = plan.get("products", [])
    asked = sorted(str(r) for r in parse_product_requests(products))
    if not isinstance(had, list) or sorted(str(p.get("requested", "")) for p in had
                                           if isinstance(p, dict)) != asked:
        return False
    request = record.get("request", {})
    return (matches(train, str(plan.get("release", ""))) and plan.get("platform") == platform
            and plan.get("host", "") == host
            and plan.get("source", "nvidia") == source
            and plan.get("profile") == (profile or "custom")
            and sorted(request.get("components", [])) == sorted(components))


def lacking(record: dict[str, Any]) -> list[str]:
    """The components the record's own request means today for its release that its tree lacks
    (``profile nvcc`` gained ``cuda_profiler_api`` in a later cudaredist): offline, from
    profiles.toml. The PyPI source's profiles name extras that only the index resolves: none there."""
    from cudaredist.errors import CudaRedistError
    from cudaredist.profiles import get_product, get_profile, parse_spec

    plan = record["plan"]
    if plan.get("source", "nvidia") != "nvidia":
        return []
    release, platform, have = plan["release"], plan["platform"], {c["name"] for c in plan["components"]}
    # a component the release may lack (``missing``): the plan's note says when it did
    absent = " ".join(str(n) for n in plan.get("notes", []))
    try:
        specs = [s for s in get_profile(plan["profile"]).specs if s.applies_to(release, platform)
                 and not (s.missing and f"has no {s} for {platform}" in absent)] \
            if plan["profile"] != "custom" else []
        specs += [parse_spec(c, "--component") for c in record.get("request", {}).get("components", [])]
        specs += [parse_spec(n) for p in plan.get("products", [])
                  for n in get_product(str(p["name"])).needs_for(str(p["release"]))]
    except CudaRedistError:  # a profile or product this cudaredist no longer has: nothing to compare
        return []
    return list(dict.fromkeys(str(s) for s in specs if not any(n in have for n in s.names)))


def drift_text(record: dict[str, Any], missing: Sequence[str]) -> str:
    """``profile nvcc now also includes cuda_profiler_api, cuda_nvtx`` for what :func:`lacking` found."""
    profile = record["plan"]["profile"]
    who = f"profile {profile}" if profile != "custom" else "the request"
    return f"{who} now also includes {', '.join(missing)} (CUDA {record['plan']['release']})"


def holds(record: dict[str, Any], plan: Plan) -> bool:
    """Does the tree hold exactly ``plan``'s archives (as resolved now), from the components its
    record lists rather than a key stored beside them?"""
    from cudaredist.plan import plan_from_json

    try:
        return plan_from_json(record["plan"]).content_key() == plan.content_key()
    except (KeyError, TypeError, ValueError):
        return False


def drift_note(prefix: Path, record: dict[str, Any]) -> str:
    """What ``info`` and ``verify`` say of a tree that lacks what its profile means today, or ""."""
    missing = lacking(record)
    return (f"{drift_text(record, missing)}, which this tree lacks: `cudaredist install "
            f"{record['plan']['release']} --prefix {prefix}` brings it up to date") if missing else ""


def satisfying_record(prefix: Path, *, train: str, platform: str, profile: str | None,
                      components: Sequence[str], source: str, products: Sequence[str] = (),
                      host: str = "") -> tuple[dict[str, Any] | None, list[str]]:
    """(the record of ``prefix``, what it lacks) when it was installed for this request, else
    (None, []): a record with nothing lacking answers the request without network."""
    rec = read_record(prefix) if prefix.is_dir() else None
    if rec is None or not satisfies(rec, train=train, platform=platform, profile=profile,
                                    components=components, source=source, products=products,
                                    host=host):
        return None, []
    return rec, lacking(rec)


def record_path(prefix: Path) -> Path:
    return prefix / RECORD_DIR / RECORD_FILE


def build_record(plan: Plan, files: list[FileRecord], *, served: dict[str, str],
                 links: list[dict[str, str]], requested: Sequence[str]) -> dict[str, Any]:
    """``served``: sha256 -> the URL this run downloaded it from (an archive not in it came from
    the cache); ``links``: the platform fix-ups made; ``requested``: the ``--component`` names."""
    return {
        "schema": SCHEMA,
        "tool": f"cudaredist {__version__}",
        "installed_at": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "content_key": plan.content_key(),
        "plan": plan.to_json(),
        # where the hashes came from, and where each archive's (verified) bytes came from
        "provenance": {
            "manifest": plan.base_url,
            "hashes_from": plan.hashes_from,
            "archives": {i.component: served.get(i.archive.sha256, "cache") for i in plan.items},
        },
        "files": [
            {"path": f.path, "size": f.size, "sha256": f.sha256, "mode": oct(f.mode),
             **({"link": f.link} if f.link else {}), "component": f.component}
            for f in files
        ],
        "links": links,
        "request": {"components": list(requested)},
    }


def write_record(prefix: Path, record: dict[str, Any]) -> None:
    p = record_path(prefix)
    p.parent.mkdir(parents=True, exist_ok=True)
    fsops.write_atomic(p, _dumps(record).encode())


def _dumps(record: dict[str, Any]) -> str:
    """``record`` as indented JSON with one line per file: json's C encoder writes each line (an
    indented dump of the whole record goes through its pure-Python one, a tenth as fast, and a
    tree has thousands of files)."""
    rest = {k: v for k, v in record.items() if k != "files"}
    files = record.get("files")
    if not isinstance(files, list) or not files:
        return json.dumps(record, indent=1) + "\n"
    head = json.dumps(rest, indent=1)
    body = ",\n  ".join(json.dumps(f) for f in files)
    return (f"{head[:-2]}," if rest else "{") + f'\n "files": [\n  {body}\n ]\n}}\n'


# What a record must hold, as data: a field's type (or types), the fields of an object, or [that]
# for a list of them; a name ending in "?" may be absent.
_RECORD: dict[str, Any] = {
    "plan": {"release": str, "platform": str, "profile": str, "base_url": str, "source?": str,
             "release_date?": (str, type(None)), "channel?": str, "hashes_from?": str, "notes?": [str],
             "components": [{"name": str, "version": str, "sha256": str, "url?": str, "relative_path?": str,
                             "size?": int, "layout?": str, "product?": str}],
             "products?": [{"name": str, "release": str, "requested?": str, "release_date?": str,
                            "base_url?": str, "cuda_variant?": str}]},
    "files": [{"path": str, "size": int, "sha256": str, "mode?": str, "link?": str, "component?": str}],
    "links?": [{"path": str, "link": str, "copy?": str}],
    "request?": {"components?": list},
    "host_fixes?": [{"id": str, "path": str, "before": str, "after": str, "source?": str}],
    "tool": str, "installed_at": str, "content_key?": str,
}
_TYPE_NAMES = {str: "string", int: "number", list: "list", type(None): "null"}


def _problem(obj: object, shape: Any, where: str) -> str:
    """The first way ``obj`` does not have ``shape`` (``"plan.platform is missing"``), or ""."""
    if isinstance(shape, list):
        if not isinstance(obj, list):
            return f"{where} is not a list"
        return next((why for k, item in enumerate(obj) if (why := _problem(item, shape[0], f"{where}[{k}]"))),
                    "")
    if isinstance(shape, dict):
        if not isinstance(obj, dict):
            return f"{where or 'the record'} is not an object"
        for key, kind in shape.items():
            name = key.rstrip("?")
            at = f"{where}.{name}" if where else name
            if name not in obj:
                if not key.endswith("?"):
                    return f"{at} is missing"
            elif why := _problem(obj[name], kind, at):
                return why
        return ""
    kinds = shape if isinstance(shape, tuple) else (shape,)
    if isinstance(obj, bool) or not isinstance(obj, kinds):
        return f"{where} is not a {' or '.join(_TYPE_NAMES[t] for t in kinds)}"
    return ""


def read_record(prefix: Path) -> dict[str, Any] | None:
    """The record, or None when the prefix holds no cudaredist install; a record that cannot be
    read, or lacks a field the commands use, is a :class:`RecordError` naming it."""
    p = record_path(prefix)

    def bad(what: str) -> RecordError:
        return RecordError(f"the install record {p} {what}; reinstall over it with --reinstall, or "
                           f"delete {prefix}", prefix=str(prefix))

    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise bad(f"is unreadable ({exc})") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise bad(f"has an unknown format (not schema {SCHEMA}: written by another cudaredist?)")
    if problem := _problem(data, _RECORD, ""):
        raise bad(f"is damaged ({problem})")
    return data


def require_record(prefix: Path) -> dict[str, Any]:
    rec = read_record(prefix)
    if rec is None:
        raise PrefixError(f"{prefix} holds no cudaredist install (no {RECORD_DIR}/{RECORD_FILE})",
                          prefix=str(prefix))
    return rec


@dataclass
class VerifyReport:
    prefix: str
    missing: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # added since (torch's lib/x64/libcudart.a): no damage
    checked: int = 0
    reasons: dict[str, str] = field(default_factory=dict)  # changed path -> what changed
    drift: str = ""  # what its profile means today that the tree lacks (:func:`drift_note`)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.changed)

    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "ok": self.ok, "checked": self.checked,
                "missing": self.missing, "changed": self.changed, "extra": self.extra,
                "reasons": {p: self.reasons[p] for p in self.changed if p in self.reasons}} | (
                    {"drift": self.drift} if self.drift else {})


def _walk(prefix: Path, skip: set[str]) -> set[str]:
    """Every file and symlink under ``prefix`` (POSIX, relative), not descending into ``skip``."""
    found: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(prefix):
        rel_dir = os.path.relpath(dirpath, prefix).replace(os.sep, "/")
        base = "" if rel_dir == "." else f"{rel_dir}/"
        found.update(base + n for n in filenames)
        # a link or a junction is one entry, never walked into (its target is not the tree's)
        ends = {d for d in dirnames if fsops.is_link(os.path.join(dirpath, d)) or base + d in skip}
        found.update(base + d for d in ends)
        dirnames[:] = [d for d in dirnames if d not in ends and (base or d != RECORD_DIR)]
    return found


def _link_change(p: Path, target: str) -> str | None:
    """Why the link ``p`` -> ``target`` no longer is as recorded ("" when it is, None when it is missing)."""
    try:
        actual = os.readlink(p)
    except FileNotFoundError:
        return None
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


def verify(prefix: Path, *, fast: bool = False) -> VerifyReport:
    """Re-hash every recorded file and compare its exec bits, link targets and kind; ``fast``
    compares sizes, modes and link targets only."""
    rec = require_record(prefix)
    report = VerifyReport(str(prefix), drift=drift_note(prefix, rec))
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
            with contextlib.suppress(FileNotFoundError):
                why = _file_change(p, p.lstat(), f, fast, modes)
        if why is None:
            report.missing.append(rel)
        elif why:
            report.changed.append(rel)
            report.reasons[rel] = why
    report.checked = len(rec["files"]) + len(fixups)
    report.missing.sort()
    report.changed.sort()
    links = {x["path"] for x in fixups}
    report.extra = sorted(_walk(prefix, links) - {f["path"] for f in rec["files"]} - links)
    return report


def _installed_path(prefix: Path, rel: str) -> Path | None:
    """``prefix/rel`` if the recorded path is relative, clean and reached without following a
    symlink; None otherwise (such a path is not ours to delete)."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or "\\" in rel or ":" in parts[0] or any(
            x in ("", ".", "..") for x in parts):
        return None
    here = prefix
    for part in parts[:-1]:
        here = here / part
        if fsops.is_link(here):  # a symlink or a junction: not followed
            return None
    return here / parts[-1]


def uninstall(prefix: Path) -> int:
    """Remove exactly what the record lists (and then empty directories); returns files removed.

    All or nothing: every recorded path is first moved into ``.cudaredist/removing-*`` in the
    prefix (a rename, which fails where a delete would: a file another process holds open on
    Windows); if one cannot move, the ones moved go back and nothing is removed. Files the user
    added stay; recorded paths under a directory that has become a symlink are left alone rather
    than deleted through it, and a real directory stands where a link was recorded unless the
    install made that directory itself (a link it had to copy).
    """
    rec = require_record(prefix)
    # (path, whether the install made a directory there: a link it had to copy)
    entries = [(f["path"], f.get("copy") == "directory") for f in rec["files"] + rec.get("links", [])]
    for old in (prefix / RECORD_DIR).glob("removing-*"):  # what a killed uninstall left
        fsops.rmtree(old)
    trash = prefix / RECORD_DIR / f"removing-{uuid.uuid4().hex[:8]}"
    trash.mkdir()
    moved: list[tuple[Path, Path]] = []
    try:
        for rel, made_dir in entries:
            p = _installed_path(prefix, rel)
            if p is None:
                continue
            # never followed: a link (or a junction) is moved, not its target
            if fsops.is_link(p) or p.is_file() or (made_dir and p.is_dir()):
                to = trash / str(len(moved))
                try:
                    fsops.rename(p, to)
                except FileNotFoundError:
                    continue
                moved.append((p, to))
            # a real directory where the record says a link or a file was is the user's: it stays
    except OSError as exc:
        for back, there in reversed(moved):
            with contextlib.suppress(OSError):
                fsops.rename(there, back)
        with contextlib.suppress(OSError):
            trash.rmdir()
        held = fsops.holder_hint(exc)
        raise PrefixError(
            f"cannot uninstall {prefix}: "
            + (f"{held}; close it and run the uninstall again" if held
               else f"cannot remove {exc.filename or prefix} ({exc.strerror or exc})")
            + ". Nothing was removed.", prefix=str(prefix)) from exc
    fsops.unlink(record_path(prefix))
    with contextlib.suppress(OSError):  # moved out of the tree already; a scanner's late open
        fsops.rmtree(trash)
    dirs: list[str] = []
    for dirpath, dirnames, _files in os.walk(prefix):
        # never into a link or a junction (os.walk follows junctions: they are not islink)
        dirnames[:] = [d for d in dirnames if not fsops.is_link(os.path.join(dirpath, d))]
        dirs.append(dirpath)
    for dirpath in sorted(dirs, key=len, reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)  # only succeeds when empty: user files stay
    return len(moved)
