"""The install record in ``<prefix>/.cudaredist/record.json``: what was installed, and checks on it.

The prefix around it (its lock, leftovers of a killed run, the uninstall) is :mod:`cudaredist.prefixes`.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudaredist import __version__, fsops
from cudaredist.errors import PrefixError, RecordError
from cudaredist.fsops import WINDOWS
from cudaredist.hashing import sha256_file
from cudaredist.plan import Plan, matches

if TYPE_CHECKING:  # the no-op path reads records without loading the archive modules
    from cudaredist.tree.staging import FileRecord

RECORD_DIR = ".cudaredist"
RECORD_FILE = "record.json"
SCHEMA = 1
# How cudaredist lays a tree out. Bump it when a new cudaredist lays out what the same archives give
# differently (1: a wheel-built Windows tree's generated import libraries such as cublas.lib, the
# Visual Studio integration under extras/): a record of an older (or no) layout "needs updating",
# and install and --refresh build the tree again rather than keep it.
LAYOUT = 1
EXEC_BIT_REMOVED = "the exec bit was removed"  # a verify reason doctor looks for


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
    """What the record's own request means today for its release that its tree lacks (``profile
    nvcc`` gained ``cuda_profiler_api`` in a later cudaredist): offline. A redist tree's components
    against profiles.toml; another source's profile (pypi.toml's extras, which only the index turns
    into wheels) against the profile entries its record says the tree was resolved from."""
    from cudaredist.errors import CudaRedistError
    from cudaredist.profiles import get_product, get_profile, parse_spec
    from cudaredist.sources import profile_specs

    plan = record["plan"]
    release, platform, have = plan["release"], plan["platform"], {c["name"] for c in plan["components"]}
    source = plan.get("source", "nvidia")
    try:
        if source != "nvidia":
            had = record.get("request", {}).get("profile")
            if not isinstance(had, list):  # recorded before records said: its layout version says it
                return []
            return [str(s) for s in profile_specs(source, plan["profile"], release, platform)
                    if str(s) not in had]
        # a component the release may lack (``missing``): the plan's note says when it did
        absent = " ".join(str(n) for n in plan.get("notes", []))
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


def outdated(record: dict[str, Any]) -> list[str]:
    """Why the tree needs updating, offline: a layout older than this cudaredist's (:data:`LAYOUT`),
    what its request means today that it lacks (:func:`lacking`). [] when it is up to date."""
    why = []
    layout = record.get("layout", 0)
    if not isinstance(layout, int) or layout < LAYOUT:
        why.append(f"the tree was laid out by an older cudaredist (layout {layout}; this one lays trees "
                   f"out as layout {LAYOUT})")
    if missing := lacking(record):
        why.append(f"{drift_text(record, missing)}, which this tree lacks")
    return why


def holds(record: dict[str, Any], plan: Plan) -> bool:
    """Does the tree hold exactly ``plan``'s archives (as resolved now), from the components its
    record lists rather than a key stored beside them, laid out as this cudaredist lays them out
    (not :func:`outdated`)?"""
    from cudaredist.plan import plan_from_json

    try:
        same = plan_from_json(record["plan"]).content_key() == plan.content_key()
    except (KeyError, TypeError, ValueError):
        return False
    return same and not outdated(record)


def drift_note(prefix: Path, record: dict[str, Any]) -> str:
    """What ``info`` and ``verify`` say of a tree that needs updating (:func:`outdated`), or ""."""
    why = outdated(record)
    return f"needs updating: {'; '.join(why)}: `{shell_line(request_argv(record, prefix))}` brings it " \
        "up to date" if why else ""


def request_argv(record: Mapping[str, Any] | None, prefix: Path, *, reinstall: bool = False,
                 source: str | None = None) -> list[str]:
    """The one spelling of "redo this tree's request": the ``cudaredist install`` command line that
    makes the tree ``record`` describes again in ``prefix`` (its release, platform, source and where
    it came from, profile or ``--only``, ``--component`` and ``--with``); a managed toolkit by its
    install dir. ``source``: the same request from another source; no record: a TRAIN to fill in."""
    from cudaredist.sources import location_argv

    if record is None:
        return ["cudaredist", "install", "TRAIN", "--prefix", str(prefix)] + ["--reinstall"] * reinstall
    plan, request = record["plan"], record.get("request", {})
    release, platform, had = str(plan["release"]), str(plan["platform"]), str(plan.get("source", "nvidia"))
    argv = ["cudaredist", "install", release, *_target_argv(prefix, release, platform),
            "--platform", platform]
    if plan.get("host"):  # a cross tree: the tools' platform too
        argv += ["--host", str(plan["host"])]
    source = source or had
    if source != "nvidia" or source != had:  # another source than the tree's: said, even the default
        argv += ["--source", source]
    if source == had:
        argv += location_argv(source, str(plan.get("base_url", "")), str(plan.get("channel", "")))
    profile = str(plan.get("profile", "custom"))
    argv += ["--only"] if profile == "custom" else ["--profile", profile]
    for c in request.get("components", []):
        argv += ["--component", str(c)]
    for p in plan.get("products", []):
        argv += ["--with", str(p.get("requested", p.get("name", "")))]
    return argv + (["--reinstall"] if reinstall else [])


def train_argv(train: str, root: Path | None = None, platform: str | None = None) -> list[str]:
    """The command that installs ``train`` as a managed toolkit of ``root`` (None: the default install
    dir), for ``platform`` when given."""
    from cudaredist.managed import install_dir_argv

    argv = ["cudaredist", "install", train, *(install_dir_argv(root) if root is not None else [])]
    return argv + (["--platform", platform] if platform else [])


def _target_argv(prefix: Path, release: str, platform: str) -> list[str]:
    """``--prefix P``, or for a managed toolkit (named by its release and platform) its install dir."""
    from cudaredist.managed import install_dir_argv, toolkit_name

    if prefix.name != toolkit_name(release, platform):
        return ["--prefix", str(prefix)]
    return install_dir_argv(prefix.parent)


def shell_line(argv: Sequence[str]) -> str:
    """``argv`` as a line for this host's shell (quoted where a word needs it)."""
    if WINDOWS:
        import subprocess

        return subprocess.list2cmdline(list(argv))
    import shlex

    return shlex.join(argv)


def satisfying_record(prefix: Path, *, train: str, platform: str, profile: str | None,
                      components: Sequence[str], source: str, products: Sequence[str] = (),
                      host: str = "") -> tuple[dict[str, Any] | None, list[str]]:
    """(the record of ``prefix``, why it needs updating) when it was installed for this request, else
    (None, []): a record that needs no updating (:func:`outdated`) answers it without network."""
    rec = read_record(prefix) if prefix.is_dir() else None
    if rec is None or not satisfies(rec, train=train, platform=platform, profile=profile,
                                    components=components, source=source, products=products,
                                    host=host):
        return None, []
    return rec, outdated(rec)


def record_path(prefix: Path) -> Path:
    return prefix / RECORD_DIR / RECORD_FILE


def build_record(plan: Plan, files: list[FileRecord], *, served: dict[str, str],
                 links: list[dict[str, str]], requested: Sequence[str]) -> dict[str, Any]:
    """``served``: sha256 -> the URL this run downloaded it from (an archive not in it came from
    the cache); ``links``: the platform fix-ups made; ``requested``: the ``--component`` names."""
    from cudaredist.sources import profile_specs

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
        # what the profile meant at install: another source's drift is judged against it (lacking)
        "request": {"components": list(requested),
                    "profile": [str(s) for s in profile_specs(plan.source, plan.profile, plan.release,
                                                                plan.platform)]},
        "layout": LAYOUT,
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
    "request?": {"components?": list, "profile?": list},
    "layout?": int,
    "provenance?": {"manifest?": (str, type(None)), "hashes_from?": (str, type(None)), "archives?": dict},
    "host_fixes?": [{"id": str, "path": str, "before": str, "after": str, "source?": str}],
    "tool": str, "installed_at": str, "content_key?": str,
}
_TYPE_NAMES = {str: "a string", int: "a number", list: "a list", dict: "an object", type(None): "null"}


def _problem(obj: object, shape: Any, where: str) -> str:
    """The first way ``obj`` does not have ``shape`` (``"plan.platform is missing"``), or ""."""
    if isinstance(shape, list):
        if not isinstance(obj, list):
            return f"{where} is not a list"
        ok = _flat_check(shape[0])
        # a list of flat objects (the files: thousands) checked in one loop; the first that fails is
        # named by the general walk below
        return next((why for k, item in enumerate(obj) if not ok(item)
                     and (why := _problem(item, shape[0], f"{where}[{k}]"))), "")
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
        return f"{where} is not {' or '.join(_TYPE_NAMES[t] for t in kinds)}"
    return ""


def _flat_check(shape: Any) -> Callable[[object], bool]:
    """A fast yes for an item that has ``shape`` when that is an object of plain fields (else a
    check that always sends the item to :func:`_problem`)."""
    if not isinstance(shape, dict) or any(isinstance(k, (dict, list)) for k in shape.values()):
        return lambda _item: False
    fields = [(key.rstrip("?"), kind if isinstance(kind, tuple) else (kind,), key.endswith("?"))
              for key, kind in shape.items()]
    absent = object()

    def ok(item: object) -> bool:
        if type(item) is not dict:
            return False
        for name, kinds, optional in fields:
            v = item.get(name, absent)
            if v is absent:
                if not optional:
                    return False
            elif type(v) not in kinds:  # exact: a bool is no number
                return False
        return True

    return ok


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
        from cudaredist.prefixes import cut_short

        if swap := cut_short(prefix):
            raise PrefixError(swap, prefix=str(prefix))
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
