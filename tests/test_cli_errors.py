"""The CLI's error boundary and `resolve --json`, against a real loopback mirror."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cudaredist.cli import app
from tests.archives import Exe, MirrorArchive, build_mirror

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
    pytest.param(["13.0", "--profile", "cuda"], "unknown profile 'cuda'; profiles: build, nvcc, runtime",
                 id="unknown-profile"),
    pytest.param(["13.0", "--platform", "solaris-sparc"],
                 "CUDA 13.0.1 has no archives for platform 'solaris-sparc'; platforms in this release: "
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
                        "total_size", "components", "notes"}
    assert (doc["release"], doc["release_date"], doc["platform"]) == ("13.0.1", "2026-01-01", platform)
    assert (doc["base_url"], doc["source"], doc["profile"], doc["notes"]) == (base, "nvidia", "nvcc", [])
    comps = doc["components"]
    assert isinstance(comps, list)
    for c in comps:
        assert set(c) == {"name", "version", "url", "relative_path", "sha256", "size", "layout"}
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
    assert names == ["cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_crt", "libnvvm"]
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
    assert names == ["cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_crt", "libnvvm"]


def test_python_m_error_exit_code_and_message(mirror: Path) -> None:
    base = mirror.as_uri() + "/"
    p = _subprocess("resolve", "13.5", "--base-url", base, "--platform", "linux-x86_64")
    assert p.returncode == 1
    assert p.stdout == ""
    assert p.stderr == f"error: CUDA train 13.5 has no release at {base}; published trains: 12.9, 13.0.\n"
