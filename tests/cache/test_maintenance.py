"""Safe maintenance: the cache is tagged and marked, `cache clear`/`prune` delete only cudaredist's
entries of a cudaredist cache, and never break an install running at the same time."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import filelock
import pytest
from typer.testing import CliRunner

from cudaredist.cache import maintenance
from cudaredist.cache.store import CACHEDIR_TAG, MARKER, TAG_SIGNATURE, Cache
from cudaredist.cli import app
from cudaredist.errors import CacheError
from tests.faultserver import FaultServer
from tests.invariants import assert_installed, snapshot
from tests.test_concurrency import NVCC, build_big_mirror

SHA_A = hashlib.sha256(b"archive a").hexdigest()
SHA_B = hashlib.sha256(b"archive b").hexdigest()


def _entry(cache: Path, data: bytes, *, age_days: float = 0) -> str:
    sha = hashlib.sha256(data).hexdigest()
    (cache / "archives").mkdir(parents=True, exist_ok=True)
    (cache / "archives" / sha).write_bytes(data)
    (cache / "archives" / f"{sha}.json").write_text(json.dumps({"name": "a.tar.xz", "url": "u"}))
    if age_days:
        t = time.time() - age_days * 86400
        os.utime(cache / "archives" / sha, (t, t))
    return sha


def _cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, list(args))
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.stdout, r.stderr


# -- the tag and the marker --------------------------------------------------------------------------
def _partial(cache: Cache, hint: str) -> Path:
    """A partial download named as older releases named them (<hint>.<random>.part), marking the root."""
    cache.prepare()
    cache.tmp.mkdir(exist_ok=True)
    fd, name = tempfile.mkstemp(dir=cache.tmp, prefix=f"{hint}.", suffix=".part")
    os.close(fd)
    return Path(name)


def test_a_new_cache_is_tagged_and_marked(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c")
    _partial(cache, "0" * 16)
    tag = (tmp_path / "c" / CACHEDIR_TAG).read_bytes()
    # the standard: the file starts with exactly these 43 bytes
    assert tag.startswith(b"Signature: 8a477f597d28d172789f06886806bc55")
    assert TAG_SIGNATURE == "Signature: 8a477f597d28d172789f06886806bc55"
    assert json.loads((tmp_path / "c" / MARKER).read_text()) == {"format": 1}


def test_an_older_cache_without_the_marker_is_adopted(tmp_path: Path) -> None:
    root = tmp_path / "old"
    sha = _entry(root, b"archive a")
    (root / "tmp").mkdir()
    (root / "locks").mkdir()
    code, out, err = _cli("cache", "clear", "--cache-dir", str(root))
    assert code == 0, err
    assert out.startswith(f"cleared {root}: removed 1 file,")
    assert not (root / "archives" / sha).exists()
    assert (root / MARKER).is_file() and (root / CACHEDIR_TAG).is_file()


def test_an_install_refuses_a_cache_dir_holding_other_files(tmp_path: Path, mirror: Path) -> None:
    home = tmp_path / "home"
    (home / "docs").mkdir(parents=True)
    (home / "docs" / "thesis.tex").write_text("years of work")
    (home / "archives").mkdir()  # one of our names, but nothing in it is ours
    (home / "archives" / "photo.jpg").write_bytes(b"\xff\xd8")
    before = snapshot(home)
    code, _, err = _cli("install", "13.0", "--prefix", str(tmp_path / "cuda"), "--platform", "linux-x86_64",
                        "--base-url", str(mirror), "--cache-dir", str(home), "-q")
    assert code == 1 and f"{home} is not a cudaredist cache" in err
    assert snapshot(home) == before  # not even a CACHEDIR.TAG: backup tools would skip a home directory
    assert not (tmp_path / "cuda").exists()


# -- clear and prune delete only cudaredist's entries --------------------------------------------------
@pytest.mark.parametrize("command", ["clear", "prune"])
def test_maintenance_refuses_a_directory_that_is_not_a_cache(tmp_path: Path, command: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("alias ll='ls -l'")
    (home / "tmp").mkdir()
    (home / "tmp" / "0123456789abcdef.draft").write_text("looks like a partial download, is not")
    before = snapshot(home)
    with pytest.raises(CacheError, match="is not a cudaredist cache"):
        getattr(maintenance, command)(Cache(home))
    code, out, err = _cli("cache", command, "--cache-dir", str(home))
    assert code == 1 and out == "" and err.count("\n") == 1 and "refusing to" in err
    assert snapshot(home) == before


def test_clear_removes_only_known_names(tmp_path: Path) -> None:
    root = tmp_path / "c"
    cache = Cache(root)
    partial = _partial(cache, SHA_A[:16])  # marks the root
    partial.write_bytes(b"half")
    _entry(root, b"archive a")
    cache.store_index("http://example.invalid/redist/", "index.html", b"<html>")
    foreign = {"notes.txt": b"mine", "archives/README": b"mine too", "index/mine/x": b"and this"}
    for rel, data in foreign.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    cleaned = maintenance.clear(cache)
    # index.html.from (the URLs the page came through) is one of them
    assert (cleaned.files, cleaned.busy, cleaned.foreign) == (5, 0, ("notes.txt",))
    left = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    locks = {p for p in left if p.startswith("locks/")}
    assert left - locks == {*foreign, CACHEDIR_TAG, MARKER}


def test_clear_and_prune_skip_entries_a_running_install_holds(tmp_path: Path) -> None:
    root = tmp_path / "c"
    cache = Cache(root)
    busy = _entry(root, b"archive a", age_days=90)
    free = _entry(root, b"archive b", age_days=90)
    partial = _partial(cache, busy[:16])
    old = time.time() - 7200
    os.utime(partial, (old, old))
    with filelock.FileLock(str(root / "locks" / f"{busy}.lock")):  # held as the fetcher holds it
        pruned = maintenance.prune(cache, older_than_days=30)
        assert (pruned.files, pruned.busy) == (1, 2)
        assert (root / "archives" / busy).is_file() and partial.is_file()
        assert not (root / "archives" / free).exists()
        code, out, err = _cli("cache", "clear", "--cache-dir", str(root))
        assert code == 0 and out.startswith(f"cleared {root}: removed 0 files")
        assert "left 2 entries that a running cudaredist holds" in err
        assert partial.is_file() and (root / "archives" / busy).is_file()
    # once its writer is gone, a partial download and the entry go
    cleaned = maintenance.clear(cache)
    assert (cleaned.files, cleaned.busy) == (2, 0)
    assert not partial.exists() and not (root / "archives" / busy).exists()


def test_prune_keeps_a_fresh_partial_and_a_recent_entry(tmp_path: Path) -> None:
    root = tmp_path / "c"
    cache = Cache(root)
    partial = _partial(cache, SHA_A[:16])
    recent = _entry(root, b"archive b", age_days=1)
    assert maintenance.prune(cache, older_than_days=30).files == 0
    assert partial.exists() and (root / "archives" / recent).exists()


def test_prune_drops_a_sidecar_whose_archive_is_gone_unless_its_entry_is_locked(tmp_path: Path) -> None:
    """What a kill between commit's two renames leaves: a .json without its archive."""
    root = tmp_path / "c"
    cache = Cache(root)
    cache.prepare()
    held, gone = (_entry(root, data) for data in (b"archive a", b"archive b"))
    for sha in (held, gone):
        (root / "archives" / sha).unlink()
    with filelock.FileLock(str(root / "locks" / f"{held}.lock")):
        maintenance.prune(cache, older_than_days=30)
    assert (root / "archives" / f"{held}.json").is_file()
    assert not (root / "archives" / f"{gone}.json").exists()


# -- clear and prune while a real install runs ----------------------------------------------------------
@pytest.fixture(scope="module")
def slow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultServer]:
    root = tmp_path_factory.mktemp("maint")
    build_big_mirror(root / "mirror")
    with FaultServer(root / "mirror") as srv:
        yield srv


def _python_m(*args: str) -> list[str]:
    return [sys.executable, "-m", "cudaredist", *args]


@pytest.mark.e2e  # real installs against a slow server (slow)
@pytest.mark.parametrize("command", ["clear", "prune"])
def test_clear_or_prune_during_an_install(slow_server: FaultServer, tmp_path: Path, command: str) -> None:
    cache, prefix = tmp_path / "cache", tmp_path / "cuda"
    env = {**os.environ, "CUDAREDIST_CACHE_DIR": str(cache),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    base = slow_server.base
    # a cache with entries in it, then an install whose biggest download crawls
    subprocess.run(_python_m("install", "12.9", "--prefix", str(tmp_path / "old"), "--platform",
                             "linux-x86_64", "--base-url", base, "-q"), env=env, check=True, timeout=60)
    slow_server.stall(NVCC, at=60_000, seconds=3)
    install = subprocess.Popen(_python_m("install", "13.0", "--prefix", str(prefix), "--platform",
                                         "linux-x86_64", "--base-url", base, "-q"),
                               env=env, stderr=subprocess.PIPE, text=True)
    extra = ["--days", "0"] if command == "prune" else []
    busy_seen = rounds = 0
    while install.poll() is None:
        p = subprocess.run(_python_m("cache", command, "--cache-dir", str(cache), *extra), env=env,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        busy_seen += "a running cudaredist holds" in p.stderr
        rounds += 1
    _, err = install.communicate(timeout=60)
    # the install succeeds, or fails with one paragraph and leaves no half-built prefix
    if install.returncode == 0:
        assert_installed(prefix, "13.0.1")
    else:
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
        assert not prefix.exists()
    # no entry whose bytes do not match its name; the cache is still ours
    for e in Cache(cache).entries():
        assert hashlib.sha256(e.path.read_bytes()).hexdigest() == e.sha256
    assert (cache / MARKER).is_file()
    # it ran while the download was in flight, and left that entry alone
    assert rounds >= 2 and busy_seen >= 1, (rounds, busy_seen)
    # and the next install completes
    subprocess.run(_python_m("install", "13.0", "--prefix", str(prefix), "--platform", "linux-x86_64",
                             "--base-url", base, "-q"), env=env, check=True, timeout=60)
    assert_installed(prefix, "13.0.1", Cache(cache))


# -- unpacked entries: listed, pruned by age and by size, skipped while an install places from them ------
def _installed_cache(tmp_path: Path, mirror: Path) -> Cache:
    code, _, err = _cli("install", "13.0", "--prefix", str(tmp_path / "cuda"), "--platform", "linux-x86_64",
                        "--base-url", str(mirror), "--cache-dir", str(tmp_path / "cache"), "-q")
    assert code == 0, err
    return Cache(tmp_path / "cache")


def test_cache_list_shows_archives_and_unpacked_entries(tmp_path: Path, mirror: Path) -> None:
    cache = _installed_cache(tmp_path, mirror)
    code, out, _ = _cli("cache", "list", "--cache-dir", str(cache.root), "--json")
    rows = json.loads(out)
    assert code == 0
    kinds = sorted({r["kind"] for r in rows})
    assert kinds == ["archive", "unpacked"]
    archives = {r["name"] for r in rows if r["kind"] == "archive"}
    assert {r["name"] for r in rows if r["kind"] == "unpacked"} == archives and len(archives) == 7
    assert all(r["size"] > 0 for r in rows)
    code, out, _ = _cli("cache", "list", "--cache-dir", str(cache.root))
    assert "7 archives" in out and "7 unpacked" in out


def test_prune_max_size_drops_least_recently_used_first(tmp_path: Path, mirror: Path) -> None:
    cache = _installed_cache(tmp_path, mirror)
    entries = cache.entries() + maintenance.unpacked_entries(cache)
    total = sum(e.size for e in entries)
    oldest = min(maintenance.unpacked_entries(cache), key=lambda u: u.last_used)
    t = time.time() - 3600
    os.utime(oldest.path / "files.json", (t, t))  # used an hour ago: the first to go
    code, out, err = _cli("cache", "prune", "--cache-dir", str(cache.root), "--max-size",
                          str(total - 1))
    assert code == 0, err
    assert not oldest.path.exists()
    left = cache.entries() + maintenance.unpacked_entries(cache)
    assert len(left) == len(entries) - 1 and sum(e.size for e in left) <= total - 1
    code, _, err = _cli("cache", "prune", "--cache-dir", str(cache.root), "--max-size", "lots")
    assert code == 2 and "is not a size" in err
    # an install after pruning everything still works (archives unpacked again)
    assert _cli("cache", "prune", "--cache-dir", str(cache.root), "--max-size", "0")[0] == 0
    assert maintenance.unpacked_entries(cache) == [] and cache.entries() == []
    code, _, err = _cli("install", "13.0", "--prefix", str(tmp_path / "again"), "--platform", "linux-x86_64",
                        "--base-url", str(mirror), "--cache-dir", str(cache.root), "-q")
    assert code == 0, err
    assert_installed(tmp_path / "again", "13.0.1")


def test_clear_skips_an_unpacked_entry_an_install_is_placing_from(tmp_path: Path, mirror: Path) -> None:
    cache = _installed_cache(tmp_path, mirror)
    busy = maintenance.unpacked_entries(cache)[0]
    held = filelock.FileLock(str(cache.root / "locks" / f"unpacked-{busy.key}.lock"))
    with held:
        cleaned = maintenance.clear(cache)
    assert cleaned.busy == 1 and busy.path.is_dir()
    assert [u.key for u in maintenance.unpacked_entries(cache)] == [busy.key]
    assert not list((cache.root / "unpacked").glob(".gone-*"))


def test_one_entry_left_and_one_file_removed_read_in_the_singular(tmp_path: Path) -> None:
    root = tmp_path / "c"
    busy = _entry(root, b"archive a", age_days=90)
    _entry(root, b"archive b", age_days=90)
    with filelock.FileLock(str(root / "locks" / f"{busy}.lock")):
        code, out, err = _cli("cache", "clear", "--cache-dir", str(root))
    assert code == 0 and out.startswith(f"cleared {root}: removed 1 file, "), out
    assert "note: left 1 entry that a running cudaredist holds" in err, err
