"""Known host fixes (``manifests/hostfixes.toml``): where NVIDIA's headers clash with a newer host
and a later CUDA release fixed it, the install carries that release's change to older trees.

Each fix is an exact find/replace on a staged file's bytes. A fix names its files by their path in
the archive (``include/crt/math_functions.h``); where that lands in the tree is the placement's
decision (:func:`cudaredist.plan.placed`: a cross tree's crt headers are under ``targets/<dir>/``),
so :func:`apply` and :func:`pending` both look a file up through :func:`locate`. A fix is applied
whole or not at all: a file that does not hold each text exactly as often as the fix expects keeps
NVIDIA's bytes, and the install says so. A fixed file is written anew (never in place: a staged
file may be a hard link into the unpacked cache), and its record entry carries the fixed bytes'
hash, so ``verify`` checks them; the record lists each fix applied (:func:`applied_json`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudaredist import fsops
from cudaredist.errors import ManifestError
from cudaredist.plan import Plan, placed, version_key
from cudaredist.profiles import data_dir, load_toml

if TYPE_CHECKING:  # the no-op path asks pending() without loading the archive modules
    from cudaredist.tree.staging import FileRecord

FILE = "hostfixes.toml"
RECORD_KEY = "host_fixes"  # the record's list of the fixes applied
OPTION = "--no-host-fixes"


@dataclass(frozen=True)
class Edit:
    """One change to one of NVIDIA's files (named by its path in the archive): ``find`` must occur
    exactly ``count`` times, or the file is not the one the fix was written for and nothing changes."""

    file: str
    find: bytes
    replace: bytes
    count: int = 1


@dataclass(frozen=True)
class Fix:
    id: str
    since: str
    before: str
    platforms: tuple[str, ...]
    condition: str
    summary: str
    source: str
    edits: tuple[Edit, ...]
    known: tuple[tuple[str, str, str], ...] = ()  # (file, sha256 before, sha256 after)

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.file for e in self.edits))


def _str(entry: dict[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value:
        raise ManifestError(f"{where}: {key!r} must be a non-empty string", source=where)
    return value


def _tables(entry: dict[str, Any], key: str, at: str, where: str) -> list[dict[str, Any]]:
    tables = entry.get(key, [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ManifestError(f"{at}: each [[fix.{key}]] must be a table", source=where)
    return tables


def _fix(entry: Any, where: str) -> Fix:
    if not isinstance(entry, dict):
        raise ManifestError(f"{where}: each [[fix]] must be a table", source=where)
    at = f"{where} (fix {entry.get('id', '?')})"
    if not (edits := _tables(entry, "edit", at, where)):
        raise ManifestError(f"{at}: a fix needs at least one [[fix.edit]]", source=where)
    made = []
    for e in edits:
        count = e.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ManifestError(f"{at}: an edit's count must be a positive number", source=where)
        made.append(Edit(_str(e, "file", at), _str(e, "find", at).encode(), _str(e, "replace", at).encode(),
                         count))
    known = tuple((_str(k, "file", at), _str(k, "before", at), _str(k, "after", at))
                  for k in _tables(entry, "known", at, where))
    platforms = entry.get("platforms", [])
    if not isinstance(platforms, list) or not all(isinstance(p, str) for p in platforms):
        raise ManifestError(f"{at}: platforms must be a list of names", source=where)
    return Fix(_str(entry, "id", where), _str(entry, "since", at), _str(entry, "before", at),
               tuple(platforms), _str(entry, "condition", at), _str(entry, "summary", at),
               _str(entry, "source", at), tuple(made), known)


@cache
def fixes() -> tuple[Fix, ...]:
    """Every fix of hostfixes.toml (a malformed table is a :class:`ManifestError` naming it)."""
    path = str(data_dir() / FILE)
    entries = load_toml(path).get("fix", [])
    if not isinstance(entries, list):
        raise ManifestError(f"{path}: [[fix]] must be an array of tables", source=path)
    found = tuple(_fix(e, path) for e in entries)
    if len({f.id for f in found}) != len(found):
        raise ManifestError(f"{path}: two fixes have the same id", source=path)
    return found


def for_release(release: str, platform: str) -> list[Fix]:
    key = version_key(release)
    return [f for f in fixes() if version_key(f.since) <= key < version_key(f.before)
            and (not f.platforms or platform in f.platforms)]


@dataclass(frozen=True)
class Outcome:
    """What one fix did to a tree: ``changed`` (path, sha256 before, after), or why it was skipped."""

    fix: Fix
    changed: tuple[tuple[str, str, str], ...] = ()
    skipped: str = ""

    def line(self) -> str:
        """The one line install says for it."""
        if self.skipped:
            return (f"note: host fix {self.fix.id} not applied: {self.skipped}; the tree keeps NVIDIA's "
                    "bytes there")
        return (f"host fix {self.fix.id}: {', '.join(p for p, _b, _a in self.changed)} changed "
                f"(applies when {self.fix.condition.split(' (')[0]}; {OPTION} keeps NVIDIA's bytes)")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def plan_fix(fix: Fix, read: Callable[[str], bytes | None]) -> tuple[dict[str, bytes], str]:
    """The new bytes of each file ``fix`` changes, or ({}, why not) when a file does not hold what it
    expects. ``read``: a tree path's bytes, None when the tree lacks it. A tree that has none of the
    fix's files (a profile without the headers) gets ({}, "")."""
    olds = {f: read(f) for f in fix.files}
    if all(v is None for v in olds.values()):
        return {}, ""
    news: dict[str, bytes] = {}
    for f, data in olds.items():
        if data is None:
            return {}, f"the tree has no {f}"
        for e in (e for e in fix.edits if e.file == f):
            n = data.count(e.find)
            if n != e.count:
                text = e.find.decode(errors="replace").splitlines()[0][:60]
                return {}, (f"{f} holds {n} times, not {e.count}, the text it changes ({text!r}): not the "
                            "header the fix was made for")
            data = data.replace(e.find, e.replace)
        for kf, before, after in fix.known:
            if kf == f and before == _sha(olds[f] or b"") and after != _sha(data):
                raise ManifestError(f"host fix {fix.id} gives {f} the sha256 {_sha(data)}, not the known "
                                    f"{after}: {FILE} is inconsistent", source=FILE)
        news[f] = data
    return news, ""


Places = Mapping[str, Sequence[tuple[str, str]]]  # component -> its (folder, destination) pairs


def locate(fix: Fix, owners: Iterable[tuple[str, str]], places: Places) -> tuple[dict[str, str], str]:
    """Where each of ``fix``'s files (archive paths) is in a tree whose files are ``owners`` (tree
    path, component), as the placement put them: the file some component's ``places`` (none: as the
    archive lays it out) puts there. Returns (archive path -> tree path, ""), or ({}, why) when the
    tree holds a file under a path no placement gives it (it is said, never skipped silently)."""
    owner = dict(owners)
    found: dict[str, str] = {}
    comps = sorted(set(owner.values()))
    for rel in fix.files:
        for comp in comps:
            at = placed(rel, places[comp]) if places.get(comp) else rel
            if at is not None and owner.get(at) == comp:
                found[rel] = at
                break
        else:
            if stray := next((p for p in sorted(owner) if p.endswith(f"/{rel}")), None):
                return {}, f"the tree holds {rel} at {stray}, where no component's placement puts it"
    return found, ""


def _reader(root: Path, where: Mapping[str, str]) -> Callable[[str], bytes | None]:
    """A fix's file's bytes, by archive path, where :func:`locate` found it under ``root``."""
    return lambda rel: (root / where[rel]).read_bytes() if rel in where else None


def apply(root: Path, files: Sequence[FileRecord], plan: Plan) -> tuple[list[FileRecord], list[Outcome]]:
    """Apply to the staged tree ``root`` every fix for ``plan``'s release and platform, each file
    where ``plan`` placed it; returns the file records with the fixed files' new size and hash, and
    what each fix did."""
    by_path = {r.path: r for r in files}
    owners = [(r.path, r.component) for r in files if not r.link]
    places = {i.component: i.place for i in plan.items}
    outcomes: list[Outcome] = []
    for fix in for_release(plan.release, plan.platform):
        where, why = locate(fix, owners, places)
        news, why = plan_fix(fix, _reader(root, where)) if not why else ({}, why)
        if why:
            outcomes.append(Outcome(fix, skipped=why))
            continue
        changed = []
        for rel, data in news.items():
            rec = by_path[where[rel]]
            target = root / rec.path
            fsops.write_atomic(target, data)  # a new file: a hard-linked cache entry stays as it is
            if not fsops.WINDOWS:
                os.chmod(target, rec.mode)
            by_path[rec.path] = replace(rec, size=len(data), sha256=_sha(data))
            changed.append((rec.path, rec.sha256, by_path[rec.path].sha256))
        if changed:
            outcomes.append(Outcome(fix, tuple(changed)))
    return sorted(by_path.values(), key=lambda r: r.path), outcomes


def applied_json(outcomes: Sequence[Outcome]) -> list[dict[str, str]]:
    """The record's ``host_fixes``: one entry per file a fix changed."""
    return [{"id": o.fix.id, "path": p, "before": b, "after": a, "source": o.fix.source}
            for o in outcomes for p, b, a in o.changed]


def pending(prefix: Path, record: dict[str, Any], enabled: bool) -> list[str]:
    """Why the tree at ``prefix`` is not as an install now would lay it out, as to host fixes: a fix
    this cudaredist applies to its release that its record does not list, and that its files take
    (a tree laid out before the fix, or with ``--no-host-fixes``); or, not ``enabled``, the fixes it
    has. Reads only the fixes' files. Empty: nothing to do."""
    had = sorted({str(e.get("id")) for e in record.get(RECORD_KEY, []) if isinstance(e, dict)})
    if not enabled:
        return [f"it has host fix {i}, and {OPTION} keeps NVIDIA's bytes" for i in had]
    plan = record.get("plan", {})
    try:
        wanted = for_release(str(plan.get("release", "")), str(plan.get("platform", "")))
    except (ValueError, ManifestError):
        return []
    owners = [(str(f["path"]), str(f.get("component", ""))) for f in record.get("files", [])
              if isinstance(f, dict) and not f.get("link")]
    places = {str(c.get("name")): tuple(tuple(p) for p in c.get("place", ()))
              for c in plan.get("components", []) if isinstance(c, dict)}
    unfixed = []
    for fix in (f for f in wanted if f.id not in had):
        with contextlib.suppress(OSError):  # a file gone or unreadable: verify's to say
            if plan_fix(fix, _reader(prefix, locate(fix, owners, places)[0]))[0]:
                unfixed.append(f"host fix {fix.id} is not applied to it")
    return unfixed


def describe(record: dict[str, Any]) -> list[str]:
    """``info``'s lines for the fixes the record lists (one per fix, its files and source)."""
    by_id: dict[str, list[dict[str, Any]]] = {}
    for e in record.get(RECORD_KEY, []):
        if isinstance(e, dict):
            by_id.setdefault(str(e.get("id")), []).append(e)
    lines = []
    for fid, entries in by_id.items():
        lines.append(f"  {fid}: {', '.join(str(e.get('path')) for e in entries)} (source: "
                     f"{entries[0].get('source', '?')})")
        lines += [f"    {e.get('path')}: sha256 {e.get('before')} -> {e.get('after')}" for e in entries]
    return lines
