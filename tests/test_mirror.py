"""`cudaredist mirror`, installs behind --mirror / CUDAREDIST_MIRROR, a tool-made mirror served by a
real nginx, and the progress output such commands leave in CI logs."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudaredist.mirror import index_page
from cudaredist.resolve import labels_from_listing
from tests.realmirror import nginx_serve  # noqa: F401  (fixture)

LINUX_ARCHIVES = 5  # the nvcc profile of the tiny 13.0.1 fixture: nvcc, cudart, cccl, crt, nvvm


def cli(*args: str):  # type: ignore[no-untyped-def]
    from cudaredist.cli import app

    return CliRunner().invoke(app, list(args))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def archives(root: Path) -> dict[str, Path]:
    return {p.relative_to(root).as_posix(): p for p in root.rglob("*-archive.*")}


def make_mirror(source: str, out: Path, *args: str) -> dict:  # type: ignore[type-arg]
    r = cli("mirror", *args, "--base-url", source, "--out", str(out), "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


# -- layout ---------------------------------------------------------------------------------------
def test_mirror_is_laid_out_like_nvidia(mirror: Path, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    source = serve(mirror)
    report = make_mirror(source, out, "13.0", "--platform", "linux-x86_64", "--platform", "windows-x86_64")
    assert report["releases"] == ["13.0.1"]
    assert {a["status"] for a in report["archives"]} == {"downloaded"}
    # a second release joins the same mirror (its archives that 13.0.1 shares are already there)
    report = make_mirror(source, out, "12.9", "--platform", "linux-x86_64")
    assert report["releases"] == ["12.9.1"] and {a["status"] for a in report["archives"]} == {"present"}
    # the manifests are the served bytes, unmodified
    for label in ("13.0.1", "12.9.1"):
        name = f"redistrib_{label}.json"
        assert (out / name).read_bytes() == (mirror / name).read_bytes()
    # every archive of the nvcc profile at its relative_path, byte-identical to the source
    got = archives(out)
    assert len(got) == 2 * LINUX_ARCHIVES
    for rel, path in got.items():
        assert sha256(path) == sha256(mirror / rel)
    # the index page links the releases the way NVIDIA's does (single quotes), and resolves
    page = (out / "index.html").read_text()
    assert "<a href='redistrib_13.0.1.json'>" in page and "<a href='redistrib_12.9.1.json'>" in page
    assert labels_from_listing(page) == ["13.0.1", "12.9.1"]
    # nothing else: no temp files, no lock file inside the mirror
    assert [p for p in out.rglob("*") if p.name.startswith(".") or p.suffix == ".part"] == []


def test_component_selection(mirror: Path, tmp_path: Path) -> None:
    only = make_mirror(str(mirror), tmp_path / "a", "13.0", "-p", "windows-x86_64", "--only",
                       "--component", "cuda_cudart")
    assert [a["component"] for a in only["archives"]] == ["cuda_cudart"]
    runtime = make_mirror(str(mirror), tmp_path / "b", "13.0", "13.0.1", "-p", "linux-x86_64",
                          "--profile", "runtime", "--component", "cuda_crt")
    assert runtime["releases"] == ["13.0.1"]  # two names for one release: mirrored once
    assert sorted(a["component"] for a in runtime["archives"]) == ["cuda_crt", "cuda_cudart"]


def test_12x_platform_without_archives_fails_before_any_download(mirror: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = cli("mirror", "12.9", "--platform", "windows-x86_64", "--base-url", str(mirror), "--out", str(out))
    assert r.exit_code == 1
    assert "no archives for platform 'windows-x86_64'" in r.stderr
    assert not out.exists() or archives(out) == {}


def test_rerun_is_incremental_and_uses_the_cache(mirror: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = make_mirror(str(mirror), out, "13.0", "--platform", "linux-x86_64")
    assert [a["status"] for a in first["archives"]] == ["downloaded"] * LINUX_ARCHIVES
    got = archives(out)
    # archives are hard links of the verified cache entries (same filesystem here)
    cache = Path(os.environ["CUDAREDIST_CACHE_DIR"]) / "archives"
    for rel, path in got.items():
        entry = cache / sha256(path)
        assert entry.is_file() and os.path.samefile(entry, path), rel
    # the source may go away: verified archives are neither fetched nor rewritten
    inodes = {rel: p.stat().st_ino for rel, p in got.items()}
    for rel in got:
        (mirror / rel).unlink()
    second = make_mirror(str(mirror), out, "13.0", "--platform", "linux-x86_64")
    assert {a["status"] for a in second["archives"]} == {"present"}
    assert {rel: p.stat().st_ino for rel, p in archives(out).items()} == inodes
    # a damaged mirror file (same size, other bytes) and a missing one come back from the cache
    nvcc, cudart = sorted(r for r in got if "cuda_nvcc" in r or "cuda_cudart" in r)
    data = bytearray(got[nvcc].read_bytes())
    data[-1] ^= 0xFF
    got[nvcc].unlink()  # break the hard link first, or the cache entry is damaged too
    got[nvcc].write_bytes(bytes(data))
    got[cudart].unlink()
    third = make_mirror(str(mirror), out, "13.0", "--platform", "linux-x86_64")
    status = {a["relative_path"]: a["status"] for a in third["archives"]}
    assert status[nvcc] == status[cudart] == "cached"
    assert sorted(set(status.values())) == ["cached", "present"]
    expected = {a["relative_path"]: a["sha256"] for a in third["archives"]}
    assert {rel: sha256(p) for rel, p in archives(out).items()} == expected


def test_licenses_are_copied_when_the_source_has_them(mirror: Path, tmp_path: Path) -> None:
    manifest_path = mirror / "redistrib_13.0.1.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["cuda_nvcc"]["license_path"] = "cuda_nvcc/LICENSE.txt"
    manifest["cuda_cudart"]["license_path"] = "cuda_cudart/LICENSE.txt"  # not at the source
    manifest_path.write_text(json.dumps(manifest, indent=4))
    (mirror / "cuda_nvcc" / "LICENSE.txt").write_text("nvcc eula")
    out = tmp_path / "out"
    report = make_mirror(str(mirror), out, "13.0", "--platform", "linux-x86_64")
    assert report["licenses"] == ["cuda_nvcc/LICENSE.txt"]
    assert (out / "cuda_nvcc" / "LICENSE.txt").read_text() == "nvcc eula"
    assert any("cuda_cudart/LICENSE.txt" in n for n in report["notes"])
    assert (out / "redistrib_13.0.1.json").read_bytes() == manifest_path.read_bytes()


def test_offline_mirror_is_filled_from_the_cache(mirror: Path, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    base = serve(mirror)
    assert cli("install", "13.0", "--prefix", str(tmp_path / "p"), "--platform", "linux-x86_64",
               "--base-url", base, "-q").exit_code == 0
    report = make_mirror(base, tmp_path / "out", "13.0", "--platform", "linux-x86_64", "--offline")
    assert [a["status"] for a in report["archives"]] == ["cached"] * LINUX_ARCHIVES
    assert (tmp_path / "out" / "redistrib_13.0.1.json").read_bytes() == \
        (mirror / "redistrib_13.0.1.json").read_bytes()
    r = cli("mirror", "13.0", "--platform", "windows-x86_64", "--base-url", base, "--offline",
            "--out", str(tmp_path / "out2"))
    assert r.exit_code == 1 and "--offline" in r.stderr and "cuda_nvcc-windows-x86_64" in r.stderr


def test_index_page_escapes_and_sorts() -> None:
    page = index_page(["13.10.0", "13.2.2"], ["a&b"])
    assert page.index("redistrib_13.2.2.json") < page.index("redistrib_13.10.0.json")
    assert "href='a&amp;b/'" in page
    assert labels_from_listing(page) == ["13.10.0", "13.2.2"]


# -- installing behind a mirror -------------------------------------------------------------------
def test_mirror_lacking_an_archive_falls_back_to_the_base(mirror: Path, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    make_mirror(str(mirror), out, "13.0", "--platform", "linux-x86_64")
    missing = next(rel for rel in archives(out) if "cuda_cccl" in rel)
    (out / missing).unlink()
    base, front = serve(mirror), serve(out)
    r = cli("install", "13.0", "--prefix", str(tmp_path / "p"), "--platform", "linux-x86_64",
            "--mirror", front, "--base-url", base, "--cache-dir", str(tmp_path / "fresh cache"))
    assert r.exit_code == 0, r.output
    # a message names the mirror URL that failed, and the install goes on at the base URL
    line = next((x for x in r.stderr.splitlines() if front + missing in x), "")
    assert "404" in line and "trying" in line, r.stderr
    assert (tmp_path / "p" / "include" / "cccl" / "thrust" / "version.h").is_file()
    rec = json.loads((tmp_path / "p" / ".cudaredist" / "record.json").read_text())
    assert rec["plan"]["base_url"].startswith("http://127.0.0.1") and rec["plan"]["base_url"] != base


def test_no_fallback_is_a_clear_error(mirror: Path, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    make_mirror(str(mirror), out, "13.0", "--platform", "linux-x86_64")
    missing = next(rel for rel in archives(out) if "cuda_cccl" in rel)
    (out / missing).unlink()
    served = serve(out)
    prefix = tmp_path / "p"
    r = cli("install", "13.0", "--prefix", str(prefix), "--platform", "linux-x86_64",
            "--mirror", served, "--base-url", serve(mirror), "--no-fallback",
            "--cache-dir", str(tmp_path / "fresh cache"))
    assert r.exit_code == 1
    assert f"HTTP 404 for {served}{missing}" in r.stderr
    assert "the mirror or base URL lacks this file" in r.stderr
    assert not prefix.exists()
    r = cli("install", "13.0", "--prefix", str(prefix), "--no-fallback")
    assert r.exit_code == 2 and "--no-fallback needs --mirror" in r.stderr


def test_mirror_from_environment_as_file_url(mirror: Path, serve, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out dir"
    make_mirror(str(mirror), out, "13.0", "--platform", "linux-x86_64")
    monkeypatch.setenv("CUDAREDIST_MIRROR", out.as_uri())
    # the base is a server that is not there: everything must come from the mirror
    r = cli("install", "13.0", "--prefix", str(tmp_path / "p"), "--platform", "linux-x86_64",
            "--base-url", "http://127.0.0.1:9/", "--json", "--cache-dir", str(tmp_path / "fresh cache"))
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["release"] == "13.0.1" and got["plan"]["base_url"] == out.as_uri() + "/"


def test_mirror_without_the_release_resolves_at_the_base(mirror: Path, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    make_mirror(str(mirror), out, "12.9", "--platform", "linux-x86_64")
    r = cli("resolve", "13.0", "--platform", "linux-x86_64", "--mirror", str(out),
            "--base-url", serve(mirror), "--json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["release"] == "13.0.1" and plan["base_url"].startswith("http://127.0.0.1")


# -- a real web server ------------------------------------------------------------------------------
def test_tool_made_mirror_served_by_nginx_installs(mirror: Path, nginx_serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    out = tmp_path / "made by cudaredist"
    make_mirror(str(mirror), out, "13.0", "--platform", "linux-x86_64,windows-x86_64")
    make_mirror(str(mirror), out, "12.9", "--platform", "linux-x86_64")
    url = nginx_serve(out)
    r = cli("trains", "--base-url", url, "--json")
    assert r.exit_code == 0, r.output
    assert [t["release"] for t in json.loads(r.stdout)["trains"]] == ["12.9.1", "13.0.1"]
    probes = {"linux-x86_64": "lib/libcudart.so", "windows-x86_64": "bin/x64/cudart64_13.dll"}
    for platform, probe in probes.items():
        prefix = tmp_path / f"cuda {platform}"
        r = cli("install", "13.0", "--prefix", str(prefix), "--platform", platform, "--base-url", url,
                "-q", "--cache-dir", str(tmp_path / "fresh cache"))
        assert r.exit_code == 0, r.output
        assert os.path.lexists(prefix / probe)
        assert cli("verify", "--prefix", str(prefix)).exit_code == 0
    # nginx served the manifest bytes unchanged (same sha256 as the source's)
    import httpx

    served = httpx.get(url + "redistrib_13.0.1.json").content
    assert hashlib.sha256(served).hexdigest() == sha256(mirror / "redistrib_13.0.1.json")


# -- progress in logs -------------------------------------------------------------------------------
def run_cli(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERM")}
    return subprocess.run([sys.executable, "-m", "cudaredist", *args], env=env, text=True,
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path)


@pytest.mark.parametrize("command", ["install", "mirror"])
def test_progress_in_a_non_tty_log_is_a_few_plain_lines(command: str, mirror: Path, serve,
                                                       tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    base = serve(mirror)
    where = ["--prefix", str(tmp_path / "p")] if command == "install" else ["--out", str(tmp_path / "m")]
    r = run_cli(command, "13.0", *where, "--platform", "linux-x86_64", "--base-url", base, tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stderr and "\x1b" not in r.stderr
    lines = r.stderr.splitlines()
    assert 3 <= len(lines) <= LINUX_ARCHIVES + 4, lines
    assert sum("downloaded" in line and "-archive." in line for line in lines) == LINUX_ARCHIVES
    assert r.stdout == ""
    # --quiet: nothing at all; --verbose: one more line per extracted archive
    quiet = run_cli(command, "13.0", *where, "--platform", "linux-x86_64", "--base-url", base, "--quiet",
                    "--force" if command == "install" else "--jobs=2", tmp_path=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == ""
    if command == "install":
        loud = run_cli(command, "13.0", *where, "--platform", "linux-x86_64", "--base-url", base, "--force",
                       "--verbose", tmp_path=tmp_path)
        assert loud.returncode == 0 and "\r" not in loud.stderr
        assert sum("extracted" in line for line in loud.stderr.splitlines()) == LINUX_ARCHIVES
