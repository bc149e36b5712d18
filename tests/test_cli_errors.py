"""The CLI's error boundary and `resolve --json`, against a real loopback mirror."""

from __future__ import annotations

import errno
import hashlib
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from cudaredist.cli import app
from tests.archives import Exe, MirrorArchive, build_mirror, cut_inside_a_member, digest, toolkit
from tests.hosts import WINDOWS, posix_only, skip_on_windows
from tests.loopback import serving

Serve = Callable[[Path], str]


@pytest.fixture
def base(mirror: Path, serve: Serve) -> str:
    # a Linux-only component, so that "--component cuda_gdb --platform windows-x86_64" has a reason to fail
    build_mirror(mirror, "13.0.1", [MirrorArchive("cuda_gdb", "linux-x86_64", "13.0.85",
                                                  {"bin/cuda-gdb": Exe(b"#!/bin/sh\n")})])
    return serve(mirror)


def _run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def _error(result: Result) -> str:
    """The one error line; also checks the contract around it."""
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert "Traceback" not in result.output
    assert result.stderr.startswith("error: ") and result.stderr.endswith("\n")
    assert result.stderr.count("\n") == 1
    return result.stderr.removeprefix("error: ").rstrip("\n")


@pytest.mark.parametrize(("args", "expected"), [
    pytest.param(["13.5"], "CUDA train 13.5 has no release at {base}; published trains: 12.9, 13.0.",
                 id="unknown-train"),
    pytest.param(["14"], "CUDA train 14 has no release at {base}; published trains: 12.9, 13.0.",
                 id="unknown-major"),
    pytest.param(["13.0.3"], "CUDA release 13.0.3 has no release at {base}; published trains: 12.9, 13.0. "
                 "Releases of train 13.0: 13.0.1.", id="unknown-exact-release"),
    pytest.param(["13.x"], "'13.x' is not a CUDA train or release: use MAJOR (13), MAJOR.MINOR (13.4) "
                 "or MAJOR.MINOR.PATCH (13.4.1)", id="malformed-train"),
    pytest.param(["13.0", "--platform", "linux-riscv64"],
                 "CUDA 13.0.1 has no archives for platform 'linux-riscv64'; platforms in this release: "
                 "linux-x86_64, windows-x86_64", id="unknown-platform"),
    pytest.param(["12.9", "--platform", "windows-x86_64"],
                 "CUDA 12.9.1 has no archives for platform 'windows-x86_64'; platforms in this release: "
                 "linux-x86_64", id="platform-missing-in-older-release"),
    pytest.param(["13.0", "--platform", "windows-x86_64", "--component", "cuda_gdb"],
                 "component cuda_gdb of CUDA 13.0.1 has no archive for platform windows-x86_64 "
                 "(it has: linux-x86_64)", id="linux-only-component-on-windows"),
    pytest.param(["13.0", "--only", "--component", "cuda_nope|cuda_nada"],
                 "CUDA 13.0.1 has no component cuda_nope or cuda_nada (needed for platform linux-x86_64)",
                 id="absent-component"),
    pytest.param(["13.0", "--only"], "nothing to install: give a profile or at least one --component",
                 id="only-without-components"),
])
def test_resolve_errors(base: str, args: list[str], expected: str) -> None:
    argv = ["resolve", *args, "--base-url", base]
    if "--platform" not in args:
        argv += ["--platform", "linux-x86_64"]
    assert _error(_run(*argv)) == expected.format(base=base)


def test_missing_base_directory_on_the_server(base: str) -> None:
    message = _error(_run("resolve", "13.0", "--base-url", base + "nope/", "--platform", "linux-x86_64"))
    assert message == f"HTTP 404 for {base}nope/ (not found: the mirror or base URL lacks this file)"


def test_offline_with_an_empty_cache(base: str, tmp_path: Path) -> None:
    cache = tmp_path / "empty-cache"
    message = _error(_run("resolve", "13.0", "--base-url", base, "--platform", "linux-x86_64", "--offline",
                          "--cache-dir", str(cache)))
    assert message.startswith(f"--offline: no index of {base} is cached in {cache}")


def test_verbose_shows_the_traceback(base: str) -> None:
    quiet = _run("resolve", "13.5", "--base-url", base, "--platform", "linux-x86_64")
    loud = _run("resolve", "13.5", "--base-url", base, "--platform", "linux-x86_64", "--verbose")
    assert quiet.exit_code == loud.exit_code == 1
    assert "Traceback" not in quiet.output
    assert "Traceback (most recent call last)" in loud.stderr
    assert "cudaredist.errors.ResolveError: CUDA train 13.5 has no release" in loud.stderr
    assert loud.stderr.rstrip("\n").endswith(quiet.stderr.rstrip("\n"))


_HEX64 = re.compile(r"[0-9a-f]{64}")


def _check_plan_json(doc: dict[str, object], base: str, platform: str) -> list[str]:
    assert set(doc) == {"release", "release_date", "platform", "base_url", "source", "profile",
                        "total_size", "components", "notes", "hashes_from"}
    why = "a local directory" if base.startswith("file:") else "a loopback address"
    assert doc["hashes_from"] == f"{base} ({why})"
    assert (doc["release"], doc["release_date"], doc["platform"]) == ("13.0.1", "2026-01-01", platform)
    assert (doc["base_url"], doc["source"], doc["profile"], doc["notes"]) == (base, "nvidia", "nvcc", [])
    comps = doc["components"]
    assert isinstance(comps, list)
    for c in comps:
        assert set(c) == {"name", "version", "url", "relative_path", "sha256", "size", "layout", "license"}
        assert isinstance(c["license"], str)  # the manifest's license name, for the SBOM ("" if none)
        assert c["url"] == base + c["relative_path"]
        assert c["relative_path"].startswith(f"{c['name']}/{platform}/{c['name']}-{platform}-")
        assert _HEX64.fullmatch(c["sha256"])
        assert type(c["size"]) is int and c["size"] > 0
        assert c["layout"] == "redist"
    assert doc["total_size"] == sum(c["size"] for c in comps)
    return [c["name"] for c in comps]


@pytest.mark.parametrize("platform", ["linux-x86_64", "windows-x86_64"])
def test_resolve_json_schema(base: str, mirror: Path, platform: str) -> None:
    r = _run("resolve", "13.0", "--base-url", base, "--platform", platform, "--json")
    assert r.exit_code == 0, r.output
    assert r.stderr == ""
    names = _check_plan_json(json.loads(r.stdout), base, platform)
    assert names == ["cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_crt", "libnvvm",
        "cuda_profiler_api", "cuda_nvtx", *(["visual_studio_integration"] if platform.startswith("windows")
                                            else [])]
    # the sha256 and size are the served file's
    raw = json.loads((mirror / "redistrib_13.0.1.json").read_text())
    for c in json.loads(r.stdout)["components"]:
        assert c["sha256"] == raw[c["name"]][platform]["sha256"]
        assert c["size"] == int(raw[c["name"]][platform]["size"])
        assert c["version"] == raw[c["name"]]["version"]


def test_resolve_json_only_components(base: str) -> None:
    r = _run("resolve", "13", "--base-url", base, "--platform", "linux-x86_64", "--json", "--only",
             "-c", "cuda_gdb", "-c", "cuda_cudart")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["profile"] == "custom"
    assert [c["name"] for c in doc["components"]] == ["cuda_gdb", "cuda_cudart"]


def _subprocess(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDAREDIST_", "PYTHON"))}
    env["CUDAREDIST_CACHE_DIR"] = os.environ["CUDAREDIST_CACHE_DIR"]
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    return subprocess.run([sys.executable, "-m", "cudaredist", *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def test_python_m_resolve_json_from_a_file_mirror(mirror: Path) -> None:
    base = mirror.as_uri()
    p = _subprocess("resolve", "13.0", "--base-url", base, "--platform", "linux-x86_64", "--json")
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    names = _check_plan_json(json.loads(p.stdout), base + "/", "linux-x86_64")
    assert names == ["cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_crt", "libnvvm",
        "cuda_profiler_api", "cuda_nvtx"]


def test_python_m_error_exit_code_and_message(mirror: Path) -> None:
    base = mirror.as_uri() + "/"
    p = _subprocess("resolve", "13.5", "--base-url", base, "--platform", "linux-x86_64")
    assert p.returncode == 1
    assert p.stdout == ""
    assert p.stderr == f"error: CUDA train 13.5 has no release at {base}; published trains: 12.9, 13.0.\n"


# -- every failure a user can cause or meet: one paragraph, a documented exit code ---------------------
# Each case runs the real CLI: in this process (CliRunner) where a fault must be injected, else as a
# `python -m cudaredist` process; "unprivileged" cases drop root's power to ignore file modes.

_UNPRIVILEGED = ["setpriv", "--inh-caps=-dac_override,-dac_read_search,-fowner",
                 "--bounding-set=-dac_override,-dac_read_search,-fowner"]


def _unprivileged_prefix() -> list[str]:
    skip_on_windows("file modes that deny access (setpriv drops root's power over them)")
    if os.geteuid() != 0:
        return []  # file modes already apply
    if shutil.which("setpriv") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("setpriv (util-linux) is needed to test permission errors as root")
        pytest.skip("setpriv (util-linux) is needed to test permission errors as root")
    return _UNPRIVILEGED


@dataclass(frozen=True)
class Case:
    """argv after "cudaredist" ({base}, {tmp} and {closed} filled in), what is prepared first, how it
    runs, the exit code and words the message must hold."""

    argv: tuple[str, ...]
    code: int
    words: tuple[str, ...]
    prepare: Callable[[Path], None] | None = None
    how: str = "process"  # "process", "unprivileged", or "runner" (with ``inject``)
    inject: Callable[[pytest.MonkeyPatch, Path], None] | None = None
    env: tuple[tuple[str, str], ...] = ()
    stream: str = "stderr"  # where the paragraph is ("stdout" for doctor's report)
    lead: str = "error: "   # how it starts
    lines: int | None = 1   # how many lines that stream holds (None: a report of several)
    absent: tuple[str, ...] = ()  # paths ({tmp} filled in) that must not exist afterwards


def _file(rel: str, text: str = "x") -> Callable[[Path], None]:
    def make(tmp: Path) -> None:
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(text)
    return make


def _dir(rel: str, mode: int, *files: str) -> Callable[[Path], None]:
    def make(tmp: Path) -> None:
        (tmp / rel).mkdir(parents=True, exist_ok=True)
        for f in files:
            (tmp / rel / f).write_text("x")
        os.chmod(tmp / rel, mode)
    return make


def _both(*steps: Callable[[Path], None]) -> Callable[[Path], None]:
    def make(tmp: Path) -> None:
        for step in steps:
            step(tmp)
    return make


def _old_cache(rel: str, mode: int | None = None) -> Callable[[Path], None]:
    """A cache as an older cudaredist left it: no marker, archives/ with a sha256-named entry."""
    def make(tmp: Path) -> None:
        data = b"an archive"
        (tmp / rel / "archives").mkdir(parents=True)
        (tmp / rel / "archives" / hashlib.sha256(data).hexdigest()).write_bytes(data)
        if mode is not None:
            os.chmod(tmp / rel / "archives", mode)
    return make


# of a tree this host runs (`env` refuses a Linux tree on Windows)
_RECORD = {"schema": 1, "tool": "cudaredist 0", "installed_at": "2026-01-01T00:00:00+00:00",
           "plan": {"release": "13.0.1", "platform": "windows-x86_64" if WINDOWS else "linux-x86_64",
                    "profile": "nvcc",
                    "base_url": "http://127.0.0.1:9/", "components": []}, "files": []}


def _installed(rel: str, record: dict[str, Any] = _RECORD) -> Callable[[Path], None]:
    """A prefix with an install record (a complete one unless ``record`` says otherwise)."""
    def make(tmp: Path) -> None:
        (tmp / rel / ".cudaredist").mkdir(parents=True)
        (tmp / rel / ".cudaredist" / "record.json").write_text(json.dumps(record))
    return make


# the damaged record of a managed toolkit: every command on it names it in one paragraph
_DAMAGED = _installed("tk/cuda-13.0.1-linux-x86_64", {"schema": 1, "plan": {"release": "13.0.1"}})
_DAMAGE_WORDS = ("{tmp}/tk/cuda-13.0.1-linux-x86_64/.cudaredist/record.json is damaged",
                 "plan.platform is missing", "--reinstall")
_TK = ("--install-dir", "{tmp}/tk")
# a sound managed toolkit of this host (what `run` runs a command with)
_MANAGED = _installed(f"tk/cuda-13.0.1-{'windows' if WINDOWS else 'linux'}-x86_64")


def _truncated_mirror(tmp: Path) -> None:
    """A directory mirror at tmp/m whose cuda_nvcc archive's tar ends inside a member, the xz stream
    sound and the manifest stating that archive's real sha256 and size (so the download passes)."""
    build_mirror(tmp / "m", "13.0.1", toolkit("linux-x86_64"))
    manifest = json.loads((tmp / "m" / "redistrib_13.0.1.json").read_text())
    entry = manifest["cuda_nvcc"]["linux-x86_64"]
    cut_inside_a_member(tmp / "m" / entry["relative_path"])
    sha, size = digest(tmp / "m" / entry["relative_path"])
    entry.update(sha256=sha, size=str(size))
    (tmp / "m" / "redistrib_13.0.1.json").write_text(json.dumps(manifest))


_HELD: list[object] = []


def _busy(mp: pytest.MonkeyPatch, tmp: Path) -> None:
    """Another cudaredist holds the prefix lock (flock locks an open file, so this process counts)."""
    import filelock

    lock = filelock.FileLock(str(tmp / ".cuda.cudaredist.lock"))
    lock.acquire()
    _HELD.append(lock)


def _lock_with(mutate: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    """A lock file whose content was changed and its digest recomputed (so only the content is wrong)."""
    def make(tmp: Path) -> None:
        from cudaredist.publish.lockfile import _digest

        archive = {"name": "cuda_cudart", "version": "13.0.96", "url": "http://127.0.0.1:9/cuda_cudart/a.tar.xz",
                   "relative_path": "cuda_cudart/a.tar.xz", "sha256": "0" * 64, "size": 1, "layout": "redist"}
        plan = {"release": "13.0.1", "release_date": "2026-01-01", "platform": "linux-x86_64",
                "base_url": "http://127.0.0.1:9/", "source": "nvidia", "profile": "nvcc", "total_size": 1,
                "components": [archive], "notes": []}
        body: dict[str, Any] = {"lock_version": 1, "release": "13.0.1", "release_date": "2026-01-01",
                                "base_url": "http://127.0.0.1:9/", "source": "nvidia",
                                "request": {"train": "13.0", "profile": "nvcc", "components": []},
                                "platforms": ["linux-x86_64"], "content_key": "0" * 64,
                                "plans": {"linux-x86_64": plan}}
        mutate(body)
        body["digest"] = _digest({k: v for k, v in body.items() if k != "digest"})
        (tmp / "bad.lock").write_text(json.dumps(body))
    return make


def _archive(lock: dict[str, Any]) -> dict[str, Any]:
    return lock["plans"]["linux-x86_64"]["components"][0]  # type: ignore[no-any-return]


def _readonly_fs(under: str) -> Callable[[pytest.MonkeyPatch, Path], None]:
    """Every directory made under tmp/<under> fails as on a read-only file system (EROFS)."""
    def inject(mp: pytest.MonkeyPatch, tmp: Path) -> None:
        real = os.mkdir

        def mkdir(path: object, *a: object, **k: object) -> None:
            if str(path).startswith(str(tmp / under)):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            real(path, *a, **k)  # type: ignore[arg-type]
        mp.setattr(os, "mkdir", mkdir)
    return inject


def _disk_full(mp: pytest.MonkeyPatch, tmp: Path) -> None:
    """Downloads land on /dev/full: the kernel's own ENOSPC on the first write."""
    skip_on_windows("/dev/full (the kernel's own ENOSPC) through a symlink")
    from cudaredist.cache.store import Cache
    from cudaredist.fetch.fetcher import Fetcher

    def partial(self: Cache, sha256: str) -> Path:
        self.prepare()
        self.tmp.mkdir(exist_ok=True)
        link = self.tmp / f"{sha256}.part"
        if not link.is_symlink():
            link.symlink_to("/dev/full")
        return link
    mp.setattr(Cache, "partial", partial)
    mp.setattr(Fetcher, "_resumable", lambda self, part, size: 0)  # nothing to resume: write from 0


def _no_backoff(mp: pytest.MonkeyPatch, tmp: Path) -> None:
    from cudaredist.fetch.transport import RetryPolicy

    mp.setattr(RetryPolicy, "delay", lambda self, attempt, retry_after=None: 0.0)


def _interrupt(mp: pytest.MonkeyPatch, tmp: Path) -> None:
    from cudaredist.fetch.transport import Transport

    def get_bytes(self: Transport, url: str, **kw: object) -> bytes:
        raise KeyboardInterrupt
    mp.setattr(Transport, "get_bytes", get_bytes)


_INSTALL = ("install", "13.0", "--platform", "linux-x86_64", "--base-url", "{base}", "--quiet")
_LOCKED = ("install", "--prefix", "{tmp}/cuda", "--lock", "{tmp}/bad.lock", "--quiet")
_RESOLVE = ("resolve", "13.0", "--platform", "linux-x86_64", "--base-url", "{base}")

CASES = [
    pytest.param(Case((*_INSTALL, "--prefix", "{tmp}/cuda"), 1, ("{tmp}/cuda is a file", "--prefix"),
                      prepare=_file("cuda")), id="prefix-is-a-file"),
    pytest.param(Case((*_INSTALL, "--prefix", "{tmp}/afile/cuda"), 1,
                      ("{tmp}/afile", "a file stands where a directory should be", "--prefix"),
                      prepare=_file("afile")), id="prefix-parent-is-a-file"),
    pytest.param(Case((*_INSTALL, "--prefix", "{tmp}/ro/cuda"), 1,
                      ("{tmp}/ro", "permission denied", "Choose a --prefix you own"),
                      prepare=_dir("ro", 0o555), how="unprivileged"), id="prefix-permission-denied"),
    pytest.param(Case((*_INSTALL, "--prefix", "{tmp}/cuda", "--cache-dir", "{tmp}/cachefile"), 1,
                      ("the cache directory {tmp}/cachefile is a file", "--cache-dir"),
                      prepare=_file("cachefile")), id="cache-dir-is-a-file"),
    pytest.param(Case((*_RESOLVE, "--cache-dir", "{tmp}/ro/cache"), 1,
                      ("{tmp}/ro/cache", "permission denied", "--cache-dir"),
                      prepare=_dir("ro", 0o555), how="unprivileged"), id="cache-dir-permission-denied"),
    pytest.param(Case((*_RESOLVE, "--cache-dir", "{tmp}/rofs/cache"), 1,
                      ("{tmp}/rofs/cache", "read-only filesystem", "--cache-dir", "on a writable one"),
                      how="runner", inject=_readonly_fs("rofs")), id="cache-dir-read-only-fs"),
    pytest.param(Case((*_INSTALL, "--prefix", "{tmp}/cuda", "--cache-dir", "{tmp}/home"), 1,
                      ("{tmp}/home is not a cudaredist cache", "refusing to use it"),
                      prepare=_file("home/thesis.tex")), id="cache-dir-is-someones-data"),
    pytest.param(Case((*_INSTALL, "--prefix", "{tmp}/cuda"), 1,
                      # /dev/full refuses the resize of a resumable download (EINVAL) or the write
                      # (ENOSPC): either way the cache's disk, not the network, and nothing kept
                      ("/cache", "the partial download was removed", "--cache-dir"),
                      how="runner", inject=_disk_full), id="disk-full-while-downloading"),
    pytest.param(Case((*_INSTALL[:5], "{mirror}", "--quiet", "--prefix", "{tmp}/cuda"), 1,
                      ("no space left on the device holding", "the partial download was removed",
                       "--cache-dir"), how="runner", inject=_disk_full),
                 id="disk-full-copying-from-a-directory-mirror"),
    pytest.param(Case(("resolve", "13.0", "--base-url", "{loop}"), 1,
                      ("{loop}", "redirects too often (a redirect loop?)")), id="redirect-loop"),
    pytest.param(Case(("resolve", "13.0", "--base-url", "{ftp}"), 1,
                      ("ftp://127.0.0.1/redist/", "Use an http://, https:// or file:// URL")),
                 id="redirect-to-an-unsupported-scheme"),
    pytest.param(Case(("resolve", "13.0", "--base-url", "https://cudaredist-test.invalid/"), 1,
                      ("cudaredist-test.invalid", "--mirror", "--source pypi", "--offline"),
                      how="runner", inject=_no_backoff), id="network-down-no-dns"),
    pytest.param(Case(("install", "13.0", "--prefix", "{tmp}/cuda", "--base-url",
                       "http://cuda-cache.test:8080/redist/"), 1,
                      ("http://cuda-cache.test:8080/redist/", "plain HTTP", "Nothing was downloaded",
                       "--trusted-host cuda-cache.test:8080", "https://", "lock")),
                 id="plain-http-base-refused"),
    pytest.param(Case(("resolve", "13.0", "--base-url", "http://127.0.0.1:{closed}/"), 1,
                      ("Connection refused", "CUDAREDIST_MIRROR", "--offline with a filled cache"),
                      how="runner", inject=_no_backoff), id="network-down-refused"),
    pytest.param(Case(("resolve", "13.0", "--base-url", "ftp://example.org/redist/"), 2,
                      ("--base-url", "ftp://example.org/redist/", "use http://, https://, file:// or a "
                       "directory")), id="unsupported-scheme"),
    pytest.param(Case(("resolve", "13.0", "--base-url", "http://[::1"), 2,
                      ("--base-url", "'http://[::1' is not a valid URL", "Invalid IPv6 URL")),
                 id="resolve-malformed-base-url"),
    pytest.param(Case(("trains", "--mirror", "http://[::1"), 2, ("--mirror", "is not a valid URL")),
                 id="trains-malformed-mirror"),
    pytest.param(Case(("lock", "13.0", "--base-url", "http://host:port/"), 2,
                      ("--base-url", "'http://host:port/' is not a valid URL")), id="lock-malformed-port"),
    pytest.param(Case(("mirror", "13.0", "--out", "{tmp}/m", "--base-url", "http://[::1"), 2,
                      ("--base-url", "is not a valid URL")), id="mirror-malformed-base-url"),
    pytest.param(Case((*_INSTALL[:2], "--source", "pypi", "--index-url", "http://[::1/simple",
                       "--prefix", "{tmp}/cuda"), 2, ("--index-url", "is not a valid URL")),
                 id="install-malformed-index-url"),
    pytest.param(Case(("resolve", "13.0", "--base-url", "https://127.0.0.1:{closed}/"), 2,
                      ("SSL_CERT_FILE={tmp}/ca.pem", "no PEM certificate", "unset it"),
                      prepare=_file("ca.pem", "not a certificate\n"),
                      env=(("SSL_CERT_FILE", "{tmp}/ca.pem"),)), id="ssl-cert-file-not-pem"),
    pytest.param(Case(("resolve", "13.0", "--base-url", "https://127.0.0.1:{closed}/"), 2,
                      ("SSL_CERT_FILE={tmp}/none.pem", "No such file or directory"),
                      env=(("SSL_CERT_FILE", "{tmp}/none.pem"),)), id="ssl-cert-file-missing"),
    pytest.param(Case((*_INSTALL, "--prefix", "{tmp}/cuda", "--source", "conda"), 2,
                      ("unknown source 'conda'", "nvidia, pypi")), id="install-unknown-source"),
    pytest.param(Case(("trains", "--source", "conda"), 2, ("unknown source 'conda'",)),
                 id="trains-unknown-source"),
    pytest.param(Case((*_INSTALL, "--prefix", "{tmp}/cuda", "--link-mode", "symlink"), 2,
                      ("unknown link mode 'symlink'", "clone, hardlink, copy")),
                 id="install-unknown-link-mode"),
    pytest.param(Case(("env", "--prefix", "{tmp}/cuda", "--shell", "tcsh"), 2, ("unknown --shell 'tcsh'",),
                      prepare=_installed("cuda")), id="env-unknown-shell"),
    pytest.param(Case(("cache", "prune", "--max-size", "lots"), 2, ("--max-size 'lots' is not a size",)),
                 id="cache-prune-bad-size"),
    pytest.param(Case(("list", *_TK), 0, _DAMAGE_WORDS, prepare=_DAMAGED, lead="warning: skipped: "),
                 id="list-skips-a-damaged-record"),
    pytest.param(Case(("find", "13.0", *_TK, "-p", "linux-x86_64"), 1, _DAMAGE_WORDS, prepare=_DAMAGED),
                 id="find-damaged-record"),
    pytest.param(Case(("info", "13.0", *_TK, "-p", "linux-x86_64"), 1, _DAMAGE_WORDS, prepare=_DAMAGED),
                 id="info-damaged-record"),
    pytest.param(Case(("env", "13.0", *_TK, "-p", "linux-x86_64"), 1, _DAMAGE_WORDS, prepare=_DAMAGED),
                 id="env-damaged-record"),
    pytest.param(Case(("verify", "13.0", *_TK, "-p", "linux-x86_64"), 1, _DAMAGE_WORDS, prepare=_DAMAGED),
                 id="verify-damaged-record"),
    pytest.param(Case(("run", *_TK, "-p", "linux-x86_64", "13.0", "--", "true"), 1, _DAMAGE_WORDS,
                      prepare=_DAMAGED), id="run-damaged-record"),
    pytest.param(Case(("run", "13.0", *_TK), 2, ("give the command to run after --", "-- nvcc --version"),
                      prepare=_MANAGED), id="run-no-command"),
    pytest.param(Case(("run", *_TK, "13.0", "--", "cudaredist-no-such-program"), 127,
                      ("cudaredist-no-such-program: command not found", "{tmp}/tk/cuda-13.0.1-"),
                      prepare=_MANAGED), id="run-command-not-found"),
    pytest.param(Case(("run", *_TK, "13.0", "--", "{tmp}/notes.txt"), 126,
                      ("cannot run {tmp}/notes.txt", "Permission denied"),
                      prepare=_both(_MANAGED, _file("notes.txt"))), id="run-not-executable",
                 marks=pytest.mark.skipif(WINDOWS, reason="Windows tells a file it cannot run by its name")),
    pytest.param(Case(("run", "13.0", "--install-dir"), 2, ("--install-dir needs a value",)),
                 id="run-option-without-its-value"),
    pytest.param(Case(("run", *_TK, "13.0", "--frobnicate", "--", "true"), 2,
                      ("no such option --frobnicate", "cudaredist run --help", "after --"), prepare=_MANAGED),
                 id="run-unknown-option"),
    pytest.param(Case(("uninstall", "13.0", *_TK, "-p", "linux-x86_64"), 1, _DAMAGE_WORDS,
                      prepare=_DAMAGED), id="uninstall-damaged-record"),
    pytest.param(Case(("doctor", "13.0", *_TK, "-p", "linux-x86_64"), 1, _DAMAGE_WORDS, prepare=_DAMAGED,
                      stream="stdout", lead="fail  toolkit", lines=None), id="doctor-damaged-record"),
    pytest.param(Case((*_INSTALL, *_TK), 1, _DAMAGE_WORDS, prepare=_DAMAGED),
                 id="managed-install-over-a-damaged-record"),
    pytest.param(Case(("info", "--prefix", "{tmp}/cuda"), 1, ("{tmp}/cuda/.cudaredist/record.json is damaged",
                                                              "files[0].size is not a number"),
                      prepare=_installed("cuda", {**_RECORD, "files": [{"path": "a", "size": "1",
                                                                         "sha256": "0"}]})),
                 id="info-record-with-a-wrong-type"),
    pytest.param(Case(("install", "--prefix", "{tmp}/cuda", "--lock", "{tmp}/bad.lock"), 1,
                      ("{tmp}/bad.lock", "not readable JSON"), prepare=_file("bad.lock", "{\"lock_")),
                 id="lock-not-json"),
    pytest.param(Case(("install", "--prefix", "{tmp}/cuda", "--lock", "{tmp}"), 1,
                      ("the lock file {tmp}", "Is a directory")), id="lock-is-a-directory"),
    pytest.param(Case(_LOCKED, 1, ("{tmp}/bad.lock", "'platforms' does not list the planned platforms"),
                      prepare=_lock_with(lambda b: b.update(platforms=7))), id="lock-platforms-not-a-list"),
    pytest.param(Case(_LOCKED, 1, ("{tmp}/bad.lock", "sha256 must be 64 lowercase hex digits"),
                      prepare=_lock_with(lambda b: _archive(b).update(sha256=5))),
                 id="lock-sha256-not-a-string"),
    pytest.param(Case(_LOCKED, 1, ("{tmp}/bad.lock", "is not http(s):// or file://"),
                      prepare=_lock_with(lambda b: _archive(b).update(url=5))),
                 id="lock-url-not-a-string"),
    pytest.param(Case(_LOCKED, 1, ("{tmp}/bad.lock", "lacks a field or has a wrong type"),
                      prepare=_lock_with(lambda b: b.update(plans={"linux-x86_64": 3}))),
                 id="lock-plan-not-an-object"),
    pytest.param(Case(("cache", "list", "--cache-dir", "{tmp}/cachefile"), 1,
                      ("{tmp}/cachefile",), prepare=_file("cachefile")), id="cache-list-on-a-file"),
    pytest.param(Case(("cache", "list", "--cache-dir", "{tmp}/old"), 1,
                      ("{tmp}/old/archives", "permission denied"),
                      prepare=_old_cache("old", 0o000), how="unprivileged"), id="cache-list-unreadable"),
    pytest.param(Case((*_INSTALL, "--prefix", "{tmp}/cuda", "--cache-dir", "{tmp}/old"), 1,
                      ("{tmp}/old", "permission denied", "--cache-dir"), prepare=_old_cache("old", 0o000),
                      how="unprivileged", absent=("{tmp}/cuda",)), id="install-older-cache-unreadable"),
    pytest.param(Case((*_INSTALL, "--prefix", "{tmp}/cuda", "--cache-dir", "{tmp}/wx"), 2,
                      ("{tmp}/wx", "is not readable", "--cache-dir"), prepare=_dir("wx", 0o300),
                      how="unprivileged", lead="Usage: ", lines=None, absent=("{tmp}/cuda",)),
                 id="install-cache-not-listable"),  # the option's own check, before the cache's
    pytest.param(Case((*_INSTALL, "--prefix", "{tmp}/cuda", "--cache-dir", "{tmp}/c"), 1,
                      ("{tmp}/c/index", "permission denied", "--cache-dir"),
                      prepare=_both(_file("c/.cudaredist-cache", '{"format": 1}\n'), _dir("c/index", 0o555)),
                      how="unprivileged", absent=("{tmp}/cuda",)), id="install-index-cache-unwritable"),
    pytest.param(Case(("cache", "clear", "--cache-dir", "{tmp}/home"), 1,
                      ("{tmp}/home is not a cudaredist cache", "refusing to clear it"),
                      prepare=_file("home/thesis.tex")), id="cache-clear-someones-data"),
    pytest.param(Case(("cache", "prune", "--cache-dir", "{tmp}/home", "--days", "0"), 1,
                      ("{tmp}/home is not a cudaredist cache", "refusing to prune it"),
                      prepare=_file("home/.bashrc")), id="cache-prune-someones-data"),
    pytest.param(Case(("cache", "clear", "--cache-dir", "{tmp}/cachefile"), 1,
                      ("{tmp}/cachefile is a file",), prepare=_file("cachefile")), id="cache-clear-a-file"),
    pytest.param(Case(("cache", "clear", "--cache-dir", "{tmp}/old"), 1,
                      ("{tmp}/old", "permission denied", "--cache-dir"),
                      prepare=_old_cache("old", 0o555), how="unprivileged"),
                 id="cache-clear-permission-denied"),
    pytest.param(Case(("install", "13.0", "-p", "linux-x86_64", "--base-url", "{tmp}/m",
                       "--prefix", "{tmp}/cuda", "--quiet"), 1,
                      ("cuda_nvcc-linux-x86_64-13.0.88-archive.tar.xz", "truncated"),
                      prepare=_truncated_mirror, absent=("{tmp}/cuda",)), id="archive-ends-inside-a-member"),
    pytest.param(Case(("uninstall", "--prefix", "{tmp}/cuda"), 1, ("{tmp}/cuda holds no cudaredist install",),
                      prepare=_dir("cuda", 0o755, "x")), id="uninstall-not-installed"),
    pytest.param(Case(("env", "--prefix", "{tmp}/cuda", "--github"), 1,
                      ("{tmp}/genv", "Is a directory"),
                      prepare=_both(_dir("genv", 0o755), _installed("cuda")),
                      env=(("GITHUB_ENV", "{tmp}/genv"), ("GITHUB_PATH", "{tmp}/gpath"))),
                 id="env-github-file-is-a-directory"),
    pytest.param(Case(("lock", "13.0", "--base-url", "{base}", "-p", "linux-x86_64",
                       "-o", "{tmp}/afile/x.lock"), 1, ("{tmp}/afile",), prepare=_file("afile")),
                 id="lock-output-under-a-file"),
    pytest.param(Case(("resolve", "13.0", "--base-url", "{base}"), 130, ("interrupted",), how="runner",
                      inject=_interrupt), id="interrupted"),
    pytest.param(Case(("install", "--prefix", "{tmp}/cuda", "--quiet"), 2, ("give a TRAIN",)),
                 id="usage-no-train"),
    *(pytest.param(Case((command, *_TK), 2, ("give --prefix DIR, or the TRAIN of a managed toolkit",
                                             "cudaredist list")), id=f"{command}-neither-prefix-nor-train")
      for command in ("verify", "info", "env", "uninstall")),
    pytest.param(Case((*_INSTALL, "--prefix", "{tmp}/cuda", "--lock-timeout", "0.2"), 75,
                      ("{tmp}/cuda is busy", "--lock-timeout"), how="runner", inject=_busy),
                 id="busy-prefix"),
]


@pytest.fixture
def redirect_loop() -> Iterator[str]:
    """A real loopback server whose every path redirects to itself."""
    class Loop(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            # under /ftp/: to a scheme no one fetches from; elsewhere: to itself
            ftp = self.path.startswith("/ftp/")
            self.send_header("Location", "ftp://127.0.0.1/redist/" if ftp else self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serving(Loop) as base:
        yield base + "redist/"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("case", CASES)
def test_one_paragraph_and_an_exit_code(case: Case, base: str, mirror: Path, redirect_loop: str,
                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "w"
    work.mkdir()
    fill = {"base": base, "mirror": str(mirror), "tmp": str(work), "loop": redirect_loop,
            "ftp": redirect_loop.replace("/redist/", "/ftp/redist/"),
            "closed": str(_closed_port())}
    argv = [a.format(**fill) for a in case.argv]
    env = {k: v.format(**fill) for k, v in case.env}
    if case.prepare is not None:
        case.prepare(work)
    try:
        if case.how == "runner":
            assert case.inject is not None
            case.inject(monkeypatch, work)
            for k, v in env.items():
                monkeypatch.setenv(k, v)
            r = CliRunner().invoke(app, argv)
            assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
            code, out, err = r.exit_code, r.stdout, r.stderr
        else:
            runner = _unprivileged_prefix() if case.how == "unprivileged" else []
            full = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | env
            full["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
            p = subprocess.run([*runner, sys.executable, "-m", "cudaredist", *argv], capture_output=True,
                               text=True, env=full, timeout=120, check=False)
            code, out, err = p.returncode, p.stdout, p.stderr
    finally:
        while _HELD:
            _HELD.pop().release()  # type: ignore[attr-defined]
        for d, _dirs, _files in os.walk(work):
            os.chmod(d, 0o755)
    assert "Traceback" not in out + err and "internal error" not in out + err, out + err
    said = err if case.stream == "stderr" else out
    assert code == case.code, out + err
    assert case.lines is None or said.count("\n") == case.lines, said
    assert said.startswith(case.lead) and said.endswith("\n"), said
    for word in case.words:  # paths as the host writes them: C:\...\w/bad.lock reads C:/.../w/bad.lock
        assert word.format(**fill).replace("\\", "/") in said.replace("\\", "/"), said
    for path in case.absent:
        assert not Path(path.format(**fill)).exists(), path


@posix_only("sh runs the command")
def test_run_takes_verbose_after_the_train_as_its_own(tmp_path: Path) -> None:
    """``-v`` between TRAIN and ``--`` is run's (not the command, which would be "not found": 127)."""
    _MANAGED(tmp_path)
    r = _run("run", "--install-dir", str(tmp_path / "tk"), "13.0", "-v", "--", "sh", "-c", "exit 3")
    assert r.exit_code == 3, r.output
    assert "not found" not in r.output


def test_an_unknown_profile_is_a_usage_error(base: str) -> None:
    """A bad option value exits 2, as --link-mode's does (it exited 1)."""
    r = _run("resolve", "13.0", "--profile", "cuda", "--base-url", base)
    assert r.exit_code == 2
    assert r.stderr == "error: unknown profile 'cuda'; profiles: build, nvcc, runtime, torch\n"


def test_reinstall_replace_foreign_and_the_deprecated_force(mirror: Path, tmp_path: Path) -> None:
    common = ["--platform", "linux-x86_64", "--base-url", str(mirror)]
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    assert _run("install", "13.0", "--prefix", str(ours), *common, "-q").exit_code == 0
    again = _run("install", "13.0", "--prefix", str(ours), *common, "--json")
    assert json.loads(again.stdout)["noop"] is True
    re = _run("install", "13.0", "--prefix", str(ours), *common, "--reinstall", "--json")
    assert re.exit_code == 0 and json.loads(re.stdout)["noop"] is False and re.stderr == ""
    forced = _run("install", "13.0", "--prefix", str(ours), *common, "--force", "--json")
    assert forced.exit_code == 0 and json.loads(forced.stdout)["noop"] is False
    assert forced.stderr.startswith("note: --force is deprecated and means --reinstall")
    assert "--force" not in _run("install", "--help").stdout  # hidden
    # a directory cudaredist did not install: only --replace-foreign replaces it
    theirs.mkdir()
    (theirs / "thesis.tex").write_text("years of work")
    for flags in ([], ["--reinstall"], ["--force"]):
        r = _run("install", "13.0", "--prefix", str(theirs), *common, "-q", *flags)
        assert r.exit_code == 1 and "pass --replace-foreign to replace it" in r.stderr.splitlines()[-1]
        assert (theirs / "thesis.tex").read_text() == "years of work"
    r = _run("install", "13.0", "--prefix", str(theirs), *common, "-q", "--replace-foreign")
    assert r.exit_code == 0, r.stderr
    assert not (theirs / "thesis.tex").exists() and (theirs / "bin" / "nvcc").is_file()


def test_an_untranslated_error_is_one_paragraph_that_says_it_is_a_bug(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The boundary's last resort: what no layer translated still reaches the user as one paragraph
    (with the traceback behind --verbose), never as a traceback."""
    from cudaredist import managed

    def broken(root: Path) -> object:
        raise ValueError("an unforeseen value")

    monkeypatch.setattr(managed, "scan", broken)
    r = CliRunner().invoke(app, ["list"])
    assert (r.exit_code, r.stdout) == (1, "")
    assert r.stderr == ("error: internal error (a bug in cudaredist): ValueError: an unforeseen value; run "
                        "it again with --verbose and report the traceback\n")
    verbose = CliRunner().invoke(app, ["list", "--verbose"])
    assert verbose.exit_code == 1 and "Traceback" in verbose.stderr


@posix_only("a pipe whose reader has gone: EPIPE on POSIX (Windows reports EINVAL)")
def test_stdout_closed_by_its_reader_is_a_quiet_exit(mirror: Path) -> None:
    """`cudaredist info | head` with the reader gone: no "error: a file operation failed: Broken pipe"
    and no Python "Exception ignored" at exit; SIGPIPE's status, as git and coreutils give."""
    r, w = os.pipe()
    os.close(r)  # the reader exits before the first byte is written
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    try:
        p = subprocess.run([sys.executable, "-m", "cudaredist", "resolve", "13.0", "--base-url",
                            mirror.as_uri(), "--platform", "linux-x86_64", "--json"],
                           stdout=w, stderr=subprocess.PIPE, text=True, env=env, timeout=120, check=False)
    finally:
        os.close(w)
    assert p.stderr == ""
    assert p.returncode == 141
