"""What "never half-installed, never poisoned" means, as checks the tests share.

A prefix is either exactly as it was (``snapshot`` equal) or a complete install that
verifies against its record; nothing named ``.<prefix>.cudaredist-*`` stays beside it; the
cache holds no partial download and no entry whose bytes do not hash to its name.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from cudaredist.cache.store import Cache
from cudaredist.prefixes import verify
from cudaredist.record import read_record


def snapshot(root: Path, *, skip: tuple[Path, ...] = ()) -> dict[str, str]:
    """rel path -> "dir" | "file <mode> <sha256>" | "link <target>", without following links."""
    out: dict[str, str] = {}
    if not os.path.lexists(root):
        return out
    skipped = {os.path.abspath(p) for p in skip}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if os.path.abspath(os.path.join(dirpath, d)) not in skipped]
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            if os.path.abspath(p) in skipped:
                continue
            rel = os.path.relpath(p, root).replace(os.sep, "/")
            if os.path.islink(p):
                out[rel] = f"link {os.readlink(p)}"
            elif os.path.isdir(p):
                out[rel] = "dir"
            else:
                with open(p, "rb") as fh:
                    digest = hashlib.sha256(fh.read()).hexdigest()
                out[rel] = f"file {oct(os.stat(p).st_mode & 0o7777)} {digest}"
    return out


def leftovers(prefix: Path) -> list[str]:
    """Staging trees and moved-aside old trees beside ``prefix`` (the lock file is not one)."""
    if not prefix.parent.is_dir():
        return []
    return sorted(p.name for p in prefix.parent.iterdir()
                  if p.name.startswith(f".{prefix.name}.cudaredist-"))


RESUMABLE = re.compile(r"[0-9a-f]{64}\.part(\.valid)?")


def partials(cache: Cache) -> list[str]:
    """Every file under the cache's tmp/, resumable partial downloads included."""
    return sorted(p.name for p in cache.tmp.iterdir()) if cache.tmp.is_dir() else []


def cache_problems(cache: Cache) -> list[str]:
    """Entries that do not hash to their name, and temp files other than a resumable partial
    download (``<sha256>.part``: what a failed download keeps for the next run to resume)."""
    problems = [f"partial download {name}" for name in partials(cache) if not RESUMABLE.fullmatch(name)]
    for e in cache.entries():
        if hashlib.sha256(e.path.read_bytes()).hexdigest() != e.sha256:
            problems.append(f"entry {e.sha256[:16]} does not hash to its name")
    return problems


def assert_installed(prefix: Path, release: str, cache: Cache | None = None) -> None:
    """A complete install of ``release`` that verifies, with nothing left beside it."""
    rec = read_record(prefix)
    assert rec is not None, f"{prefix} holds no install"
    assert rec["plan"]["release"] == release
    report = verify(prefix)
    assert report.ok, report.to_json()
    assert leftovers(prefix) == []
    if cache is not None:
        assert cache_problems(cache) == []
    assert_version_json(prefix, rec)


def assert_version_json(prefix: Path, rec: dict[str, Any]) -> None:
    """NVIDIA's version.json at the root: the release and every component's version, in the record."""
    body = json.loads((prefix / "version.json").read_text())
    assert body.pop("cuda") == {"name": "CUDA SDK", "version": rec["plan"]["release"]}
    assert {k: v["version"] for k, v in body.items()} == {
        c["name"]: c["version"] for c in rec["plan"]["components"]}
    assert all(v["name"] for v in body.values())
    assert [f["component"] for f in rec["files"] if f["path"] == "version.json"] == ["cuda"]


def assert_intact(prefix: Path, before: dict[str, str], cache: Cache, *bad_sha: str) -> None:
    """The prefix exactly as it was, no leftovers, and no cache entry for the refused archives."""
    assert snapshot(prefix) == before
    assert leftovers(prefix) == []
    assert cache_problems(cache) == []
    for sha in bad_sha:
        assert not cache.archive_path(sha).exists(), f"the refused archive {sha[:16]} is cached"
