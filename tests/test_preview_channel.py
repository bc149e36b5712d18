"""NVIDIA's manifests as served in 2026: the preview channel, laid out like bin-archive (the manifest
under ``bin-archive/release/cuda/redist/``, its archives in ``bin-archive/pool/<platform>/<id>/``
through ``../../../pool/...``), installed, locked, mirrored and installed from that mirror; and
hostile relative paths refused with nothing written."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudaredist.sources.nvidia import index
from tests.archives import build_mirror, toolkit

REDIST = "bin-archive/release/cuda/redist/"
LABEL = "13.4.0"
PLATFORMS = [pytest.param("linux-x86_64", id="linux"), pytest.param("windows-x86_64", id="windows")]


def cli(*args: str):  # type: ignore[no-untyped-def]
    from cudaredist.cli import app

    return CliRunner().invoke(app, list(args))


def bin_archive(site: Path, platform: str) -> Path:
    """``site`` laid out like NVIDIA's bin-archive for CUDA 13.4.0 on ``platform``: the manifest's
    path of each archive climbs three folders to the shared pool."""
    redist = site / REDIST
    manifest_path = build_mirror(redist, LABEL, toolkit(platform, LABEL))
    manifest = json.loads(manifest_path.read_text())
    for key, comp in manifest.items():
        if isinstance(comp, dict) and platform in comp:
            entry = comp[platform]
            name = entry["relative_path"].rsplit("/", 1)[-1]
            pool = Path("pool", platform, entry["sha256"][:12], name)
            (site / "bin-archive" / pool).parent.mkdir(parents=True, exist_ok=True)
            (redist / entry["relative_path"]).rename(site / "bin-archive" / pool)
            shutil.rmtree(redist / key)
            entry["relative_path"] = "../../../" + pool.as_posix()
    manifest_path.write_text(json.dumps(manifest, indent=4))
    return manifest_path


@pytest.fixture
def preview(tmp_path: Path, serve: Callable[[Path], str], monkeypatch: pytest.MonkeyPatch
            ) -> Callable[[str], tuple[Path, str]]:
    """preview(platform) -> (the site, its manifest folder's URL), served on loopback as the preview
    channel; the release channel holds 13.0.1 only."""
    release = tmp_path / "release"
    build_mirror(release, "13.0.1", toolkit("linux-x86_64"))
    monkeypatch.setitem(index.CHANNELS, "release", serve(release))

    def make(platform: str) -> tuple[Path, str]:
        site = tmp_path / "site"
        bin_archive(site, platform)
        url = serve(site) + REDIST
        monkeypatch.setitem(index.CHANNELS, "preview", url)
        return site, url

    return make


def outside(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


@pytest.mark.parametrize("platform", PLATFORMS)
def test_preview_release_installs_locks_and_mirrors(preview, platform: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site, url = preview(platform)
    prefix = tmp_path / "cuda"
    r = cli("install", "13.4", "--channel", "preview", "-p", platform, "--prefix", str(prefix))
    assert r.exit_code == 0, r.output
    header = "cuda_runtime.h"
    assert (prefix / "include" / header).is_file()
    record = json.loads((prefix / ".cudaredist" / "record.json").read_text())
    assert record["plan"]["channel"] == "preview" and record["plan"]["release"] == LABEL
    assert all(c["url"].startswith(url.removesuffix(REDIST) + "bin-archive/pool/" + platform)
               for c in record["plan"]["components"])
    info = cli("info", "--prefix", str(prefix))
    assert info.exit_code == 0 and f"nvidia {url}, preview channel" in info.stdout

    # the lock pins the paths as served, and the channel
    lock = tmp_path / "cuda.lock"
    r = cli("lock", "13.4", "--channel", "preview", "-p", platform, "-o", str(lock))
    assert r.exit_code == 0, r.output
    plan = json.loads(lock.read_text())["plans"][platform]
    assert plan["channel"] == "preview" and plan["base_url"] == url
    assert all(c["relative_path"].startswith(f"../../../pool/{platform}/") for c in plan["components"])

    # the mirror keeps the manifest byte-identical, three folders deep, and the pool inside itself
    out = tmp_path / "m"
    r = cli("mirror", "13.4", "--channel", "preview", "-p", platform, "--out", str(out), "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    base = out / "release" / "cuda" / "redist"
    assert report["base"] == str(base)
    assert (base / f"redistrib_{LABEL}.json").read_bytes() == (site / REDIST / f"redistrib_{LABEL}.json"
                                                               ).read_bytes()
    assert "redistrib_13.4.0.json" in (base / "index.html").read_text()
    pooled = {p.relative_to(out).as_posix() for p in out.rglob("*-archive.*")}
    assert pooled == {c["relative_path"].removeprefix("../../../") for c in plan["components"]}
    assert outside(tmp_path / "m") and not list(tmp_path.glob("pool*"))  # nothing beside the mirror

    # the site goes away: a fresh cache installs from the mirror alone, by train and by the lock
    shutil.rmtree(site)
    for how, args in (("train", ["13.4", "--channel", "preview"]), ("lock", ["--lock", str(lock)])):
        again = tmp_path / f"from-mirror-{how}"
        r = cli("install", *args, "-p", platform, "--prefix", str(again), "--mirror", str(base),
                "--no-fallback", "--cache-dir", str(tmp_path / f"cache-{how}"))
        assert r.exit_code == 0, r.output
        assert outside(again / "include") == outside(prefix / "include")
        assert json.loads((again / ".cudaredist" / "record.json").read_text())["plan"]["channel"] == "preview"


@pytest.mark.parametrize("served", [False, True], ids=["directory", "http"])
def test_the_top_of_a_preview_mirror_is_accepted_as_the_base(  # type: ignore[no-untyped-def]
        preview, serve: Callable[[Path], str], tmp_path: Path, served: bool) -> None:
    """`mirror --out DIR` keeps a preview release's manifests in DIR/release/cuda/redist/ (as deep as
    their archive paths climb): an install given DIR, the folder the user made, reads them there and
    fetches the archives from the mirror's pool; the record names the folder that served them."""
    preview("linux-x86_64")
    out = tmp_path / "m"
    r = cli("mirror", "13.4", "--channel", "preview", "-p", "linux-x86_64", "--out", str(out))
    assert r.exit_code == 0, r.output
    top = serve(out) if served else str(out)
    shown = top if served else out.as_uri() + "/"
    prefix = tmp_path / "cuda"
    for option in ("--base-url", "--mirror"):
        r = cli("install", "13.4", "-p", "linux-x86_64", "--prefix", str(prefix), option, top, "--reinstall",
                *(["--no-fallback"] if option == "--mirror" else []), "--cache-dir", str(tmp_path / option))
        assert r.exit_code == 0, r.output
        plan = json.loads((prefix / ".cudaredist" / "record.json").read_text())["plan"]
        assert plan["release"] == LABEL and plan["base_url"].startswith(f"{shown}release/cuda/redist/"), plan
        assert all(c["url"].startswith(f"{shown}pool/") for c in plan["components"]), plan["components"]


def test_preview_release_is_never_picked_unless_asked(preview, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    preview("linux-x86_64")
    plain = cli("resolve", "13", "-p", "linux-x86_64", "--json")
    assert plain.exit_code == 0, plain.output
    assert json.loads(plain.stdout)["release"] == "13.0.1"
    asked = cli("resolve", "13", "-p", "linux-x86_64", "--json", "--channel", "preview")
    assert asked.exit_code == 0, asked.output
    assert json.loads(asked.stdout)["release"] == LABEL
    missing = cli("install", "13.4", "-p", "linux-x86_64", "--prefix", str(tmp_path / "p"))
    assert missing.exit_code == 1 and "published trains: 13.0" in missing.stderr
    trains = cli("trains", "--channel", "preview", "--json")
    assert [t["release"] for t in json.loads(trains.stdout)["trains"]] == [LABEL]


@pytest.mark.parametrize(("args", "words"), [
    pytest.param(["--channel", "nightly"], "unknown channel 'nightly': use release or preview", id="unknown"),
    pytest.param(["--channel", "preview", "--base-url", "http://127.0.0.1:9/"], "both say which index",
                 id="with-base-url"),
    pytest.param(["--channel", "preview", "--source", "pypi"], "needs --source nvidia", id="pypi"),
])
def test_channel_usage_errors(args: list[str], words: str, tmp_path: Path) -> None:
    r = cli("resolve", "13.4", "-p", "linux-x86_64", *args)
    assert r.exit_code == 2 and words in r.stderr and "Traceback" not in r.output
    assert not (tmp_path / "cache").exists()


HOSTILE = [
    pytest.param("http://evil.example/pool/x.tar.xz", "names a scheme", id="other-host"),
    pytest.param("//evil.example/pool/x.tar.xz", "another server", id="scheme-relative-host"),
    pytest.param("../../../../../../../../etc/x.tar.xz", "past its site root", id="dotdot-past-site-root"),
    pytest.param("..\\..\\..\\pool\\x.tar.xz", "has a backslash", id="backslashes"),
    pytest.param("../../../%2e%2e/%2e%2e/x.tar.xz", "percent-encodes a dot segment", id="percent-dotdot"),
    pytest.param("../../../pool/x.tar.xz?../../y", "query or fragment", id="query"),
]


@pytest.mark.parametrize(("rel", "words"), HOSTILE)
@pytest.mark.parametrize("command", ["install", "lock", "mirror"])
def test_hostile_relative_path_is_refused_with_nothing_written(preview, rel: str, words: str,  # type: ignore[no-untyped-def]
                                                               command: str, tmp_path: Path) -> None:
    site, _url = preview("linux-x86_64")
    manifest_path = site / REDIST / f"redistrib_{LABEL}.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["cuda_cudart"]["linux-x86_64"]["relative_path"] = rel
    manifest_path.write_text(json.dumps(manifest, indent=4))
    target = tmp_path / "target"
    where = {"install": ["--prefix", str(target)], "lock": ["-o", str(target)],
             "mirror": ["--out", str(target)]}
    r = cli(command, "13.4", "--channel", "preview", "-p", "linux-x86_64", *where[command])
    assert r.exit_code == 1, r.output
    assert words in r.stderr and "cuda_cudart" in r.stderr and "Traceback" not in r.output
    assert not target.exists()
    cache = tmp_path / "cache"  # no archive, no unpacked entry, and not the refused manifest either
    assert [p for d in ("archives", "unpacked", "tmp") for p in (cache / d).rglob("*") if p.is_file()] == []
    assert list(cache.rglob("redistrib_*")) == []
