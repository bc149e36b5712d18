"""`install --with`: a product's archives in the toolkit's tree, record, verify, info, list, lock,
uninstall, the no-op check, merge conflicts; the product's folder beside cuda/redist on a loopback
server laid out like NVIDIA's site."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cudaredist.cli import app
from tests.archives import Link, Members, MirrorArchive, build_mirror, digest, make_tar_xz, make_zip, toolkit
from tests.hosts import symlinks_work


def product_mirror(root: Path, product: str, label: str, component: str, version: str,
                   builds: dict[str, dict[str, Members]], *, date: str = "2026-02-01") -> None:
    """``root/redistrib_<label>.json`` and archives as NVIDIA lays out a product: per platform, one
    archive per CUDA major under a ``cudaNN`` subkey."""
    root.mkdir(parents=True, exist_ok=True)
    variants = sorted({v.removeprefix("cuda") for b in builds.values() for v in b})
    comp: dict[str, object] = {"name": component, "license": "cuDNN", "version": version,
                               "cuda_variant": variants}
    for platform, variants in builds.items():
        entry: dict[str, object] = {}
        for variant, members in variants.items():
            ext = "zip" if platform.startswith("windows") else "tar.xz"
            top = f"{component}-{platform}-{version}_{variant}-archive"
            rel = f"{component}/{platform}/{top}.{ext}"
            full = {f"{top}/{k}": v for k, v in members.items()}
            (make_zip if ext == "zip" else make_tar_xz)(root / rel, full)
            sha, size = digest(root / rel)
            entry[variant] = {"relative_path": rel, "sha256": sha, "md5": "0" * 32, "size": str(size)}
        comp[platform] = entry
    body = {"release_date": date, "release_label": label, "release_product": product, component: comp}
    (root / f"redistrib_{label}.json").write_text(json.dumps(body, indent=4))
    names = sorted(p.name for p in root.glob("redistrib_*.json"))
    (root / "index.html").write_text("".join(f"<a href='{n}'>{n}</a>\n" for n in names))


LINUX_CUDNN: Members = {
    "include/cudnn.h": b"#define CUDNN_MAJOR 9\n",
    "lib/libcudnn.so.9.27.0": b"\x7fELF cudnn",
    "lib/libcudnn.so.9": Link("libcudnn.so.9.27.0"),
    "lib/libcudnn.so": Link("libcudnn.so.9"),
    "LICENSE": b"cudnn license",
}
def cublas(platform: str) -> MirrorArchive:
    """libcublas: what cuDNN's libraries load (profiles.toml `needs`)."""
    if platform.startswith("windows"):
        return MirrorArchive("libcublas", platform, "13.1.0.3", {"bin/x64/cublas64_13.dll": b"MZ cublas",
                                                                 "lib/x64/cublas.lib": b"lib"})
    return MirrorArchive("libcublas", platform, "13.1.0.3", {
        "lib/libcublas.so.13.1.0.3": b"\x7fELF cublas", "lib/libcublas.so.13": Link("libcublas.so.13.1.0.3")})


WINDOWS_CUDNN: Members = {
    "include/cudnn.h": b"#define CUDNN_MAJOR 9\n",
    "bin/x64/cudnn64_9.dll": b"MZ cudnn",
    "lib/x64/cudnn.lib": b"lib",
    "LICENSE": b"cudnn license",
}


@pytest.fixture
def site(tmp_path: Path, serve: object) -> str:
    """NVIDIA's layout on a loopback server: /compute/cuda/redist/ and /compute/cudnn/redist/ with
    cuDNN 9.27.0 (CUDA 12 and 13) and an older 9.13.0 (CUDA 12 only on Linux)."""
    compute = tmp_path / "site" / "compute"
    build_mirror(compute / "cuda" / "redist", "13.0.1", toolkit("linux-x86_64") + toolkit("windows-x86_64")
                + [cublas("linux-x86_64"), cublas("windows-x86_64")])
    cudnn = compute / "cudnn" / "redist"
    product_mirror(cudnn, "cudnn", "9.27.0", "cudnn", "9.27.0.42",
                   {"linux-x86_64": {"cuda12": LINUX_CUDNN, "cuda13": LINUX_CUDNN},
                    "windows-x86_64": {"cuda13": WINDOWS_CUDNN}})
    product_mirror(cudnn, "cudnn", "9.13.0", "cudnn", "9.13.0.50",
                   {"linux-x86_64": {"cuda12": LINUX_CUDNN}}, date="2025-09-04")
    assert callable(serve)
    return str(serve(tmp_path / "site")) + "compute/cuda/redist/"


@pytest.fixture(autouse=True)
def _linux_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """These cases read NVIDIA's linux-x86_64 layout where no --platform is given: the host counts as a
    linux-x86_64 one whatever runs them (the Windows CPython included)."""
    monkeypatch.setattr("cudaredist.profiles.host_platform", lambda asked=None: asked or "linux-x86_64")


def _run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def _ok(*args: str) -> Result:
    result = _run(*args)
    assert result.exit_code == 0, result.output
    return result


def test_install_with_cudnn_into_the_toolkits_tree(site: str, tmp_path: Path) -> None:
    prefix = tmp_path / "cuda"
    common = ("--base-url", site, "--cache-dir", str(tmp_path / "cache"))
    out = _ok("install", "13.0", "--with", "cudnn", "--prefix", str(prefix), *common).stderr
    assert "CUDA 13.0.1 with cuDNN 9.27.0" in out
    assert "note: libcublas comes with cuDNN: its libraries load it" in out
    # headers in include/ beside cudart's, libraries in lib/ (the .so chain kept), lib64 -> lib
    assert (prefix / "include" / "cudnn.h").read_bytes() == b"#define CUDNN_MAJOR 9\n"
    assert (prefix / "include" / "cuda_runtime.h").is_file()
    if symlinks_work():  # Wine makes no symlinks (the chain is then copied: tests/test_windows_host.py)
        assert (prefix / "lib" / "libcudnn.so").resolve().name == "libcudnn.so.9.27.0"
    assert (prefix / "lib64" / "libcudnn.so.9").exists()
    assert (prefix / "licenses" / "cudnn" / "LICENSE").read_bytes() == b"cudnn license"
    assert (prefix / "lib64" / "libcublas.so.13").exists()  # what cuDNN loads came with it
    version = json.loads((prefix / "version.json").read_text())
    assert version["cudnn"] == {"name": "NVIDIA CUDA Deep Neural Network library", "version": "9.27.0.42"}
    record = json.loads((prefix / ".cudaredist" / "record.json").read_text())
    assert [p["name"] + " " + p["release"] for p in record["plan"]["products"]] == ["cudnn 9.27.0"]
    assert {f["path"] for f in record["files"] if f["component"] == "cudnn"} >= {"include/cudnn.h",
                                                                                "lib/libcudnn.so.9.27.0"}
    assert record["provenance"]["archives"]["cudnn"].endswith("_cuda13-archive.tar.xz")
    info = json.loads(_ok("info", "--prefix", str(prefix), "--json").stdout)
    assert info["plan"]["products"][0]["cuda_variant"] == "cuda13"
    shown = _ok("info", "--prefix", str(prefix)).stdout
    assert "with:      cudnn 9.27.0 (cuda13 build, --with cudnn)" in shown
    assert json.loads(_ok("verify", "--prefix", str(prefix), "--json").stdout)["ok"] is True

    # satisfied: a no-op without network; the same prefix without --with is not satisfied
    again = _ok("install", "13.0", "--with", "cudnn", "--prefix", str(prefix), "--base-url",
                "http://127.0.0.1:9/", "--cache-dir", str(tmp_path / "cache"))
    assert "already installed" in again.stderr
    _ok("install", "13.0", "--prefix", str(prefix), *common)
    assert not (prefix / "include" / "cudnn.h").exists()
    assert (prefix / "include" / "cuda_runtime.h").is_file()
    _ok("install", "13.0", "--with", "cudnn=9.27.0", "--prefix", str(prefix), *common)
    _ok("uninstall", "--prefix", str(prefix))
    assert not prefix.exists()


def test_windows_tree_and_train_choice(site: str, tmp_path: Path) -> None:
    prefix = tmp_path / "win"
    common = ("--base-url", site, "--cache-dir", str(tmp_path / "cache"))
    _ok("install", "13.0", "--with", "cudnn", "--platform", "windows-x86_64", "--prefix", str(prefix),
        *common)
    assert (prefix / "bin" / "x64" / "cudnn64_9.dll").is_file()
    assert (prefix / "bin" / "x64" / "cudart64_13.dll").is_file()
    assert (prefix / "lib" / "x64" / "cudnn.lib").is_file()
    assert (prefix / "lib" / "x64" / "cudart.lib").is_file()
    # 9.13.0 has no CUDA 13 build: asking for it fails before any download, listing what exists
    result = _run("install", "13.0", "--with", "cudnn=9.13", "--prefix", str(tmp_path / "no"), *common)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "cuDNN 9.13 has no release with archives for CUDA 13 on linux-x86_64" in result.stderr
    assert "releases for linux-x86_64: 9.13.0 (CUDA 12)" in result.stderr
    assert not (tmp_path / "no").exists()


def test_managed_list_shows_what_was_added(site: str, tmp_path: Path) -> None:
    common = ("--base-url", site, "--cache-dir", str(tmp_path / "cache"),
              "--install-dir", str(tmp_path / "tk"))
    _ok("install", "13.0", "--with", "cudnn", *common)
    rows = json.loads(_ok("list", "--install-dir", str(tmp_path / "tk"), "--json").stdout)["toolkits"]
    assert rows[0]["products"] == [{"name": "cudnn", "release": "9.27.0"}]
    assert _ok("list", "--install-dir", str(tmp_path / "tk")).stdout.rstrip().endswith("+cudnn-9.27.0")


def test_lock_carries_products_and_installs_from_it(site: str, tmp_path: Path) -> None:
    lock = tmp_path / "cuda.lock"
    common = ("--base-url", site, "--cache-dir", str(tmp_path / "cache"))
    _ok("lock", "13.0", "--with", "cudnn", "--platform", "linux-x86_64", "--platform", "windows-x86_64",
        "-o", str(lock), *common)
    body = json.loads(lock.read_text())
    assert body["request"]["with"] == ["cudnn"]
    assert all(p["products"][0]["release"] == "9.27.0" for p in body["plans"].values())
    bare = json.loads(_ok("lock", "13.0", "--platform", "linux-x86_64", *common).stdout)
    assert bare["content_key"] != body["content_key"] and "with" not in bare["request"]
    prefix = tmp_path / "locked"
    _ok("install", "--lock", str(lock), "--platform", "linux-x86_64", "--prefix", str(prefix),
        "--cache-dir", str(tmp_path / "cache2"))
    assert (prefix / "include" / "cudnn.h").is_file()
    drift = _run("install", "--lock", str(lock), "--with", "cudnn=9.13", "--prefix", str(tmp_path / "d"),
                 "--cache-dir", str(tmp_path / "cache2"))
    assert drift.exit_code == 1 and "was locked with --with ['cudnn']" in drift.stderr


def test_two_archives_writing_one_path_differently_is_an_error(tmp_path: Path) -> None:
    compute = tmp_path / "site" / "compute"
    build_mirror(compute / "cuda" / "redist", "13.0.1", toolkit("linux-x86_64") + [cublas("linux-x86_64")])
    bad = {**LINUX_CUDNN, "include/cuda_runtime.h": b"// not cudart's"}
    product_mirror(compute / "cudnn" / "redist", "cudnn", "9.27.0", "cudnn", "9.27.0.42",
                   {"linux-x86_64": {"cuda13": bad}})
    base = str(compute / "cuda" / "redist")  # a directory: no server thread to write to stderr
    result = _run("install", "13.0", "--with", "cudnn", "--prefix", str(tmp_path / "p"), "--base-url", base,
                  "--cache-dir", str(tmp_path / "cache"))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "error: " in result.stderr
    assert "both install 'include/cuda_runtime.h' with different" in result.stderr
    assert not (tmp_path / "p").exists()


def test_a_mirror_directory_holds_products_inside(tmp_path: Path) -> None:
    """A base that is not NVIDIA's .../cuda/redist/ (a mirror directory) holds <product>/redist/ inside."""
    root = tmp_path / "m"
    build_mirror(root, "13.0.1", toolkit("linux-x86_64") + [cublas("linux-x86_64")])
    product_mirror(root / "cudnn" / "redist", "cudnn", "9.27.0", "cudnn", "9.27.0.42",
                   {"linux-x86_64": {"cuda13": LINUX_CUDNN}})
    plan = json.loads(_ok("resolve", "13.0", "--with", "cudnn", "--base-url", str(root), "--json",
                          "--cache-dir", str(tmp_path / "cache")).stdout)
    assert plan["products"][0]["base_url"] == (root / "cudnn" / "redist").as_uri() + "/"


def test_mirror_with_a_product_installs_offline(site: str, tmp_path: Path) -> None:
    """`mirror --with cudnn` of NVIDIA's layout: the product's manifest and archives as served, in the
    mirror's own <product>/redist/; installing from the mirror directory needs nothing else, and a
    second mirror run fetches nothing."""
    out = tmp_path / "mirror"
    cache = ("--cache-dir", str(tmp_path / "cache"))
    r = _ok("mirror", "13.0", "--with", "cudnn", "--platform", "linux-x86_64", "--platform", "windows-x86_64",
            "--out", str(out), "--base-url", site, *cache, "--json")
    report = json.loads(r.stdout)
    assert report["products"] == [{"name": "cudnn", "title": "cuDNN", "releases": ["9.27.0"],
                                   "out": str(out / "cudnn" / "redist")}]
    manifest = out / "cudnn" / "redist" / "redistrib_9.27.0.json"
    assert json.loads(manifest.read_text())["cudnn"]["linux-x86_64"]["cuda13"]["relative_path"].endswith(
        "cudnn-linux-x86_64-9.27.0.42_cuda13-archive.tar.xz")
    assert "redistrib_9.27.0.json" in (out / "cudnn" / "redist" / "index.html").read_text()
    assert "<a href='cudnn/'>" in (out / "index.html").read_text()  # listed on the first run
    assert not list(out.rglob("*.cudaredist-mirror.lock"))  # the mirror holds only what it serves
    rows = [a for a in report["archives"] if a.get("product") == "cudnn"]
    assert sorted(a["relative_path"].split("/")[1] for a in rows) == ["linux-x86_64", "windows-x86_64"]
    again = json.loads(_ok("mirror", "13.0", "--with", "cudnn", "--platform", "linux-x86_64", "--platform",
                           "windows-x86_64", "--out", str(out), "--base-url", site, *cache, "--json").stdout)
    assert {a["status"] for a in again["archives"]} == {"present"}
    # from the mirror alone, with an empty cache: nothing but the directory
    prefix = tmp_path / "cuda"
    _ok("install", "13.0", "--with", "cudnn", "--prefix", str(prefix), "--base-url", str(out),
        "--cache-dir", str(tmp_path / "fresh"))
    assert (prefix / "include" / "cudnn.h").is_file()
    record = json.loads((prefix / ".cudaredist" / "record.json").read_text())
    assert record["plan"]["products"][0]["base_url"] == (out / "cudnn" / "redist").as_uri() + "/"


def test_mirror_into_nvidias_layout_writes_the_product_beside(site: str, tmp_path: Path) -> None:
    out = tmp_path / "srv" / "compute" / "cuda" / "redist"
    _ok("mirror", "13.0", "--with", "cudnn", "--platform", "linux-x86_64", "--out", str(out), "--base-url",
        site, "--cache-dir", str(tmp_path / "cache"))
    assert (tmp_path / "srv" / "compute" / "cudnn" / "redist" / "redistrib_9.27.0.json").is_file()
    assert not (out / "cudnn").exists()
    plan = json.loads(_ok("resolve", "13.0", "--with", "cudnn", "--base-url", str(out), "--json",
                          "--cache-dir", str(tmp_path / "cache")).stdout)
    assert plan["products"][0]["base_url"].endswith("/srv/compute/cudnn/redist/")


def test_offline_resolves_products_from_the_cache(site: str, tmp_path: Path) -> None:
    """What an online run read of the product's folder (listing, manifests) answers --offline."""
    cache = ("--cache-dir", str(tmp_path / "cache"))
    online = json.loads(_ok("resolve", "13.0", "--with", "cudnn", "--base-url", site, *cache,
                            "--json").stdout)
    offline = json.loads(_ok("resolve", "13.0", "--with", "cudnn", "--base-url", site, *cache, "--json",
                             "--offline").stdout)
    assert offline["products"] == online["products"] and offline["components"] == online["components"]
    result = _run("resolve", "13.0", "--with", "cudnn", "--base-url", site, "--offline",
                  "--cache-dir", str(tmp_path / "empty"))
    assert result.exit_code == 1 and "--offline" in result.stderr and "Traceback" not in result.output


def test_a_locked_product_comes_from_the_mirror_first(site: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """install --lock --mirror: the product's archives from the mirror's product folder; a lock made with
    CUDAREDIST_CUDNN_BASE_URL keeps fetching the product from that folder without the variable."""
    cache = ("--cache-dir", str(tmp_path / "cache"))
    mirror = tmp_path / "m"
    _ok("mirror", "13.0", "--with", "cudnn", "--platform", "linux-x86_64", "--out", str(mirror),
        "--base-url", site, *cache)
    lock = tmp_path / "cuda.lock"
    _ok("lock", "13.0", "--with", "cudnn", "--platform", "linux-x86_64", "-o", str(lock), "--base-url", site,
        *cache)
    prefix = tmp_path / "p"
    _ok("install", "--lock", str(lock), "--mirror", str(mirror), "--prefix", str(prefix),
        "--cache-dir", str(tmp_path / "c2"))
    served = json.loads((prefix / ".cudaredist" / "record.json").read_text())["provenance"]["archives"]
    assert served["cudnn"].startswith((mirror / "cudnn" / "redist").as_uri())
    assert served["cuda_cudart"].startswith(mirror.as_uri())

    # the product somewhere else entirely, named by the variable at lock time
    elsewhere = site.replace("compute/cuda/redist/", "compute/cudnn/redist/")
    monkeypatch.setenv("CUDAREDIST_CUDNN_BASE_URL", elsewhere)
    odd = tmp_path / "odd"
    build_mirror(odd, "13.0.1", toolkit("linux-x86_64") + [cublas("linux-x86_64")])  # no cudnn/ in it
    _ok("lock", "13.0", "--with", "cudnn", "--platform", "linux-x86_64", "-o", str(lock), "--base-url",
        str(odd), *cache)
    monkeypatch.delenv("CUDAREDIST_CUDNN_BASE_URL")
    again = tmp_path / "again"
    _ok("install", "--lock", str(lock), "--prefix", str(again), "--cache-dir", str(tmp_path / "c3"))
    served = json.loads((again / ".cudaredist" / "record.json").read_text())["provenance"]["archives"]
    assert served["cudnn"].startswith(elsewhere)


def test_a_toolkit_without_what_the_product_needs(tmp_path: Path) -> None:
    root = tmp_path / "m"
    build_mirror(root, "13.0.1", toolkit("linux-x86_64"))  # no libcublas
    product_mirror(root / "cudnn" / "redist", "cudnn", "9.27.0", "cudnn", "9.27.0.42",
                   {"linux-x86_64": {"cuda13": LINUX_CUDNN}})
    result = _run("install", "13.0", "--with", "cudnn", "--prefix", str(tmp_path / "p"), "--base-url",
                  str(root), "--cache-dir", str(tmp_path / "cache"))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr == ("error: CUDA 13.0.1 has no component libcublas (needed for platform "
                             "linux-x86_64); cuDNN cannot work without it (its libraries load it)\n")
    assert not (tmp_path / "p").exists()
