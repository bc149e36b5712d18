"""The install record in ``<prefix>/.cudaredist/record.json``: what was installed, and checks on it."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudaredist import __version__
from cudaredist.cache import sha256_file
from cudaredist.errors import PrefixError
from cudaredist.extract import FileRecord
from cudaredist.plan import Plan, plan_from_json

RECORD_DIR = ".cudaredist"
RECORD_FILE = "record.json"
SCHEMA = 1


def record_path(prefix: Path) -> Path:
    return prefix / RECORD_DIR / RECORD_FILE


def build_record(plan: Plan, files: list[FileRecord], installed_at: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "tool": f"cudaredist {__version__}",
        "installed_at": installed_at,
        "content_key": plan.content_key(),
        "plan": plan.to_json(),
        "files": [
            {"path": f.path, "size": f.size, "sha256": f.sha256, "mode": oct(f.mode),
             **({"link": f.link} if f.link else {}), "component": f.component}
            for f in files
        ],
    }


def write_record(prefix: Path, record: dict[str, Any]) -> None:
    p = record_path(prefix)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, p)


def read_record(prefix: Path) -> dict[str, Any] | None:
    """The record, or None when the prefix holds no cudaredist install."""
    p = record_path(prefix)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise PrefixError(f"the install record {p} is unreadable ({exc}); reinstall with --force",
                          prefix=str(prefix)) from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or "plan" not in data:
        raise PrefixError(f"the install record {p} has an unknown format; reinstall with --force",
                          prefix=str(prefix))
    return data


def require_record(prefix: Path) -> dict[str, Any]:
    rec = read_record(prefix)
    if rec is None:
        raise PrefixError(f"{prefix} holds no cudaredist install (no {RECORD_DIR}/{RECORD_FILE})",
                          prefix=str(prefix))
    return rec


def record_plan(record: dict[str, Any]) -> Plan:
    return plan_from_json(record["plan"])


@dataclass
class VerifyReport:
    prefix: str
    missing: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    checked: int = 0

    @property
    def ok(self) -> bool:
        return not (self.missing or self.changed or self.extra)

    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "ok": self.ok, "checked": self.checked,
                "missing": self.missing, "changed": self.changed, "extra": self.extra}


def _walk(prefix: Path) -> set[str]:
    found: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(prefix):
        rel_dir = os.path.relpath(dirpath, prefix)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d != RECORD_DIR]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")
            found.add(rel)
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    return found


def verify(prefix: Path, *, fast: bool = False) -> VerifyReport:
    """Re-hash every recorded file; ``fast`` compares sizes and link targets only."""
    rec = require_record(prefix)
    report = VerifyReport(str(prefix))
    recorded: set[str] = set()
    for f in rec["files"]:
        rel = f["path"]
        recorded.add(rel)
        p = prefix / rel
        report.checked += 1
        if "link" in f:
            try:
                if os.readlink(p) != f["link"]:
                    report.changed.append(rel)
            except FileNotFoundError:
                report.missing.append(rel)
            except OSError:
                if not p.exists():  # a link that Windows materialised as a copy
                    report.missing.append(rel)
            continue
        try:
            st = p.lstat()
        except FileNotFoundError:
            report.missing.append(rel)
            continue
        if not p.is_file() or p.is_symlink() or st.st_size != f["size"]:
            report.changed.append(rel)
        elif not fast and sha256_file(p) != f["sha256"]:
            report.changed.append(rel)
    for extra in rec.get("links", []):
        recorded.add(extra["path"])
    report.extra = sorted(_walk(prefix) - recorded)
    return report


def uninstall(prefix: Path) -> int:
    """Remove exactly what the record lists (and then empty directories); returns files removed."""
    rec = require_record(prefix)
    removed = 0
    paths = [f["path"] for f in rec["files"]] + [x["path"] for x in rec.get("links", [])]
    for rel in paths:
        p = prefix / rel
        with contextlib.suppress(FileNotFoundError):
            if p.is_symlink() or p.is_file():
                p.unlink()
                removed += 1
            elif p.is_dir():  # a link materialised as a directory copy
                import shutil

                shutil.rmtree(p)
                removed += 1
    rp = record_path(prefix)
    rp.unlink()
    with contextlib.suppress(OSError):
        rp.parent.rmdir()
    for dirpath, _dirs, _files in sorted(os.walk(prefix, topdown=False), key=lambda t: -len(t[0])):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)  # only succeeds when empty: user files stay
    return removed
