"""`cudaredist mirror` (from NVIDIA's redist archives, and built from wheels with --source pypi),
installs behind --mirror / CUDAREDIST_MIRROR, a tool-made mirror served by a real nginx, and the
progress output such commands leave in CI logs."""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudaredist.publish.mirror import index_page, merge_manifest
from cudaredist.sources.nvidia.releases import labels_from_listing
from cudaredist.sources.pypi.repack import archive_member
from cudaredist.tree.paths import tree_path
from tests.realmirror import nginx_serve, tree_of  # noqa: F401  (fixture)
from tests.sources.pypi.test_pypi_source import (
    INDEX,
    LINUX,
    LINUX_TAG,
    FakeIndex,
    add_release_13_0,
    make_wheel,
    toolkit_metadata,
)

LINUX_ARCHIVES = 7  # the nvcc profile of the tiny 13.0.1 fixture: nvcc, cudart, cccl, crt, nvvm, prof., nvtx
WINDOWS_ARCHIVES = LINUX_ARCHIVES + 1  # and NVIDIA's MSBuild files (visual_studio_integration)


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
    assert len(got) == LINUX_ARCHIVES + WINDOWS_ARCHIVES
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


def test_percent_encoded_relative_paths_are_written_as_the_files_a_server_maps_them_to(
        mirror: Path, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A manifest's relative_path is a URL reference: ``%20`` and ``%2B`` name the file ``x y+z`` on the
    server. The mirror writes that file (not one named ``x%20y%2Bz``), so its own archives are served."""
    manifest = mirror / "redistrib_13.0.1.json"
    data = json.loads(manifest.read_text())
    entry = data["cuda_cudart"]["linux-x86_64"]
    old = mirror / entry["relative_path"]
    folder, name = entry["relative_path"].rsplit("/", 1)
    old.rename(old.with_name(f"cuda cudart+{name}"))
    entry["relative_path"] = f"{folder}/cuda%20cudart%2B{name}"
    manifest.write_text(json.dumps(data, indent=4))
    out = tmp_path / "out"
    made = make_mirror(serve(mirror), out, "13.0", "--platform", "linux-x86_64")
    assert made["archives"] and all(a["status"] != "failed" for a in made["archives"])
    assert (out / folder / f"cuda cudart+{name}").is_file()
    assert not list(out.rglob("*%*"))
    # the manifest is byte-identical, and the mirror, served, installs from itself
    assert (out / "redistrib_13.0.1.json").read_bytes() == manifest.read_bytes()
    r = cli("install", "13.0", "--prefix", str(tmp_path / "cuda"), "--platform", "linux-x86_64",
            "--base-url", serve(out), "--no-fallback", "--mirror", serve(out), "-q",
            "--cache-dir", str(tmp_path / "fresh cache"))
    assert r.exit_code == 0, r.output
    assert os.path.lexists(tmp_path / "cuda" / "lib" / "libcudart.so")


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
                    "--reinstall" if command == "install" else "--jobs=2", tmp_path=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == ""
    if command == "install":
        loud = run_cli(command, "13.0", *where, "--platform", "linux-x86_64", "--base-url", base,
                       "--reinstall", "--verbose", tmp_path=tmp_path)
        assert loud.returncode == 0 and "\r" not in loud.stderr
        assert sum("extracted" in line for line in loud.stderr.splitlines()) == LINUX_ARCHIVES


# -- a mirror built from wheels (--source pypi) ------------------------------------------------------
@pytest.fixture
def wheels(fake_index: FakeIndex) -> FakeIndex:
    """The fake package index of tests/conftest.py."""
    return fake_index


def wheel_mirror(out: Path, *args: str) -> dict:  # type: ignore[type-arg]
    r = cli("mirror", "13.0", "--source", "pypi", "--index-url", INDEX, "--out", str(out), "--json", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def files_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_wheel_mirror_is_shaped_like_nvidias(wheels: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(wheels)
    out = tmp_path / "out"
    report = wheel_mirror(out, "-p", "linux-x86_64,windows-x86_64")
    assert report["releases"] == ["13.0.2"]
    assert {a["status"] for a in report["archives"]} == {"downloaded"}
    assert any("libcuda.so" in n for n in report["notes"])  # what the wheels lack, as for install
    raw = (out / "redistrib_13.0.2.json").read_bytes()
    manifest = json.loads(raw)
    assert raw == json.dumps(manifest, indent=4).encode()  # NVIDIA's format: 4 spaces, no final newline
    assert list(manifest)[:3] == ["release_date", "release_label", "release_product"]
    assert (manifest["release_date"], manifest["release_label"], manifest["release_product"]) == \
        ("2025-12-19", "13.0.2", "cuda")
    comps = {k: v for k, v in manifest.items() if isinstance(v, dict)}
    assert list(comps) == ["cuda_cccl", "cuda_crt", "cuda_cudart", "cuda_nvcc", "cuda_nvtx",
                           "cuda_profiler_api",
                           "libnvvm"]
    for key, comp in comps.items():
        assert list(comp) == ["name", "license", "license_path", "version", "linux-x86_64", "windows-x86_64"]
        assert comp["license_path"] == f"{key}/LICENSE.txt"
        assert (out / key / "LICENSE.txt").read_bytes() == b"NVIDIA EULA\n"
        for platform, ext in (("linux-x86_64", "tar.xz"), ("windows-x86_64", "zip")):
            entry = comp[platform]
            rel = f"{key}/{platform}/{key}-{platform}-{comp['version']}-archive.{ext}"
            assert list(entry) == ["relative_path", "sha256", "md5", "size"] and entry["relative_path"] == rel
            data = (out / rel).read_bytes()
            assert entry["size"] == str(len(data))
            assert entry["sha256"] == hashlib.sha256(data).hexdigest()
            assert entry["md5"] == hashlib.md5(data).hexdigest()
    assert comps["cuda_cudart"]["version"] == "13.0.96"  # the wheel's own version
    page = (out / "index.html").read_text()
    assert "<a href='redistrib_13.0.2.json'>" in page and labels_from_listing(page) == ["13.0.2"]
    assert [p for p in out.rglob("*") if p.name.startswith(".")] == []
    # the Linux archive: one top folder, real symlinks for the .so chain, exec bits, no owners, one mtime
    import tarfile

    with tarfile.open(out / comps["cuda_cudart"]["linux-x86_64"]["relative_path"]) as tf:
        members = tf.getmembers()
    top = "cuda_cudart-linux-x86_64-13.0.96-archive"
    assert members[0].name == top and members[0].isdir()
    assert all(m.name == top or m.name.startswith(top + "/") for m in members)
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", 946684800)}
    links = {m.name[len(top) + 1:]: m.linkname for m in members if m.issym()}
    assert links == {"lib/libcudart.so": "libcudart.so.13", "lib/libcudart.so.13": "libcudart.so.13.0.96"}
    by_name = {m.name[len(top) + 1:]: m for m in members}
    assert by_name["lib/libcudart.so.13.0.96"].isfile() and by_name["LICENSE.txt"].isfile()
    with tarfile.open(out / comps["cuda_nvcc"]["linux-x86_64"]["relative_path"]) as tf:
        modes = {m.name.rsplit("/", 1)[-1]: m.mode for m in tf.getmembers() if m.isfile()}
    assert modes["nvcc"] == 0o755 and modes["nvcc.profile"] == 0o644
    # the Windows archive: a zip with the same top-folder shape, DLLs where the tree wants them
    import zipfile

    with zipfile.ZipFile(out / comps["cuda_cudart"]["windows-x86_64"]["relative_path"]) as zf:
        names = zf.namelist()
    top = "cuda_cudart-windows-x86_64-13.0.96-archive/"
    assert names[0] == top and all(n.startswith(top) for n in names)
    assert top + "bin/x64/cudart64_13.dll" in names and top + "lib/x64/cudart.lib" in names


@pytest.mark.parametrize("preset", ["6", "store"])
@pytest.mark.parametrize("platform", ["linux-x86_64", "windows-x86_64"])
def test_wheel_mirror_installs_the_tree_the_wheels_install(platform: str, preset: str, wheels: FakeIndex,
                                                           tmp_path: Path) -> None:
    add_release_13_0(wheels)
    out = tmp_path / "out"
    report = wheel_mirror(out, "-p", platform, "--xz-preset", preset)
    if preset == "store":  # nothing compressed: the archives hold their members' bytes as they are
        import zipfile

        for a in report["archives"]:
            path = out / a["relative_path"]
            if path.suffix == ".zip":
                with zipfile.ZipFile(path) as zf:
                    assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}
            else:
                body = lzma.decompress(path.read_bytes())
                assert len(body) < path.stat().st_size < len(body) + 128 + len(body) // 1000
    redist, from_wheels = tmp_path / "from the mirror", tmp_path / "from the wheels"
    r = cli("install", "13.0", "--base-url", str(out), "--prefix", str(redist), "-p", platform, "-q")
    assert r.exit_code == 0, r.output
    r = cli("install", "13.0", "--source", "pypi", "--index-url", INDEX, "--prefix", str(from_wheels),
            "-p", platform, "-q")
    assert r.exit_code == 0, r.output
    assert tree_of(redist) == tree_of(from_wheels)
    assert set(os.listdir(redist / "licenses")) == set(os.listdir(from_wheels / "licenses"))
    rec = json.loads((redist / ".cudaredist" / "record.json").read_text())
    assert rec["plan"]["source"] == "nvidia" and rec["plan"]["release"] == "13.0.2"
    assert cli("verify", "--prefix", str(redist)).exit_code == 0


def test_wheel_mirror_is_deterministic_and_incremental(wheels: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(wheels)
    both = tmp_path / "both"
    wheel_mirror(both, "-p", "linux-x86_64,windows-x86_64")
    # one platform per run, in the other order: the same bytes, manifest included
    split = tmp_path / "split"
    wheel_mirror(split, "-p", "windows-x86_64")
    report = wheel_mirror(split, "-p", "linux-x86_64")
    assert {a["status"] for a in report["archives"]} == {"cached"}  # the wheels came from the cache
    assert files_of(split) == files_of(both)
    # a re-run verifies and writes nothing
    stamps = {p: p.stat().st_mtime_ns for p in both.rglob("*") if p.is_file()}
    again = wheel_mirror(both, "-p", "linux-x86_64,windows-x86_64")
    assert {a["status"] for a in again["archives"]} == {"present"} and again["licenses"] == []
    assert {p: p.stat().st_mtime_ns for p in both.rglob("*") if p.is_file()} == stamps
    # a damaged archive and a lost licence are rebuilt, byte for byte
    before = files_of(both)
    nvcc = next(p for p in both.rglob("cuda_nvcc-linux-*"))
    nvcc.write_bytes(b"damaged")
    (both / "cuda_cudart" / "LICENSE.txt").unlink()
    fixed = wheel_mirror(both, "-p", "linux-x86_64,windows-x86_64")
    rebuilt = {a["relative_path"] for a in fixed["archives"] if a["status"] != "present"}
    assert rebuilt == {nvcc.relative_to(both).as_posix(),
                       "cuda_cudart/linux-x86_64/cuda_cudart-linux-x86_64-13.0.96-archive.tar.xz",
                       "cuda_cudart/windows-x86_64/cuda_cudart-windows-x86_64-13.0.96-archive.zip"}
    assert fixed["licenses"] == ["cuda_cudart/LICENSE.txt"]
    assert files_of(both) == before


def test_wheel_mirror_joins_an_existing_mirror(wheels: FakeIndex, mirror: Path, tmp_path: Path) -> None:
    """Other releases in the directory stay as they are; the index page lists them all."""
    add_release_13_0(wheels)
    out = tmp_path / "out"
    make_mirror(str(mirror), out, "12.9", "--platform", "linux-x86_64")
    served = (out / "redistrib_12.9.1.json").read_bytes()
    wheel_mirror(out, "-p", "linux-x86_64", "--xz-preset", "0")
    assert (out / "redistrib_12.9.1.json").read_bytes() == served
    assert labels_from_listing((out / "index.html").read_text()) == ["13.0.2", "12.9.1"]
    r = cli("trains", "--base-url", str(out), "--json")
    assert [t["release"] for t in json.loads(r.stdout)["trains"]] == ["12.9.1", "13.0.2"]


def test_wheel_mirror_names_cccl_per_release(wheels: FakeIndex, tmp_path: Path) -> None:
    """13.3 renamed cuda_cccl to cccl: the mirror's component key follows, so the nvcc profile finds it."""
    cu = "nvidia/cu13"
    meta = toolkit_metadata("13.3.0", {"cccl": ("nvidia-cuda-cccl", "==13.3.1.*", LINUX)})
    wheels.add("cuda_toolkit-13.3.0-py2.py3-none-any.whl",
               make_wheel("cuda_toolkit", "13.3.0", {}, metadata=meta))
    wheels.add_wheel("nvidia_cuda_cccl", "13.3.1", LINUX_TAG,
                     {f"{cu}/include/cccl/cuda/std/version": b"//", f"{cu}/cccl/LICENSE": b"Apache-2.0\n"})
    out = tmp_path / "out"
    r = cli("mirror", "13.3", "--source", "pypi", "--index-url", INDEX, "--out", str(out),
            "-p", "linux-x86_64", "--only", "--component", "cccl", "-q")
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "redistrib_13.3.0.json").read_text())
    assert "cccl" in manifest and "cuda_cccl" not in manifest
    assert manifest["cccl"]["linux-x86_64"]["relative_path"] == \
        "cccl/linux-x86_64/cccl-linux-x86_64-13.3.1-archive.tar.xz"
    prefix = tmp_path / "p"
    r = cli("install", "13.3", "--base-url", str(out), "--prefix", str(prefix), "-p", "linux-x86_64",
            "--only", "--component", "cccl|cuda_cccl", "-q")
    assert r.exit_code == 0, r.output
    assert (prefix / "include" / "cccl" / "cuda" / "std" / "version").is_file()
    # both licences of the 13.3 CCCL wheel: its own cccl/LICENSE and the dist-info one
    assert (prefix / "licenses" / "cccl" / "LICENSE").read_bytes() == b"Apache-2.0\n"
    assert (prefix / "licenses" / "cccl" / "LICENSE.txt").read_bytes() == b"NVIDIA EULA\n"


def test_hostile_wheel_leaves_no_archive(wheels: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(wheels, windows=False)
    evil = make_wheel("nvidia_cuda_crt", "13.0.88", {"nvidia/cu13/../../../etc/cron.d/x": b"evil"})
    name = f"nvidia_cuda_crt-13.0.88-{LINUX_TAG}.whl"
    wheels.projects["nvidia-cuda-crt"] = []
    wheels.add(name, evil)
    out = tmp_path / "out"
    r = cli("mirror", "13.0", "--source", "pypi", "--index-url", INDEX, "--out", str(out),
            "-p", "linux-x86_64")
    assert r.exit_code == 1
    assert "contains '..'" in r.stderr and name in r.stderr
    assert not list(out.rglob("cuda_crt-*")) and not list(out.rglob("*.part"))
    assert not (out / "redistrib_13.0.2.json").exists()


def test_xz_preset_is_for_wheel_mirrors_only(mirror: Path, tmp_path: Path) -> None:
    r = cli("mirror", "13.0", "--base-url", str(mirror), "--out", str(tmp_path / "o"), "--xz-preset", "1")
    assert r.exit_code == 2 and "--xz-preset needs --source pypi" in r.stderr
    r = cli("mirror", "13.0", "--source", "pypi", "--out", str(tmp_path / "o"), "--xz-preset", "10")
    assert r.exit_code == 2


@pytest.mark.parametrize(("existing", "rows", "expected"), [
    pytest.param(None, [("cuda_nvcc", "windows-x86_64", "13.0.88", {"relative_path": "w"},
                         {"name": "CUDA nvcc", "license": "L", "license_path": "cuda_nvcc/LICENSE.txt"}),
                        ("cuda_nvcc", "linux-x86_64", "13.0.88", {"relative_path": "l"}, {"name": "other"})],
                 {"release_date": "2025-12-19", "release_label": "13.0.2", "release_product": "cuda",
                  "cuda_nvcc": {"name": "CUDA nvcc", "license": "L", "license_path": "cuda_nvcc/LICENSE.txt",
                                "version": "13.0.88", "linux-x86_64": {"relative_path": "l"},
                                "windows-x86_64": {"relative_path": "w"}}},
                 id="new-nvidia-order"),
    pytest.param({"release_date": "2025-10-09", "release_label": "13.0.2", "release_product": "cuda",
                  "a": {"name": "A", "version": "1.2", "cuda_variant": ["x"],
                        "linux-sbsa": {"relative_path": "s"}}},
                 [("a", "linux-x86_64", "1.10", {"relative_path": "l"}, {"name": "B", "license": "L"})],
                 {"release_date": "2025-10-09", "release_label": "13.0.2", "release_product": "cuda",
                  "a": {"name": "A", "license": "L", "version": "1.10", "cuda_variant": ["x"],
                        "linux-x86_64": {"relative_path": "l"}, "linux-sbsa": {"relative_path": "s"}}},
                 id="existing-fields-kept-newer-version"),
])
def test_merge_manifest(existing: dict | None, rows: list, expected: dict) -> None:  # type: ignore[type-arg]
    got = merge_manifest(existing, label="13.0.2", release_date="2025-12-19", archives=rows)
    assert json.dumps(got) == json.dumps(expected)  # order included


def test_archive_member_inverts_tree_path() -> None:
    for path in ("licenses/cccl/LICENSE", "licenses/cccl/LICENSE.txt", "licenses/cccl/third/x", "bin/nvcc",
                 "LICENSE.txt.bak", "licenses/other/LICENSE.txt"):
        assert tree_path(archive_member(path, "cccl"), component="cccl") == path


def _wheel_file(tmp_path: Path, files: dict[str, bytes], *, links: tuple[str, ...] = ()) -> Path:
    import zipfile

    path = tmp_path / "nvidia_cuda_crt-13.0.88-py3-none-any.whl"
    path.write_bytes(make_wheel("nvidia_cuda_crt", "13.0.88", files))
    if links:
        with zipfile.ZipFile(path, "a") as zf:
            for name in links:
                zi = zipfile.ZipInfo(name)
                zi.create_system = 3
                zi.external_attr = 0o120777 << 16
                zf.writestr(zi, "target")
    return path


@pytest.mark.parametrize(("platform", "files", "links", "message"), [
    pytest.param("windows-x86_64", {"nvidia/cu13/bin/x86_64/a.dll": b"1", "nvidia/cu13/bin/x64/a.dll": b"2"},
                 (), "two entries become 'bin/x64/a.dll'", id="two-members-one-path"),
    pytest.param("linux-x86_64", {"nvidia/cu13/lib": b"1", "nvidia/cu13/lib/x.h": b"2"}, (),
                 "'lib' is both a file and a directory", id="file-and-directory"),
    pytest.param("linux-x86_64", {"nvidia/cu13/include/a.h": b"1"}, ("nvidia/cu13/include/b.h",),
                 "is a symlink", id="zip-symlink"),
    pytest.param("linux-x86_64", {"/etc/passwd": b"x"}, (), "is an absolute path", id="absolute"),
    pytest.param("windows-x86_64", {"nvidia\\cu13\\bin\\x64\\a.dll": b"1"}, (), "uses backslashes",
                 id="backslashes"),
])
def test_repack_refuses_what_the_installer_refuses(platform: str, files: dict[str, bytes],
                                                   links: tuple[str, ...], message: str,
                                                   tmp_path: Path) -> None:
    from cudaredist.errors import UnsafeArchiveError
    from cudaredist.sources.pypi.repack import repack

    wheel = _wheel_file(tmp_path, files, links=links)
    with pytest.raises(UnsafeArchiveError, match=re.escape(message)):
        repack(wheel, tmp_path / "out", component="cuda_crt", version="13.0.88", platform=platform)
    assert not (tmp_path / "out").exists()


def test_repack_streams_big_members(tmp_path: Path) -> None:
    """A member is copied in chunks: a 64 MB file never sits in memory whole."""
    import tracemalloc

    from cudaredist.sources.pypi.repack import repack

    wheel = _wheel_file(tmp_path, {"nvidia/cu13/lib/libbig.a": bytes(64 << 20)})
    for platform, name in (("linux-x86_64", "a.tar.xz"), ("windows-x86_64", "a.zip")):
        tracemalloc.start()
        try:
            packed = repack(wheel, tmp_path / name, component="cuda_crt", version="13.0.88",
                            platform=platform, preset=0)
            _size, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 16 << 20, (platform, peak)
        assert packed.size == (tmp_path / name).stat().st_size


def test_repack_refuses_a_corrupt_member(tmp_path: Path) -> None:
    from cudaredist.errors import UnsafeArchiveError
    from cudaredist.sources.pypi.repack import repack

    wheel = _wheel_file(tmp_path, {"nvidia/cu13/include/a.h": b"A" * 1000})
    data = bytearray(wheel.read_bytes())
    data[data.index(b"A" * 1000) + 500] ^= 0xFF  # the CRC in the directory no longer matches
    wheel.write_bytes(bytes(data))
    with pytest.raises(UnsafeArchiveError, match="is corrupt"):
        repack(wheel, tmp_path / "out", component="cuda_crt", version="13.0.88", platform="linux-x86_64")
