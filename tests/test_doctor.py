"""`cudaredist doctor`: each check on its own with injected inputs, a driver stub built with gcc
for the driver cases, fake compilers and nvcc as scripts on a temp PATH; the end-to-end tests
judge compilers against a real tree's include/crt/host_config.h (13.0.2 from NVIDIA's wheels)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudaredist import compat as host_driver
from cudaredist import doctor
from cudaredist.cli import app
from cudaredist.compat import Device, DriverBranch, DriverInfo, probe_driver
from cudaredist.doctor import Inputs
from cudaredist.doctor import checks as doctor_checks
from cudaredist.doctor.checks import Check, Toolkit
from cudaredist.doctor.compiler import (
    cccl_msvc_rule,
    check_host_compiler,
    check_msvc_preprocessor,
    check_probe,
    explain_probe_failure,
    zc_preprocessor_given,
)
from cudaredist.doctor.driver import arch_flags, check_driver, check_gpu
from cudaredist.doctor.toolkit import check_environment, check_msbuild, check_nvcc, check_toolkit
from cudaredist.hostcc import judge_host_config, select_host_compiler
from tests.archives import build_mirror, toolkit
from tests.hosts import posix_only, skip_on_windows
from tests.realmirror import host_free_env, real_mirror_1302, real_wheel_cache, run_cudaredist, scratch  # noqa: F401

runner = CliRunner()
# Windows finds a program by its extension (PATHEXT) and cannot run #!/bin/sh scripts
shell_fakes = posix_only("the fake nvcc and compilers are shell scripts (#!/bin/sh, an exec bit) on a "
                         "':'-separated PATH")
linux_tree = posix_only("the tiny linux-x86_64 tree's nvcc (a shell script) is run on this host")
BRANCHES = {13: DriverBranch(13, 580, "580.65.06"), 12: DriverBranch(12, 525, "525.60.13", "527.41")}


def need(tool: str) -> str:
    """The tool's path; a missing tool skips, except under CI where it fails."""
    skip_on_windows(f"{tool} building Linux programs, wrapped in shell scripts")
    found = shutil.which(tool)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is not installed although CI is set")
        pytest.skip(f"{tool} is not installed")
    return found


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def toolkit_at(prefix: Path, *, release: str | None = "13.0.2", windows: bool = False,
               native: bool = True, nvcc_version: str | None = "13.0.88", arm64: bool = False) -> Toolkit:
    platform = ("windows-arm64" if arm64 else "windows-x86_64") if windows else "linux-x86_64"
    return Toolkit(prefix, release, platform, nvcc_version, True, native, windows)


# -- toolkit ------------------------------------------------------------------------------------
@pytest.fixture
def tiny_tree(mirror: Path, tmp_path: Path) -> Path:
    """A small realistically shaped 13.0.1 tree installed by cudaredist (its nvcc is a script)."""
    p = tmp_path / "inst" / "cuda"
    r = runner.invoke(app, ["install", "13.0", "--prefix", str(p), "--platform", "linux-x86_64",
                            "--base-url", str(mirror), "-q"])
    assert r.exit_code == 0, r.stderr
    return p


@pytest.mark.skipif(os.name == "nt", reason="exec bits")
def test_toolkit_ok_then_each_damage_fails(tiny_tree: Path) -> None:
    check, tk = check_toolkit(tiny_tree, host_windows=False)
    assert check.status == "ok" and "CUDA 13.0.1 (linux-x86_64, profile nvcc)" in check.detail, check
    assert tk is not None and tk.release == "13.0.1" and tk.nvcc_version == "13.0.88" and tk.native

    (tiny_tree / "notes.txt").write_text("mine")  # a file added by hand is not damage
    check, _ = check_toolkit(tiny_tree, host_windows=False)
    assert check.status == "ok" and "1 files added by hand" in check.detail

    (tiny_tree / "bin" / "nvcc").chmod(0o644)
    check, _ = check_toolkit(tiny_tree, host_windows=False)
    assert check.status == "fail" and "exec bit" in check.detail and "bin/nvcc" in check.detail
    assert "--reinstall" in check.fix and "--force" not in check.fix  # not the deprecated flag

    (tiny_tree / "include" / "cuda_runtime.h").write_text("// changed, longer than before")
    (tiny_tree / "nvvm" / "bin" / "cicc").unlink()
    check, _ = check_toolkit(tiny_tree, host_windows=False)
    assert check.status == "fail"
    assert "1 missing (nvvm/bin/cicc)" in check.detail
    assert "1 changed (include/cuda_runtime.h)" in check.detail
    assert f"cudaredist install 13.0.1 --prefix {tiny_tree} --platform linux-x86_64" in check.fix
    assert "--profile nvcc" in check.fix and "--reinstall" in check.fix


def test_toolkit_without_a_record(tmp_path: Path) -> None:
    check, tk = check_toolkit(tmp_path / "nowhere", host_windows=False)
    assert check.status == "fail" and "does not exist" in check.detail and tk is None
    (tmp_path / "empty").mkdir()
    check, tk = check_toolkit(tmp_path / "empty", host_windows=False)
    assert check.status == "fail" and "holds no CUDA toolkit" in check.detail and tk is None
    script(tmp_path / "system" / "bin" / "nvcc", "exit 0\n")  # a toolkit cudaredist did not install
    check, tk = check_toolkit(tmp_path / "system", host_windows=False)
    assert check.status == "warn" and "did not install" in check.detail
    assert tk is not None and tk.release is None and tk.has_nvcc and tk.native


def test_a_windows_tree_on_linux_is_not_run(mirror: Path, tmp_path: Path) -> None:
    p = tmp_path / "win"
    r = runner.invoke(app, ["install", "13.0", "--prefix", str(p), "--platform", "windows-x86_64",
                            "--base-url", str(mirror), "-q"])
    assert r.exit_code == 0, r.stderr
    check, tk = check_toolkit(p, host_windows=False)
    assert check.status == "ok" and tk is not None and tk.windows and not tk.native
    for c in (check_nvcc(tk, {})[0], check_host_compiler(tk, {}), check_probe(tk, {})):
        assert c.status == "ok" and c.detail.startswith("not run: a windows-x86_64 tree"), c
    env_check = check_environment({"WINDOWS_CUDA_HOME": str(p)}, tk)
    assert env_check.status == "ok"
    assert check_environment({}, tk).status == "warn"


# -- msbuild ------------------------------------------------------------------------------------
@pytest.mark.parametrize("platform", [pytest.param("windows-x86_64", id="x64"),
                                      pytest.param("windows-arm64", id="arm64")])
def test_msbuild_files_of_a_windows_tree(tmp_path: Path, platform: str) -> None:
    """CMake's -T cuda=<tree> needs CUDA X.Y.props and .targets in extras/.../MSBuildExtensions."""
    mirror, p = tmp_path / "mirror", tmp_path / "win"
    build_mirror(mirror, "13.4.1", toolkit(platform, "13.4.1"))
    r = runner.invoke(app, ["install", "13.4", "--prefix", str(p), "--platform", platform,
                            "--base-url", str(mirror), "-q"])
    assert r.exit_code == 0, r.stderr
    tk = check_toolkit(p, host_windows=False)[1]
    assert tk is not None
    check = check_msbuild(tk)
    ext = p / "extras" / "visual_studio_integration" / "MSBuildExtensions"
    assert check == Check("msbuild", "ok", f'{ext}: cmake -G "Visual Studio 17 2022" -T cuda={p}'), check
    (ext / "CUDA 13.4.targets").unlink()
    check = check_msbuild(tk)
    assert check.status == "warn" and check.detail.startswith(f"CUDA 13.4.targets missing in {ext}: ")
    assert "finds no CUDA toolset" in check.detail and "Ninja" in check.detail
    assert f"cudaredist install 13.4.1 --prefix {p} --platform {platform}" in check.fix
    assert "--profile nvcc" in check.fix and "--reinstall" in check.fix and "--force" not in check.fix
    # a tree from NVIDIA's wheels (which lack the files): the same request from NVIDIA's archives
    rec = json.loads((p / ".cudaredist" / "record.json").read_text())
    rec["plan"]["source"] = "pypi"
    check = check_msbuild(dataclasses.replace(tk, record=rec))
    assert f"cudaredist install 13.4.1 --prefix {p} --platform {platform} --source nvidia --profile nvcc" \
        in check.fix and "--force" not in check.fix


def test_msbuild_not_checked_without_windows_nvcc(tmp_path: Path) -> None:
    assert check_msbuild(toolkit_at(tmp_path)) == Check("msbuild", "ok", "not checked: a Linux tree")
    runtime = Toolkit(tmp_path, "13.4.1", "windows-x86_64", None, False, False, True)
    assert check_msbuild(runtime) == Check("msbuild", "ok", "not checked: no nvcc")


# -- nvcc ---------------------------------------------------------------------------------------
def fake_nvcc(prefix: Path, release: str, full: str, code: int = 0) -> None:
    script(prefix / "bin" / "nvcc",
           f'echo "Cuda compilation tools, release {release}, V{full}"\nexit {code}\n')


@shell_fakes
@pytest.mark.parametrize(("release", "full", "code", "status", "words"), [
    pytest.param("13.0", "13.0.88", 0, "ok", "as the record says (CUDA 13.0.2)", id="matches"),
    pytest.param("12.9", "12.9.86", 0, "fail", "names CUDA 13.0.2 (release 13.0, V13.0.88)",
                 id="other-release"),
    pytest.param("13.0", "13.0.48", 0, "fail", "V13.0.48, but", id="other-build"),
    pytest.param("13.0", "13.0.88", 1, "fail", "failed (exit 1)", id="exit-code"),
    pytest.param("13.0", "x", 0, "fail", "--version ran, but its output names no release",
                 id="unparsed-output"),
])
def test_nvcc_version_against_the_record(tmp_path: Path, release: str, full: str, code: int,
                                         status: str, words: str) -> None:
    fake_nvcc(tmp_path, release, full, code)
    check, reported = check_nvcc(toolkit_at(tmp_path), dict(os.environ))
    assert check.status == status and words in check.detail, check
    if status == "ok":
        assert reported == "13.0" and not check.fix


@shell_fakes
def test_nvcc_missing_and_no_record(tmp_path: Path) -> None:
    check, _ = check_nvcc(toolkit_at(tmp_path), {})
    assert check.status == "fail" and "missing" in check.detail and "--reinstall" in check.fix
    fake_nvcc(tmp_path, "13.0", "13.0.88")
    check, reported = check_nvcc(toolkit_at(tmp_path, release=None, nvcc_version=None), dict(os.environ))
    assert check.status == "ok" and reported == "13.0" and "as the record says" not in check.detail


# -- host compiler: which one nvcc will use -------------------------------------------------------
@pytest.fixture
def bindir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    for name in ("gcc", "g++", "clang++", "gcc-13"):
        script(d / name, "exit 0\n")
    return d


@shell_fakes
@pytest.mark.parametrize(("env", "spec", "source", "allow"), [
    pytest.param({}, "gcc", "nvcc's default `gcc` on PATH", "", id="default"),
    pytest.param({"NVCC_CCBIN": "clang++"}, "clang++", "NVCC_CCBIN", "", id="NVCC_CCBIN"),
    pytest.param({"NVCC_CCBIN": "clang++", "NVCC_PREPEND_FLAGS": "-O2 -ccbin gcc-13"}, "gcc-13",
                 "-ccbin in NVCC_PREPEND_FLAGS", "", id="flag-beats-NVCC_CCBIN"),
    pytest.param({"NVCC_PREPEND_FLAGS": "-ccbin=clang++", "NVCC_APPEND_FLAGS": "--compiler-bindir gcc-13"},
                 "gcc-13", "-ccbin in NVCC_APPEND_FLAGS", "", id="append-read-last"),
    pytest.param({"NVCC_APPEND_FLAGS": "-allow-unsupported-compiler"}, "gcc",
                 "nvcc's default `gcc` on PATH", "NVCC_APPEND_FLAGS", id="allow-unsupported"),
    pytest.param({"NVCC_PREPEND_FLAGS": "--allow-unsupported-compiler -ccbin clang++"}, "clang++",
                 "-ccbin in NVCC_PREPEND_FLAGS", "NVCC_PREPEND_FLAGS", id="allow-unsupported-long"),
])
def test_select_host_compiler(bindir: Path, env: dict[str, str], spec: str, source: str, allow: str) -> None:
    hc = select_host_compiler({"PATH": str(bindir), **env}, windows=False)
    assert (hc.spec, hc.path, hc.source) == (spec, str(bindir / spec), source)
    assert hc.allow_unsupported == bool(allow) and hc.flags_source == allow and not hc.msvc


@shell_fakes
def test_select_host_compiler_paths_and_directories(bindir: Path, tmp_path: Path) -> None:
    hc = select_host_compiler({"PATH": "/nonexistent", "NVCC_CCBIN": str(bindir)}, windows=False)
    assert hc.path == str(bindir / "gcc")  # -ccbin DIR: nvcc runs DIR/gcc
    hc = select_host_compiler({"PATH": "/nonexistent", "NVCC_CCBIN": str(bindir / "clang++")}, windows=False)
    assert hc.path == str(bindir / "clang++")
    hc = select_host_compiler({"PATH": str(tmp_path / "none")}, windows=False)
    assert hc.path is None and hc.spec == "gcc"
    (bindir / "g++").unlink()
    hc = select_host_compiler({"PATH": str(bindir)}, windows=False)
    assert hc.path == str(bindir / "gcc") and hc.linker == ""  # nvcc links with g++: missing


def test_select_host_compiler_windows(tmp_path: Path) -> None:
    script(tmp_path / "msvc" / "cl.exe", "exit 0\n")
    hc = select_host_compiler({"PATH": str(tmp_path / "msvc")}, windows=True)
    assert hc.msvc and hc.path == str(tmp_path / "msvc" / "cl.exe") and hc.linker is None
    hc = select_host_compiler({"PATH": str(tmp_path), "NVCC_CCBIN": str(tmp_path / "msvc")}, windows=True)
    assert hc.msvc and hc.path == str(tmp_path / "msvc" / "cl.exe")
    hc = select_host_compiler({"PATH": str(tmp_path)}, windows=True)
    assert hc.path is None and hc.spec == "cl.exe"
    tk = toolkit_at(tmp_path, windows=True)
    check = check_host_compiler(tk, {"PATH": str(tmp_path)}, windows=True)
    assert check.status == "fail" and "cl.exe" in check.detail
    assert "vcvars64.bat" in check.fix and "msvc-dev-cmd" in check.fix
    # a windows-arm64 tree builds with the ARM64 compiler
    check = check_host_compiler(toolkit_at(tmp_path, windows=True, arm64=True), {"PATH": str(tmp_path)},
                                windows=True)
    assert "'ARM64 Native Tools Command Prompt'" in check.fix and "vcvarsarm64.bat" in check.fix
    assert "arch: arm64" in check.fix and "x64" not in check.fix


def test_no_compiler_at_all(tmp_path: Path) -> None:
    check = check_host_compiler(toolkit_at(tmp_path), {"PATH": str(tmp_path / "empty")}, windows=False)
    assert check.status == "fail" and "gcc" in check.detail and "not found" in check.detail
    assert "NVCC_CCBIN" in check.fix


# -- host compiler: the verdict comes from preprocessing host_config.h -----------------------------
HOST_CONFIG = """\
#if defined(__CUDACC__) && defined(__GNUC__) && !__NV_NO_HOST_COMPILER_CHECK
#if __GNUC__ > 15
#error -- unsupported GNU version! gcc versions later than 15 are not supported!
#endif
#endif
"""


def test_judge_host_config_by_preprocessing(tmp_path: Path) -> None:
    """A made-up header with gcc's real preprocessor: the verdict is whatever the header says."""
    gcc = need("gcc")
    include = tmp_path / "include"
    (include / "crt").mkdir(parents=True)
    (include / "crt" / "host_config.h").write_text(HOST_CONFIG)
    script(tmp_path / "new" / "gcc", f'exec {gcc} -U__GNUC__ -D__GNUC__=99 "$@"\n')
    env = dict(os.environ)
    good = select_host_compiler({"PATH": os.path.dirname(gcc)}, windows=False)
    new = select_host_compiler({"PATH": str(tmp_path / "new")}, windows=False)
    assert judge_host_config(good, include, env).accepted
    verdict = judge_host_config(new, include, env)
    assert not verdict.accepted and verdict.judged
    assert verdict.error == "unsupported GNU version! gcc versions later than 15 are not supported!"
    # lower the header's limit below the real gcc: the same compiler is now refused
    (include / "crt" / "host_config.h").write_text(HOST_CONFIG.replace("> 15", "> 1"))
    assert not judge_host_config(good, include, env).accepted
    (include / "crt" / "host_config.h").unlink()
    missing = judge_host_config(good, include, env)
    assert not missing.accepted and not missing.judged and "missing" in missing.error


# -- host compiler: MSVC and CCCL's /Zc:preprocessor ---------------------------------------------
CCCL_ERROR = """\
#ifndef __CCCL_PREPROCESSOR_H
#define __CCCL_PREPROCESSOR_H
#if defined(_MSC_VER) && !defined(__clang__)
#  if (!defined(_MSVC_TRADITIONAL) || _MSVC_TRADITIONAL == 1) \\
    && !defined(CCCL_IGNORE_MSVC_TRADITIONAL_PREPROCESSOR_WARNING)
#    error "MSVC/cl.exe with traditional preprocessor is used. Please pass `/Zc:preprocessor`."
#  endif
#endif
#ifdef __has_include
#  define _CCCL_HAS_INCLUDE(_X) __has_include(_X)
#endif
#endif
"""
CCCL_MESSAGE = CCCL_ERROR.replace('#    error "MSVC', '#    pragma message("MSVC').replace(
    'preprocessor`."', 'preprocessor`.")')
CCCL_NONE = "#ifndef __CCCL_PREPROCESSOR_H\n#define __CCCL_PREPROCESSOR_H\n#endif\n"


@pytest.mark.parametrize(("text", "rule"), [
    pytest.param(CCCL_ERROR, "error", id="13.2-error"),
    pytest.param(CCCL_MESSAGE, "message", id="warning"),
    pytest.param(CCCL_NONE, "none", id="13.0-nothing"),
])
def test_cccl_msvc_rule(text: str, rule: str) -> None:
    assert cccl_msvc_rule(text) == rule


@pytest.mark.parametrize(("env", "where"), [
    pytest.param({"NVCC_APPEND_FLAGS": "-Xcompiler=/Zc:preprocessor"}, "NVCC_APPEND_FLAGS", id="append"),
    pytest.param({"NVCC_PREPEND_FLAGS": '-Xcompiler "/EHsc /Zc:preprocessor"'}, "NVCC_PREPEND_FLAGS",
                 id="prepend-list"),
    pytest.param({"CL": "/Zc:preprocessor"}, "CL", id="CL"),
    pytest.param({"_CL_": "-Zc:preprocessor /W3"}, "_CL_", id="_CL_"),
    pytest.param({"CL": "/Zc:preprocessor-"}, "", id="switched-off"),
    pytest.param({}, "", id="nowhere"),
])
def test_zc_preprocessor_given(env: dict[str, str], where: str) -> None:
    assert zc_preprocessor_given(env) == where


@pytest.mark.parametrize(("text", "env", "status"), [
    pytest.param(CCCL_ERROR, {}, "fail", id="required-missing"),
    pytest.param(CCCL_ERROR, {"CL": "/Zc:preprocessor"}, "ok", id="required-given"),
    pytest.param(CCCL_MESSAGE, {}, "warn", id="recommended-missing"),
    pytest.param(CCCL_NONE, {}, "ok", id="not-needed"),
])
def test_msvc_preprocessor_check(tmp_path: Path, text: str, env: dict[str, str], status: str) -> None:
    header = tmp_path / "include" / "cccl" / "cuda" / "std" / "__cccl" / "preprocessor.h"
    header.parent.mkdir(parents=True)
    header.write_text(text)
    check = check_msvc_preprocessor(tmp_path / "include", env)
    assert check.status == status, check
    if status != "ok":
        assert "/Zc:preprocessor" in check.detail and "-Xcompiler=/Zc:preprocessor" in check.fix
        assert "CL=/Zc:preprocessor" in check.fix


# -- probe --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("output", "first", "meaning"), [
    pytest.param("/x/include/crt/host_config.h:137:2: error: #error -- unsupported GNU version! gcc versions "
                 "later than 15 are not supported!", "unsupported GNU version", "host_config.h accepts",
                 id="gcc-too-new"),
    pytest.param("nvcc fatal   : Cannot find compiler 'cl.exe' in PATH", "Cannot find compiler",
                 "no MSVC environment", id="no-cl"),
    pytest.param("preprocessor.h(23): fatal error C1189: #error:  MSVC/cl.exe with traditional preprocessor "
                 "is used.", "C1189", "/Zc:preprocessor", id="traditional-preprocessor"),
    pytest.param("sh: 1: gcc: not found\nnvcc fatal   : Failed to preprocess host compiler properties.",
                 "gcc: not found", "cannot start its host compiler", id="no-gcc"),
    pytest.param("/usr/bin/ld: cannot find -lcudart: No such file or directory\n"
                 "collect2: error: ld returned 1 exit status",
                 "cannot find -lcudart", "cuda_cudart", id="no-cudart"),
    pytest.param("cuda_fp16.h:4: fatal error: nv/target: No such file or directory", "nv/target", "CCCL",
                 id="no-cccl"),
    pytest.param("sh: 1: cicc: not found", "cicc", "libnvvm", id="no-nvvm"),
    pytest.param("something odd happened", "something odd", "could not build a minimal", id="unknown"),
])
def test_explain_probe_failure(output: str, first: str, meaning: str) -> None:
    line, what, _fix = explain_probe_failure(output)
    assert first in line and meaning in what, (line, what)


@pytest.mark.parametrize("text", [
    pytest.param("[[rule]\n", id="not-toml"),
    pytest.param('rule = "x"\n[unknown]\nmeans = "a"\nfix = "b"\n', id="rule-a-string"),
    pytest.param('[[rule]]\npattern = "x"\nmeans = "a"\n[unknown]\nmeans = "a"\nfix = "b"\n', id="no-fix"),
    pytest.param('[[rule]]\npattern = "x"\nmeans = "a"\nfix = "b"\n', id="no-unknown"),
])
def test_a_malformed_probe_toml_is_one_manifest_error_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """The probe's rules are data (manifests/probe.toml): one that is not TOML or not the schema is a
    ManifestError of one line naming the file, never a KeyError from inside the loader."""
    from cudaredist.doctor import compiler
    from cudaredist.errors import ManifestError

    (tmp_path / "probe.toml").write_text(text)
    monkeypatch.setattr(compiler, "data_dir", lambda: tmp_path)
    compiler._rules.cache_clear()
    try:
        with pytest.raises(ManifestError) as info:
            explain_probe_failure("nvcc fatal: x")
    finally:
        compiler._rules.cache_clear()  # the next test reads the real file again
    said = str(info.value)
    assert said.startswith(f"cannot read {tmp_path / 'probe.toml'}") and "\n" not in said, said


@shell_fakes
def test_probe_failure_from_a_fake_nvcc(tmp_path: Path) -> None:
    script(tmp_path / "bin" / "nvcc",
           'echo "nvcc fatal   : Cannot find compiler \'cl.exe\' in PATH" >&2\nexit 1\n')
    check = check_probe(toolkit_at(tmp_path), dict(os.environ))
    assert check.status == "fail" and "exit 1" in check.detail and "Cannot find compiler" in check.detail
    assert "no MSVC environment" in check.detail and "NVCC_CCBIN" in check.fix
    assert "the checks above say more" not in check.fix
    script(tmp_path / "bin" / "nvcc", 'touch probe\nexit 0\n')  # "builds": writes the output file
    assert check_probe(toolkit_at(tmp_path), dict(os.environ)).status == "ok"


# -- driver: a stub libcuda built with gcc --------------------------------------------------------
STUB_C = r"""
#include <stdio.h>
int cuInit(unsigned int flags) { (void)flags; return INIT_RESULT; }
#if HAS_VERSION
int cuDriverGetVersion(int *v) { if (VERSION_RESULT) return VERSION_RESULT; *v = VERSION; return 0; }
#endif
int cuDeviceGetCount(int *n) { *n = NDEV; return COUNT_RESULT; }
int cuDeviceGet(int *d, int i) { *d = i; return 0; }
int cuDeviceGetName(char *buf, int len, int d) { snprintf(buf, len, "Fake GPU %d", d); return 0; }
int cuDeviceGetAttribute(int *v, int attr, int d) {
    if (attr == 75) { *v = d == 0 ? MAJOR0 : MAJOR1; return 0; }
    if (attr == 76) { *v = d == 0 ? MINOR0 : MINOR1; return 0; }
    return 1;
}
"""


def build_stub(where: Path, *, init: int = 0, version: int = 13000, version_result: int = 0, ndev: int = 1,
               cc0: tuple[int, int] = (9, 0), cc1: tuple[int, int] = (8, 0), has_version: bool = True,
               count_result: int = 0) -> Path:
    gcc = need("gcc")
    where.mkdir(parents=True, exist_ok=True)
    (where / "stub.c").write_text(STUB_C)
    out = where / "libcuda.so.1"
    defines = {"INIT_RESULT": init, "VERSION": version, "VERSION_RESULT": version_result, "NDEV": ndev,
               "MAJOR0": cc0[0], "MINOR0": cc0[1], "MAJOR1": cc1[0], "MINOR1": cc1[1],
               "HAS_VERSION": int(has_version), "COUNT_RESULT": count_result}
    subprocess.run([gcc, "-shared", "-fPIC", *(f"-D{k}={v}" for k, v in defines.items()),
                    "-o", str(out), str(where / "stub.c")], check=True, capture_output=True)
    return out


@pytest.mark.skipif(sys.platform != "linux", reason="builds an ELF driver stub")
def test_driver_new_enough_with_two_gpus(tmp_path: Path) -> None:
    lib = build_stub(tmp_path / "ok", version=13000, ndev=2, cc0=(9, 0), cc1=(8, 0))
    info = probe_driver(str(lib), proc_file=str(tmp_path / "none"))
    assert info.loaded and info.version == 13000 and info.cuda == "13.0" and info.init_result == 0
    assert info.path == str(lib.resolve())  # where the loader found it, through dladdr
    assert info.devices == (Device(0, "Fake GPU 0", 9, 0), Device(1, "Fake GPU 1", 8, 0))
    check = check_driver(info, "13.0.2", windows=False, branches=BRANCHES)
    assert check.status == "ok" and "supports CUDA 13.0 (cuDriverGetVersion 13000)" in check.detail
    assert "minor-version" not in check.detail
    gpu = check_gpu(info, ("sm_75", "sm_80", "sm_90", "sm_120"))
    assert gpu.status == "ok" and "2 GPUs" in gpu.detail and "Fake GPU 1 (compute capability 8.0, sm_80)" \
        in gpu.detail
    assert "CMAKE_CUDA_ARCHITECTURES=80;90" in gpu.detail
    assert "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90" in gpu.detail


@pytest.mark.skipif(sys.platform != "linux", reason="builds an ELF driver stub")
def test_driver_older_minor_is_ok_through_minor_version_compatibility(tmp_path: Path) -> None:
    info = probe_driver(str(build_stub(tmp_path / "minor", version=13000)))
    check = check_driver(info, "13.4.2", windows=False, branches=BRANCHES)
    assert check.status == "ok" and "minor-version compatibility" in check.detail and not check.fix


@pytest.mark.skipif(sys.platform != "linux", reason="builds an ELF driver stub")
def test_driver_of_an_older_major_fails_naming_the_branch(tmp_path: Path) -> None:
    info = probe_driver(str(build_stub(tmp_path / "old", version=12080)))
    check = check_driver(info, "13.0.2", windows=False, branches=BRANCHES)
    assert check.status == "fail" and "supports CUDA 12.8" in check.detail and "too old for CUDA 13.0.2" \
        in check.detail
    assert "R580" in check.fix and "580.65.06" in check.fix
    older = probe_driver(str(build_stub(tmp_path / "older", version=11080)))
    on_windows = check_driver(older, "12.9.1", windows=True, branches=BRANCHES)
    assert on_windows.status == "fail" and "R525" in on_windows.fix and "527.41" in on_windows.fix
    # no toolkit to compare with: the driver is fine as it is
    assert check_driver(info, None, windows=False, branches=BRANCHES).status == "ok"


@pytest.mark.skipif(sys.platform != "linux", reason="builds an ELF driver stub")
def test_stub_library_fails_with_CUDA_ERROR_STUB_LIBRARY(tmp_path: Path) -> None:
    lib = build_stub(tmp_path / "lib" / "stubs", init=34, version_result=34)
    info = probe_driver(str(lib))
    check = check_driver(info, "13.0.2", windows=False, branches=BRANCHES)
    assert check.status == "fail" and "CUDA_ERROR_STUB_LIBRARY" in check.detail and str(lib) in check.detail
    assert f"take {lib.parent} out of LD_LIBRARY_PATH" in check.fix
    assert check_gpu(info).status == "fail"


@pytest.mark.skipif(sys.platform != "linux", reason="builds an ELF driver stub")
def test_driver_without_a_device(tmp_path: Path) -> None:
    info = probe_driver(str(build_stub(tmp_path / "nodev", init=100)))
    check = check_driver(info, "13.0.2", windows=False, branches=BRANCHES)
    assert check.status == "warn" and "CUDA_ERROR_NO_DEVICE" in check.detail
    gpu = check_gpu(info)
    assert gpu.status == "warn" and "CUDA_ERROR_NO_DEVICE" in gpu.detail


def test_driver_absent_is_a_warning(tmp_path: Path) -> None:
    asked: list[str] = []

    def loader(name: str) -> object:
        asked.append(name)
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    info = probe_driver(None, loader=loader)
    assert asked == [host_driver.default_driver_library()] and not info.loaded
    check = check_driver(info, "13.0.2", windows=False, branches=BRANCHES)
    assert check.status == "warn" and "compile-only" in check.detail and "R580" in check.fix
    assert check_gpu(info).status == "warn"
    real = probe_driver(str(tmp_path / "libcuda.so.1"))  # the real loader, a file that is not there
    assert not real.loaded and check_driver(real, None, windows=False, branches=BRANCHES).status == "warn"
    assert host_driver.default_driver_library(windows=True) == "nvcuda.dll"
    assert host_driver.default_driver_library(windows=False) == "libcuda.so.1"


def test_driver_branches_are_data() -> None:
    branches = host_driver.driver_branches().cuda
    assert branches[13].branch == 580 and branches[12].branch == 525 and branches[12].windows == "527.41"


# -- gpu ----------------------------------------------------------------------------------------
def gpus(*ccs: tuple[int, int]) -> DriverInfo:
    return DriverInfo("libcuda.so.1", True, version=13000, version_result=0, init_result=0,
                      devices=tuple(Device(i, f"GPU {i}", a, b) for i, (a, b) in enumerate(ccs)))


def test_arch_flags() -> None:
    assert arch_flags([Device(0, "H200", 9, 0)]) == ("-arch=sm_90", "90")
    assert arch_flags([Device(0, "a", 12, 0), Device(1, "b", 8, 6), Device(2, "c", 8, 6)]) == (
        "-gencode arch=compute_86,code=sm_86 -gencode arch=compute_120,code=sm_120", "86;120")


CODES_13 = ("sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_100", "sm_110", "sm_103",
            "sm_120", "sm_121")


@pytest.mark.parametrize(("ccs", "status", "words"), [
    pytest.param([(9, 0)], "ok", "targets all of them", id="supported"),
    pytest.param([(5, 2)], "fail", "cannot build for sm_52: its nvcc targets sm_75 to sm_121", id="too-old"),
    pytest.param([(13, 0)], "warn", "does not list sm_130", id="too-new"),
])
def test_gpu_against_the_toolkit_targets(ccs: list[tuple[int, int]], status: str, words: str) -> None:
    check = check_gpu(gpus(*ccs), CODES_13)
    assert check.status == status and words in check.detail, check
    if status == "warn":
        assert "compute_121" in check.fix


# -- environment --------------------------------------------------------------------------------
@pytest.fixture
def two_toolkits(tmp_path: Path) -> tuple[Path, Path]:
    ours, other = tmp_path / "ours", tmp_path / "other"
    for p in (ours, other):
        script(p / "bin" / "nvcc", "exit 0\n")
    return ours, other


@shell_fakes
def test_environment_shadowing(two_toolkits: tuple[Path, Path]) -> None:
    ours, other = two_toolkits
    tk = toolkit_at(ours)
    shadowed = check_environment({"PATH": f"{other / 'bin'}:{ours / 'bin'}"}, tk, host_windows=False)
    assert shadowed.status == "warn" and f"a plain `nvcc` runs {other / 'bin' / 'nvcc'}" in shadowed.detail
    assert f'eval "$(cudaredist env --prefix {ours})"' in shadowed.fix
    first = check_environment({"PATH": f"{ours / 'bin'}:{other / 'bin'}", "CUDA_PATH": str(ours)}, tk)
    assert first.status == "ok" and str(ours / "bin" / "nvcc") in first.detail
    wrong = check_environment({"PATH": str(ours / "bin"), "CUDA_HOME": str(other)}, tk)
    assert wrong.status == "warn" and f"CUDA_HOME={other} names another toolkit" in wrong.detail
    none = check_environment({"PATH": "/nonexistent"}, tk)
    assert none.status == "warn" and "no nvcc on PATH" in none.detail


@shell_fakes
def test_environment_without_a_tree(two_toolkits: tuple[Path, Path], tmp_path: Path) -> None:
    ours, other = two_toolkits
    ok = check_environment({"PATH": str(ours / "bin"), "CUDA_PATH": str(ours), "CUDA_HOME": str(ours)}, None)
    assert ok.status == "ok" and f"a plain `nvcc` runs {ours / 'bin' / 'nvcc'}" in ok.detail
    split = check_environment({"PATH": str(other / "bin"), "CUDA_PATH": str(ours), "CUDA_HOME": str(other)},
                              None)
    assert split.status == "warn" and "different toolkits" in split.detail
    assert f"CUDA_PATH={ours}, but a plain `nvcc` runs {other / 'bin' / 'nvcc'}" in split.detail
    gone = check_environment({"PATH": "", "CUDA_HOME": str(tmp_path / "gone")}, None)
    assert gone.status == "warn" and "does not exist" in gone.detail


# -- the whole run and the command ----------------------------------------------------------------
def test_run_without_a_prefix_checks_driver_gpu_environment(tmp_path: Path) -> None:
    inputs = Inputs(env={"PATH": str(tmp_path)}, driver_library=str(tmp_path / "libcuda.so.1"))
    report = doctor.run(inputs=inputs)
    assert [c.name for c in report.checks] == ["driver", "gpu", "environment"]
    assert report.prefix is None and report.release is None and not report.failed


@pytest.mark.parametrize("host_windows", [pytest.param(True, id="windows-host"),
                                          pytest.param(False, id="posix-host")])
def test_run_spells_the_environment_fix_for_the_injected_host(host_windows: bool, tmp_path: Path) -> None:
    """Inputs.host_windows reaches the environment check, not only the toolkit and driver checks."""
    inputs = Inputs(env={"PATH": "", "CUDA_HOME": str(tmp_path / "gone")},
                    driver_library=str(tmp_path / "none.so"), host_windows=host_windows)
    fix = doctor.run(inputs=inputs).checks[-1].fix
    assert ("| Out-String | Invoke-Expression" in fix) == host_windows
    assert ('eval "$(cudaredist env --prefix' in fix) == (not host_windows)


@linux_tree
def test_run_with_a_train(tiny_tree: Path, tmp_path: Path) -> None:
    inputs = Inputs(env={"PATH": "/nonexistent"}, driver_library=str(tmp_path / "none.so"))
    report = doctor.run(train="13.4", inputs=inputs)
    assert report.checks[0] == Check("toolkit", "fail", report.checks[0].detail, report.checks[0].fix)
    assert "no managed toolkit for 13.4" in report.checks[0].detail and report.failed
    report = doctor.run(train="13.0", inputs=inputs, find=lambda train: tiny_tree)
    assert [c.name for c in report.checks] == list(doctor_checks.ORDER)
    assert report.release == "13.0.1" and report.prefix == str(tiny_tree)
    by_name = {c.name: c for c in report.checks}
    assert by_name["toolkit"].status == "ok"
    assert by_name["nvcc"].status == "fail"  # the tiny tree's nvcc is a script that prints "nvcc"


@linux_tree
def test_cli_json_schema_and_exit_codes(tiny_tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    r = runner.invoke(app, ["doctor", "--json"])
    data = json.loads(r.stdout)
    assert set(data) == {"prefix", "release", "checks"} and data["prefix"] is None
    assert [c["name"] for c in data["checks"]] == ["driver", "gpu", "environment"]
    assert all(set(c) == {"name", "status", "detail", "fix"} for c in data["checks"])
    assert r.exit_code == (1 if any(c["status"] == "fail" for c in data["checks"]) else 0)
    r = runner.invoke(app, ["doctor", "--prefix", str(tiny_tree)])
    assert r.exit_code == 1 and "fail  nvcc" in r.stdout and "ok    toolkit" in r.stdout
    r = runner.invoke(app, ["doctor", "13.0", "--prefix", str(tiny_tree)])
    assert r.exit_code == 2 and "give --prefix DIR or a TRAIN, not both" in r.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="the dynamic loader's search path")
def test_stub_found_first_by_the_loader_fails_the_command(tmp_path: Path) -> None:
    """The stub on LD_LIBRARY_PATH as libcuda.so.1: the real dlopen search finds it first."""
    stubs = build_stub(tmp_path / "cuda" / "lib" / "stubs", init=34, version_result=34).parent
    env = {**os.environ, "LD_LIBRARY_PATH": str(stubs), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-m", "cudaredist", "doctor", "--json"], env=env, text=True,
                       capture_output=True, timeout=120)
    assert r.returncode == 1, r.stderr
    driver = next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "driver")
    assert driver["status"] == "fail" and "CUDA_ERROR_STUB_LIBRARY" in driver["detail"]
    assert str(stubs) in driver["fix"]


# -- end to end: a real 13.0.2 tree, real compilers, the tree's own host_config.h --------------------
@pytest.fixture(scope="module")
def real_tree(real_mirror_1302: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:  # noqa: F811
    with scratch(tmp_path_factory, "doctor-real") as tmp:
        prefix = tmp / "cuda-13.0"
        r = run_cudaredist("install", "13.0.2", "--base-url", str(real_mirror_1302), "--platform",
                           "linux-x86_64", "--prefix", str(prefix), "-q", env=host_free_env(tmp / "cache"))
        assert r.returncode == 0, r.stderr
        yield prefix


def real_inputs(env: dict[str, str], tmp_path: Path) -> Inputs:
    return Inputs(env=env, driver_library=str(tmp_path / "no-driver" / "libcuda.so.1"), host_windows=False)


@pytest.mark.e2e
@pytest.mark.pypi
@pytest.mark.skipif(sys.platform != "linux", reason="runs the Linux tree")
def test_real_tree_all_green_with_the_real_gcc(real_tree: Path, tmp_path: Path,
                                               real_wheel_cache: Path) -> None:  # noqa: F811
    need("gcc")
    env = host_free_env(real_wheel_cache)
    env["PATH"] = f"{real_tree / 'bin'}:/usr/bin:/bin"
    report = doctor.run(real_tree, inputs=real_inputs(env, tmp_path))
    by_name = {c.name: c for c in report.checks}
    assert report.release == "13.0.2" and [c.name for c in report.checks] == list(doctor_checks.ORDER)
    for name in ("toolkit", "nvcc", "host-compiler", "probe", "environment"):
        assert by_name[name].status == "ok", by_name[name]
    assert "passes CUDA 13.0.2's include/crt/host_config.h" in by_name["host-compiler"].detail
    assert by_name["driver"].status == "warn" and not report.failed


@pytest.mark.e2e
@pytest.mark.pypi
@pytest.mark.skipif(sys.platform != "linux", reason="runs the Linux tree")
def test_real_tree_refuses_a_too_new_gcc_as_nvcc_does(real_tree: Path, tmp_path: Path,
                                                      real_wheel_cache: Path) -> None:  # noqa: F811
    """A gcc that says it is version 99: host_config.h refuses it, and so does nvcc in the probe."""
    gcc = need("gcc")
    need("g++")
    fake = tmp_path / "gcc99"
    script(fake / "gcc", f'case "$1" in --version) echo "gcc (Fake) 99.1.0"; exit 0;; esac\n'
                         f'exec {gcc} -U__GNUC__ -D__GNUC__=99 "$@"\n')
    env = host_free_env(real_wheel_cache)
    env["PATH"] = f"{fake}:/usr/bin:/bin"  # the fake gcc first: nvcc's default `gcc`
    tk = check_toolkit(real_tree, host_windows=False)[1]
    assert tk is not None
    check = check_host_compiler(tk, env, windows=False)
    assert check.status == "fail" and "gcc (Fake) 99.1.0" in check.detail
    assert "unsupported GNU version! gcc versions later than 15 are not supported!" in check.detail
    # the fix is a compiler installed here that the header accepts (the real g++), never a made-up g++-13
    assert "use g++" in check.fix and "installed here, which CUDA 13.0.2's host_config.h accepts" in check.fix
    assert "export NVCC_CCBIN=/usr/bin/g++" in check.fix and "g++-13" not in check.fix
    probe = check_probe(tk, env)
    assert probe.status == "fail" and "unsupported GNU version" in probe.detail
    assert "host_config.h accepts" in probe.fix

    # the same compiler through NVCC_CCBIN, the real gcc first on PATH
    env2 = {**env, "PATH": "/usr/bin:/bin", "NVCC_CCBIN": str(fake / "gcc")}
    check = check_host_compiler(tk, env2, windows=False)
    assert check.status == "fail" and f"({fake / 'gcc'}, NVCC_CCBIN)" in check.detail
    # with -allow-unsupported-compiler nvcc gets past host_config.h: a warning with the risk, which
    # is real here (the "gcc 99" trips over libstdc++ in cudafe++: the probe still fails, later)
    env3 = {**env, "NVCC_APPEND_FLAGS": "-allow-unsupported-compiler"}
    check = check_host_compiler(tk, env3, windows=False)
    assert check.status == "warn"
    assert "-allow-unsupported-compiler is set in NVCC_APPEND_FLAGS" in check.detail
    probe = check_probe(tk, env3)
    assert probe.status == "fail" and "unsupported GNU version" not in probe.detail


@pytest.mark.e2e
@pytest.mark.pypi
@pytest.mark.skipif(sys.platform != "linux", reason="runs the Linux tree")
@pytest.mark.parametrize(("msc_ver", "status"), [pytest.param(1944, "ok", id="VS2022"),
                                                 pytest.param(1950, "fail", id="VS-too-new")])
def test_real_host_config_judges_an_msvc_version(real_tree: Path, tmp_path: Path, msc_ver: int,
                                                 status: str) -> None:
    """A cl.exe stand-in (gcc's preprocessor posing as MSVC: _WIN32, _MSC_VER, no __GNUC__) run the
    way doctor runs cl.exe, against the real header: the limit is the header's, not ours."""
    gcc = need("gcc")
    msvc = tmp_path / "msvc"
    banner = f"Microsoft (R) C/C++ Optimizing Compiler Version {msc_ver // 100}.{msc_ver % 100}.1 for x64"
    script(msvc / "cl.exe", f"""\
[ $# -eq 0 ] && {{ echo "{banner}" >&2; exit 0; }}
args=""
for a in "$@"; do
  case "$a" in
    /nologo|/EP|/TP) ;;
    /D*) args="$args -D${{a#/D}}" ;;
    /I*) args="$args -I${{a#/I}}" ;;
    *) args="$args $a" ;;
  esac
done
exec {gcc} -E -x c++ -U__GNUC__ -U__linux__ -D_WIN32 -D_MSC_VER={msc_ver} -I{msvc / "inc"} $args -o /dev/null
""")
    (msvc / "inc").mkdir()
    for crt in ("crtdefs.h", "corecrt.h"):  # MSVC's CRT headers, which host_config.h includes
        (msvc / "inc" / crt).write_text("\n")
    tk = check_toolkit(real_tree, host_windows=False)[1]
    assert tk is not None
    tk_win = Toolkit(tk.prefix, tk.release, "windows-x86_64", tk.nvcc_version, True, True, True)
    # the Windows tree's nvcc is nvcc.exe; here only the host compiler is judged
    check = check_host_compiler(tk_win, {"PATH": str(msvc)}, windows=True)
    assert check.status == status, check
    if status == "fail":
        assert "unsupported Microsoft Visual Studio version" in check.detail and "vcvars64.bat" in check.fix
    else:  # 13.0's CCCL has no traditional-preprocessor check: nothing to add
        assert "traditional preprocessor" in check.detail


@pytest.mark.e2e
@pytest.mark.pypi
@pytest.mark.skipif(sys.platform != "linux", reason="runs the Linux tree")
def test_real_tree_shadowed_by_another_nvcc(real_tree: Path, tmp_path: Path,
                                            real_wheel_cache: Path) -> None:  # noqa: F811
    other = tmp_path / "other-cuda"
    fake_nvcc(other, "12.9", "12.9.86")
    env = host_free_env(real_wheel_cache)
    env.update(PATH=f"{other / 'bin'}:{real_tree / 'bin'}:/usr/bin:/bin", CUDA_HOME=str(other))
    report = doctor.run(real_tree, inputs=real_inputs(env, tmp_path))
    envc = report.checks[-1]
    assert envc.name == "environment" and envc.status == "warn"
    assert f"CUDA_HOME={other} names another toolkit" in envc.detail
    assert f"a plain `nvcc` runs {other / 'bin' / 'nvcc'}" in envc.detail


# -- the documented schema and the action's step --------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]


def test_json_matches_the_documented_schema(tiny_tree: Path) -> None:
    import re

    text = (ROOT / "docs" / "recipes.md").read_text(encoding="utf-8")
    body = re.search(r"<!-- json: doctor -->\s*```json\n(.*?)```", text, re.S)
    assert body, "docs/recipes.md documents doctor --json"
    documented = json.loads(body.group(1))
    r = runner.invoke(app, ["doctor", "--prefix", str(tiny_tree), "--json"])
    actual = json.loads(r.stdout)
    assert list(actual) == list(documented)
    assert [list(c) for c in actual["checks"]] == [list(documented["checks"][0])] * len(doctor_checks.ORDER)
    assert {c["status"] for c in actual["checks"]} <= {"ok", "warn", "fail"}
    assert all(isinstance(c[k], str) for c in actual["checks"] for k in c)
    assert all((c["fix"] == "") == (c["status"] == "ok") for c in actual["checks"])


@pytest.mark.skipif(os.name == "nt", reason="the tiny Linux tree fails doctor on a POSIX host only (on "
                                           "Windows it is a cross tree, and doctor passes)")
@pytest.mark.parametrize(("mode", "code"), [pytest.param("report", 0, id="report"),
                                            pytest.param("fail", 1, id="fail")])
def test_action_doctor_step_fails_the_job_only_when_asked(tiny_tree: Path, mode: str, code: int) -> None:
    yaml = pytest.importorskip("yaml")
    for path in ("action.yml", "cache/action.yml"):
        action = yaml.safe_load((ROOT / path).read_text())
        assert action["inputs"]["doctor"]["default"] == "report"
        step = next(s for s in action["runs"]["steps"] if "steps.py\" doctor" in s.get("run", ""))
        assert step["if"] == "inputs.doctor != 'off'"
    env = {**os.environ, "CR_PYTHON": sys.executable, "CR_PREFIX": str(tiny_tree), "CR_DOCTOR": mode}
    r = subprocess.run([sys.executable, str(ROOT / "action" / "steps.py"), "doctor"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == code, r.stderr
    assert "fail  nvcc" in r.stdout  # the report is in the log either way (the tiny tree's nvcc is fake)
    assert ("::warning title=cudaredist doctor::" in r.stdout) == (mode == "report")
    assert ("::error title=cudaredist doctor::" in r.stdout) == (mode == "fail")


def test_kernel_module_version_from_proc(tmp_path: Path) -> None:
    proc = tmp_path / "version"
    proc.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
                    "(dvs-builder@U22-I3-AM02-24-3)  Thu Oct 30 2025\nGCC version:  gcc version 12.3.0\n")
    assert host_driver._kernel_module_version(str(proc)) == "580.159.04"
    assert host_driver._kernel_module_version(str(tmp_path / "absent")) == ""


@pytest.mark.parametrize("tree", ["native", "cross", "none"])
def test_the_environment_fix_on_windows_is_for_pwsh_and_cmd(tree: str, tmp_path: Path) -> None:
    """Not a POSIX ``eval "$(...)"`` line: what PowerShell and cmd users type."""
    prefix = tmp_path / "my cuda"
    script(prefix / "bin" / "nvcc", "exit 0\n")
    tk = {"native": toolkit_at(prefix), "none": None,
          "cross": toolkit_at(prefix, native=False, windows=True)}[tree]
    check = check_environment({"PATH": "", "CUDA_PATH": str(tmp_path / "elsewhere"),
                               "CUDA_HOME": str(tmp_path)}, tk, host_windows=True)
    assert check.status == "warn"
    assert "eval" not in check.fix
    shown = str(prefix) if tk is not None else "DIR"
    assert f"cudaredist env --prefix '{shown}' | Out-String | Invoke-Expression" in check.fix
    assert f"for /f \"delims=\" %i in ('cudaredist env --shell cmd --prefix \"{shown}\"') do %i" in check.fix
