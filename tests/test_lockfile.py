"""Lock files (`cudaredist lock`, `install --lock`) of both sources, `trains`, and the JSON outputs that
docs/recipes.md documents."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cudaredist.errors import LockFileError
from cudaredist.publish.lockfile import _digest, read_lock, select
from cudaredist.sources.nvidia.manifest import make_plan, parse_manifest
from tests.hosts import WINDOWS, assert_link
from tests.realmirror import tree_of
from tests.sources.pypi.test_pypi_source import FILES, INDEX, FakeIndex, add_release_13_0

DOCS = Path(__file__).resolve().parents[1] / "docs" / "recipes.md"
BOTH = "linux-x86_64,windows-x86_64"


def cli(*args: str):  # type: ignore[no-untyped-def]
    from cudaredist.cli import app

    return CliRunner().invoke(app, list(args))


def lock(base: str, out: Path, *args: str) -> dict[str, Any]:
    r = cli("lock", "13.0", "--base-url", base, "-o", str(out), *args)
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())


def rewrite(path: Path, edit: Any, *, fix_digest: bool) -> None:
    obj = json.loads(path.read_text())
    edit(obj)
    if fix_digest:
        obj["digest"] = _digest({k: v for k, v in obj.items() if k != "digest"})
    path.write_text(json.dumps(obj, indent=2))


# -- writing ---------------------------------------------------------------------------------------
def test_lock_records_release_base_platforms_and_archives(mirror: Path, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    base = serve(mirror)
    got = lock(base, tmp_path / "cuda.lock", "--platform", BOTH)
    assert list(got) == ["lock_version", "release", "release_date", "base_url", "source", "request",
                         "platforms", "content_key", "plans", "digest"]
    assert got["release"] == "13.0.1" and got["base_url"] == base
    assert got["request"] == {"train": "13.0", "profile": "nvcc", "components": []}
    assert got["platforms"] == ["linux-x86_64", "windows-x86_64"]
    manifest = json.loads((mirror / "redistrib_13.0.1.json").read_text())
    for platform, plan in got["plans"].items():
        assert plan["platform"] == platform and plan["release"] == "13.0.1"
        msbuild = ["visual_studio_integration"] if platform.startswith("windows") else []
        assert [c["name"] for c in plan["components"]] == ["cuda_nvcc", "cuda_cudart", "cuda_cccl",
                                                           "cuda_crt", "libnvvm", "cuda_profiler_api",
                                                           "cuda_nvtx", *msbuild]
        for c in plan["components"]:
            entry = manifest[c["name"]][platform]
            assert c["sha256"] == entry["sha256"] and c["size"] == int(entry["size"])
            assert c["url"] == base + entry["relative_path"]
    # byte-stable: the same resolution writes the same file, and --hash is its content key
    text = (tmp_path / "cuda.lock").read_text()
    lock(base, tmp_path / "again.lock", "--platform", BOTH)
    assert (tmp_path / "again.lock").read_text() == text
    r = cli("lock", "13.0", "--base-url", base, "--platform", BOTH, "--hash")
    assert r.exit_code == 0 and r.stdout.strip() == got["content_key"]
    assert re.fullmatch(r"[0-9a-f]{64}\n", r.stdout)
    # without -o the lock goes to stdout
    r = cli("lock", "13.0", "--base-url", base, "--platform", BOTH)
    assert r.exit_code == 0 and r.stdout == text


def test_hash_keys_content_not_location(mirror: Path, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    def key(*args: str) -> str:
        r = cli("lock", *args, "--hash")
        assert r.exit_code == 0, r.output
        return str(r.stdout.strip())

    here = key("13.0", "--base-url", serve(mirror), "-p", "linux-x86_64")
    assert key("13.0.1", "--base-url", str(mirror), "-p", "linux-x86_64") == here  # other URL, same bytes
    assert key("13", "--base-url", str(mirror), "-p", "linux-x86_64") == here
    assert key("13.0", "--base-url", str(mirror), "-p", BOTH) != here
    assert key("13.0", "--base-url", str(mirror), "-p", "linux-x86_64", "--profile", "runtime") != here
    assert key("12.9", "--base-url", str(mirror), "-p", "linux-x86_64") != here


def test_lock_names_the_base_that_served_it(mirror: Path, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    front = tmp_path / "front"
    assert cli("mirror", "13.0", "-p", "linux-x86_64", "--base-url", str(mirror), "--out", str(front),
               "-q").exit_code == 0
    base = serve(mirror)
    front_url = serve(front)
    got = lock(base, tmp_path / "cuda.lock", "-p", "linux-x86_64", "--mirror", front_url)
    # the mirror served the manifest: the lock names it, never a base that did not serve the plan
    assert got["base_url"] == front_url
    assert all(c["url"].startswith(front_url) for c in got["plans"]["linux-x86_64"]["components"])
    # with --no-fallback the mirror is all there is, so it is the base
    mirrored = serve(front)
    got = lock(base, tmp_path / "only.lock", "-p", "linux-x86_64", "--mirror", mirrored, "--no-fallback")
    assert got["base_url"] == mirrored


# -- installing from a lock --------------------------------------------------------------------------
def test_lock_made_through_a_mirror_installs_through_it(mirror: Path, tmp_path: Path) -> None:
    """The lock names the mirror that served it: a plain `install --lock` and one with the same
    --mirror fetch every archive there; `--base-url B` (no mirror) refetches from B."""
    from tests.faultserver import FaultServer

    front = tmp_path / "front"
    assert cli("mirror", "13.0", "-p", "linux-x86_64", "--base-url", str(mirror), "--out", str(front),
               "-q").exit_code == 0
    with FaultServer(mirror) as base, FaultServer(front) as m:
        got = lock(base.base, tmp_path / "cuda.lock", "-p", "linux-x86_64", "--mirror", m.base)
        assert got["base_url"] == m.base
        archives = [c["url"][len(m.base) - 1:] for c in got["plans"]["linux-x86_64"]["components"]]

        def install(name: str, *opts: str) -> None:
            for srv in (base, m):
                with srv.lock:
                    srv.requests.clear()
            r = cli("install", "--lock", str(tmp_path / "cuda.lock"), "--prefix", str(tmp_path / name),
                    "--platform", "linux-x86_64", "--cache-dir", str(tmp_path / f"cache-{name}"), "-q", *opts)
            assert r.exit_code == 0, r.output

        install("plain")
        assert sorted(r.path for r in m.requests) == sorted(archives) and base.requests == []
        install("mirrored", "--mirror", m.base)
        assert sorted(r.path for r in m.requests) == sorted(archives) and base.requests == []
        install("from-base", "--base-url", base.base)
        assert sorted(r.path for r in base.requests) == sorted(archives) and m.requests == []


def test_install_from_lock_needs_no_manifest(mirror: Path, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    base = serve(mirror)
    got = lock(base, tmp_path / "cuda.lock", "-p", BOTH)
    # the release's listing and manifest disappear: the lock alone says what to fetch
    (mirror / "index.html").unlink()
    (mirror / "redistrib_13.0.1.json").unlink()
    for platform in ("linux-x86_64", "windows-x86_64"):
        prefix = tmp_path / f"cuda {platform}"
        r = cli("install", "--lock", str(tmp_path / "cuda.lock"), "--prefix", str(prefix),
                "--platform", platform, "--json")
        assert r.exit_code == 0, r.output
        out = json.loads(r.stdout)
        assert out["release"] == "13.0.1" and out["platform"] == platform and out["noop"] is False
        rec = json.loads((prefix / ".cudaredist" / "record.json").read_text())
        assert rec["plan"]["components"] == got["plans"][platform]["components"]
    # the same lock again is a no-op; the default platform is the host's when the lock has it
    host = "windows-x86_64" if WINDOWS else "linux-x86_64"
    r = cli("install", "--lock", str(tmp_path / "cuda.lock"), "--prefix", str(tmp_path / f"cuda {host}"),
            "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["noop"] is True
    # and a tree from a lock satisfies a later plain install of its train (nothing to resolve)
    r = cli("install", "13.0", "--prefix", str(tmp_path / "cuda linux-x86_64"), "--platform", "linux-x86_64",
            "--base-url", base)
    assert r.exit_code == 0 and "nothing to do" in r.stderr


def test_install_from_lock_behind_a_mirror(mirror: Path, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lock(serve(mirror), tmp_path / "cuda.lock", "-p", "linux-x86_64")
    front = tmp_path / "front"
    assert cli("mirror", "13.0", "-p", "linux-x86_64", "--base-url", str(mirror), "--out", str(front),
               "-q", "--cache-dir", str(tmp_path / "mirror cache")).exit_code == 0
    for p in mirror.rglob("*-archive.*"):
        p.unlink()  # the lock's base now lacks everything: only the mirror can serve
    r = cli("install", "--lock", str(tmp_path / "cuda.lock"), "--prefix", str(tmp_path / "p"),
            "--mirror", serve(front), "--json")
    assert r.exit_code == 0, r.output
    assert all(c["url"].startswith("http://127.0.0.1") for c in json.loads(r.stdout)["plan"]["components"])


@pytest.mark.parametrize(("args", "message"), [
    pytest.param(["13.4"], "pins CUDA 13.0.1, but 13.4 was asked for", id="other-train"),
    pytest.param(["12"], "pins CUDA 13.0.1, but 12 was asked for", id="other-major"),
    pytest.param(["13.0.2"], "pins CUDA 13.0.1, but 13.0.2 was asked for", id="other-release"),
    pytest.param(["--platform", "linux-sbsa"], "has no plan for platform linux-sbsa", id="platform"),
    pytest.param(["--profile", "runtime"], "locked with profile 'nvcc', not 'runtime'", id="profile"),
    pytest.param(["--component", "cuda_nvrtc"], "locked with components [], not ['cuda_nvrtc']",
                 id="component"),
    pytest.param(["--only", "--component", "cuda_nvcc"], "locked with profile 'nvcc', not 'custom'",
                 id="only"),
    pytest.param(["--source", "pypi"], "locked from source 'nvidia', not 'pypi'", id="source"),
])
def test_install_refuses_drift_from_the_lock(args: list[str], message: str, mirror: Path,
                                             tmp_path: Path) -> None:
    lock(str(mirror), tmp_path / "cuda.lock", "-p", BOTH)
    prefix = tmp_path / "p"
    r = cli("install", *args, "--lock", str(tmp_path / "cuda.lock"), "--prefix", str(prefix))
    assert r.exit_code == 1, r.output
    assert message in r.stderr and "regenerate the lock" in r.stderr
    assert not prefix.exists()


def test_install_accepts_what_the_lock_pins(mirror: Path, tmp_path: Path) -> None:
    lock(str(mirror), tmp_path / "cuda.lock", "-p", "linux-x86_64")
    r = cli("install", "13", "--lock", str(tmp_path / "cuda.lock"), "--prefix", str(tmp_path / "p"),
            "--profile", "nvcc", "--platform", "linux-x86_64", "-q")
    assert r.exit_code == 0, r.output
    r = cli("install", "--prefix", str(tmp_path / "q"))
    assert r.exit_code == 2 and "give a TRAIN" in r.stderr


def _set_sha(obj: dict[str, Any]) -> None:
    obj["plans"]["linux-x86_64"]["components"][0]["sha256"] = "0" * 64


def _set_path(obj: dict[str, Any]) -> None:  # past the root of the mirror's filesystem
    obj["plans"]["linux-x86_64"]["components"][0]["relative_path"] = "../" * 64 + "etc/passwd"


def _set_host(obj: dict[str, Any]) -> None:
    obj["plans"]["linux-x86_64"]["components"][0]["relative_path"] = "//evil.example/x.tar.xz"


def _set_release(obj: dict[str, Any]) -> None:
    obj["release"] = "13.4.2"


@pytest.mark.parametrize(("edit", "fix_digest", "message"), [
    pytest.param(_set_sha, False, "was edited after `cudaredist lock` wrote it", id="sha256"),
    pytest.param(_set_release, False, "was edited", id="release"),
    pytest.param(_set_sha, True, "content_key does not match", id="sha256-and-digest"),
    pytest.param(_set_path, True, "past its site root", id="path-traversal"),
    pytest.param(_set_host, True, "another server", id="path-other-host"),
    pytest.param(_set_release, True, "is for linux-x86_64 CUDA 13.0.1, not linux-x86_64 CUDA 13.4.2",
                 id="release-and-digest"),
    pytest.param(lambda o: o.update(lock_version=2), False, "not a cudaredist lock of version 1",
                 id="version"),
    pytest.param(lambda o: o["plans"]["linux-x86_64"].pop("components"), True, "lacks a field",
                 id="missing-field"),
])
def test_tampered_lock_is_refused(edit: Any, fix_digest: bool, message: str, mirror: Path,
                                  tmp_path: Path) -> None:
    path = tmp_path / "cuda.lock"
    lock(str(mirror), path, "-p", "linux-x86_64")
    rewrite(path, edit, fix_digest=fix_digest)
    with pytest.raises(LockFileError) as info:
        read_lock(path)
    assert message in str(info.value)
    r = cli("install", "--lock", str(path), "--prefix", str(tmp_path / "p"))
    assert r.exit_code == 1 and message in r.stderr and not (tmp_path / "p").exists()


def test_unreadable_lock(tmp_path: Path) -> None:
    (tmp_path / "bad.lock").write_text("{not json")
    for name, message in (("bad.lock", "is not readable JSON"), ("absent.lock", "does not exist")):
        r = cli("install", "--lock", str(tmp_path / name), "--prefix", str(tmp_path / "p"))
        assert r.exit_code == 1 and message in r.stderr


def test_select_picks_host_or_only_platform(mirror: Path, tmp_path: Path) -> None:
    lock(str(mirror), tmp_path / "both.lock", "-p", BOTH)
    lock(str(mirror), tmp_path / "win.lock", "-p", "windows-x86_64")
    both, win = read_lock(tmp_path / "both.lock"), read_lock(tmp_path / "win.lock")
    pick = {"train": None, "profile": None, "components": None, "platform": None}
    assert select(both, host="linux-x86_64", **pick).platform == "linux-x86_64"
    assert select(win, host="linux-x86_64", **pick).platform == "windows-x86_64"  # cross by lock
    with pytest.raises(LockFileError, match="pass --platform"):
        select(both, host="linux-sbsa", **pick)


def test_plans_of_real_manifests_lock_and_read_back(shared_manifests: Path, tmp_path: Path) -> None:
    from cudaredist.publish.lockfile import build_lock, write_lock

    data = (shared_manifests / "redistrib_13.4.1.json").read_bytes()
    manifest = parse_manifest(data, label="13.4.1")
    base = "https://example.invalid/redist/"
    plans = [make_plan(manifest, platform=p, base_url=base, profile="build")
             for p in ("linux-x86_64", "windows-x86_64", "windows-arm64")]
    write_lock(tmp_path / "cuda.lock", build_lock(plans, train="13.4"))
    back = read_lock(tmp_path / "cuda.lock")
    assert back.release == "13.4.1" and back.platforms == ("linux-x86_64", "windows-x86_64", "windows-arm64")
    assert [p.content_key() for p in back.plans.values()] == [p.content_key() for p in plans]
    assert back.plans["linux-x86_64"].items[0].url.startswith(base)


# -- trains -------------------------------------------------------------------------------------------
def test_trains_lists_each_train_with_its_newest_release(mirror: Path, serve) -> None:  # type: ignore[no-untyped-def]
    from tests.archives import build_mirror, toolkit

    build_mirror(mirror, "13.0.0", toolkit("linux-x86_64"), release_date="2025-08-04")
    base = serve(mirror)
    r = cli("trains", "--base-url", base, "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got == {"base_url": base, "trains": [
        {"train": "12.9", "release": "12.9.1", "release_date": "2026-01-01", "releases": ["12.9.1"]},
        {"train": "13.0", "release": "13.0.1", "release_date": "2026-01-01",
         "releases": ["13.0.1", "13.0.0"]},
    ]}
    r = cli("trains", "--base-url", base)
    assert r.exit_code == 0
    assert r.stdout.splitlines() == ["12.9   12.9.1    2026-01-01", "13.0   13.0.1    2026-01-01"]
    r = cli("trains", "--base-url", str(mirror / "nowhere"))
    assert r.exit_code == 1 and "does not exist" in r.stderr


# -- JSON output, as documented ---------------------------------------------------------------------
def _documented() -> dict[str, Any]:
    """The example objects under "## JSON output" in docs/recipes.md, by command."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## JSON output", 1)[1].split("\n## ", 1)[0]
    found = {}
    for name, body in re.findall(r"<!-- json: ([a-z ]+) -->\s*```json\n(.*?)```", section, re.S):
        found[name] = json.loads(body)
    return found


def _shape(value: Any) -> Any:
    """Keys (recursively, first element of lists) and JSON types: what the docs promise."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    return "number" if isinstance(value, (int, float)) else type(value).__name__


def test_json_outputs_match_the_documentation(mirror: Path, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.archives import build_mirror, toolkit

    docs = _documented()
    assert set(docs) >= {"resolve", "trains", "info", "verify", "install", "env", "mirror", "lock"}
    # the release the examples show; the installed tree is one `env` can export on this host
    host = "windows-x86_64" if WINDOWS else "linux-x86_64"
    build_mirror(mirror, "13.4.2", toolkit("linux-x86_64") + (toolkit(host) if WINDOWS else []))
    base = serve(mirror)
    prefix = str(tmp_path / "p")
    runs = {
        "resolve": ["resolve", "13.4", "-p", "linux-x86_64", "--base-url", base, "--json"],
        "trains": ["trains", "--base-url", base, "--json"],
        "install": ["install", "13.4", "--prefix", prefix, "-p", host, "--base-url", base, "--json"],
        "info": ["info", "--prefix", prefix, "--json"],
        "verify": ["verify", "--prefix", prefix, "--json"],
        "env": ["env", "--prefix", prefix, "--json"],
        "mirror": ["mirror", "13.4", "-p", "linux-x86_64", "--base-url", base, "--out",
                   str(tmp_path / "m"), "--json"],
        "lock": ["lock", "13.4", "-p", "linux-x86_64", "--base-url", base],
    }
    if WINDOWS:  # the documented example is a Linux host's: a Windows one prepends PATH alone
        docs["env"]["prepend"].pop("LD_LIBRARY_PATH")
    for name, args in runs.items():
        r = cli(*args)
        assert r.exit_code == 0, (name, r.output)
        actual = json.loads(r.stdout)
        want, got = _shape(docs[name]), _shape(actual)
        assert _same_keys(want, got), f"{name}: docs {want}\n  output {got}"


def _same_keys(want: Any, got: Any) -> bool:
    """Every documented key is there with the documented type (outputs may add keys)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and _same_keys(v, got[k]) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(got, list) and (not want or not got or _same_keys(want[0], got[0]))
    return bool(want == got)


# -- locks of the pypi source ------------------------------------------------------------------------
@pytest.fixture
def wheels(fake_index: FakeIndex) -> FakeIndex:
    """The fake package index of tests/conftest.py."""
    return fake_index


def pypi_lock(out: Path, *args: str) -> dict[str, Any]:
    r = cli("lock", "13.0", "--source", "pypi", "--index-url", INDEX, "-o", str(out), *args)
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())


def test_lock_of_the_pypi_source_pins_wheels(wheels: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(wheels)
    got = pypi_lock(tmp_path / "cuda.lock", "-p", BOTH)
    assert got["source"] == "pypi" and got["base_url"] == INDEX and got["release"] == "13.0.2"
    assert got["release_date"] == "2025-12-19"
    for platform, plan in got["plans"].items():
        assert plan["source"] == "pypi" and plan["base_url"] == INDEX
        assert [c["name"] for c in plan["components"]] == ["cuda_nvcc", "cuda_cudart", "cuda_cccl",
                                                           "cuda_crt", "libnvvm", "cuda_profiler_api",
                                                           "cuda_nvtx"]
        for c in plan["components"]:
            assert c["layout"] == "wheel" and c["relative_path"].endswith(".whl")
            # the wheel's own URL, as the index gave it (not index URL + file name)
            assert c["url"] == FILES + c["relative_path"]
            data = wheels.blobs[c["relative_path"]]
            assert c["sha256"] == hashlib.sha256(data).hexdigest() and c["size"] == len(data)
        tag = "win_amd64" if platform.startswith("windows") else "manylinux"
        assert all(tag in c["relative_path"] for c in plan["components"])
    back = read_lock(tmp_path / "cuda.lock")
    assert back.source == "pypi" and back.base_url == INDEX
    assert {i.layout for p in back.plans.values() for i in p.items} == {"wheel"}
    # stable, and --hash works as for the redist source
    again = pypi_lock(tmp_path / "again.lock", "-p", BOTH)
    assert again == got
    r = cli("lock", "13.0", "--source", "pypi", "--index-url", INDEX, "-p", BOTH, "--hash")
    assert r.exit_code == 0 and r.stdout.strip() == got["content_key"]


def test_install_from_a_pypi_lock_reads_no_index(wheels: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(wheels)
    lock_path = tmp_path / "cuda.lock"
    locked = pypi_lock(lock_path, "-p", "linux-x86_64")
    wheels.requests.clear()
    prefix = tmp_path / "p"
    r = cli("install", "--lock", str(lock_path), "--prefix", str(prefix), "--json")
    assert r.exit_code == 0, r.output
    assert [u for u in wheels.requests if u.startswith(INDEX)] == []  # no project page, no metapackage
    assert {u for u in wheels.requests} == {c["url"] for c in locked["plans"]["linux-x86_64"]["components"]}
    out = json.loads(r.stdout)
    assert out["plan"]["source"] == "pypi" and out["plan"]["components"] == \
        locked["plans"]["linux-x86_64"]["components"]
    # laid out as a wheel install: the .so chain, nvvm under nvvm/
    assert_link(prefix / "lib" / "libcudart.so", "libcudart.so.13")
    assert (prefix / "nvvm" / "bin" / "cicc").is_file()
    # the same tree as resolving on the index
    resolved = tmp_path / "resolved"
    r = cli("install", "13.0", "--source", "pypi", "--index-url", INDEX, "--prefix", str(resolved),
            "-p", "linux-x86_64", "-q")
    assert r.exit_code == 0, r.output
    assert tree_of(prefix) == tree_of(resolved)
    # --source pypi agrees with the lock; --offline needs only the cache
    r = cli("install", "--lock", str(lock_path), "--prefix", str(tmp_path / "q"), "--source", "pypi",
            "--offline", "-q")
    assert r.exit_code == 0, r.output


def test_install_refuses_another_source_than_the_pypi_lock(wheels: FakeIndex, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    add_release_13_0(wheels)
    lock_path = tmp_path / "cuda.lock"
    pypi_lock(lock_path, "-p", "linux-x86_64")
    prefix = tmp_path / "p"
    r = cli("install", "--lock", str(lock_path), "--prefix", str(prefix), "--source", "nvidia")
    assert r.exit_code == 1
    assert "locked from source 'pypi', not 'nvidia'" in r.stderr and "regenerate the lock" in r.stderr
    monkeypatch.setenv("CUDAREDIST_SOURCE", "nvidia")  # a source set in the environment is asked for too
    r = cli("install", "--lock", str(lock_path), "--prefix", str(prefix))
    assert r.exit_code == 1 and "locked from source 'pypi', not 'nvidia'" in r.stderr
    assert not prefix.exists()


def _wheel_as_redist(obj: dict[str, Any]) -> None:
    obj["plans"]["linux-x86_64"]["components"][0]["layout"] = "redist"


def _plan_source(obj: dict[str, Any]) -> None:
    obj["plans"]["linux-x86_64"]["source"] = "nvidia"


def _lock_source(obj: dict[str, Any]) -> None:
    obj["source"] = "conda"


@pytest.mark.parametrize(("edit", "message"), [
    pytest.param(_wheel_as_redist, "layout 'redist' is not that of a pypi archive", id="layout"),
    pytest.param(_plan_source, "is from source 'nvidia', the lock from 'pypi'", id="plan-source"),
    pytest.param(_lock_source, "unknown source 'conda'", id="lock-source"),
])
def test_inconsistent_pypi_lock_is_refused(edit: Any, message: str, wheels: FakeIndex,
                                           tmp_path: Path) -> None:
    add_release_13_0(wheels)
    path = tmp_path / "cuda.lock"
    pypi_lock(path, "-p", "linux-x86_64")
    rewrite(path, edit, fix_digest=True)
    with pytest.raises(LockFileError, match=re.escape(message)):
        read_lock(path)
