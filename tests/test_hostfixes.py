"""Known host fixes (manifests/hostfixes.toml, cudaredist/hostfixes.py) on a small synthetic
tree: applied at install and said once, recorded with the fixed bytes (verify checks them, info
lists them), a no-op where the host does not need them, skipped (and said) where the file is not
what the fix expects, and `--no-host-fixes` keeps NVIDIA's bytes. The real headers on a real newer
host: tests/e2e/test_newer_host.py."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cudaredist import hostfixes
from cudaredist.cli import app
from tests.archives import NVCC_12, MirrorArchive, build_mirror, toolkit
from tests.hosts import posix_only, split_line

LINUX = "linux-x86_64"
H, HPP = "include/crt/math_functions.h", "include/crt/math_functions.hpp"

# What NVIDIA's CUDA < 13.2 headers hold at the places the fix changes (the texts verbatim), around
# declarations a C++ compiler reads: rsqrt and rsqrtf as CUDA declares them, without noexcept
MATH_H = b"""#if !defined(__MATH_FUNCTIONS_H__)
#define __MATH_FUNCTIONS_H__
#define __DEVICE_FUNCTIONS_DECL__
#define __device_builtin__
extern "C" {
extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ double                 rsqrt(double x);
extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ float                  rsqrtf(float x);
}
#if defined(NEVER_DEFINED)
__func__(double rsqrt(double a));
__func__(float rsqrtf(float a));
#endif
#include "math_functions.hpp"
#endif
"""
MATH_HPP = b"""#if defined(NEVER_DEFINED)
__func__(double rsqrt(const double a))
__func__(float rsqrtf(const float a))
#endif
"""
# glibc >= 2.42 as C++ sees it: rsqrt and rsqrtf declared noexcept (its __THROW)
GLIBC_242 = """#include <crt/math_functions.h>
extern "C" double rsqrt(double) noexcept(true);
extern "C" float rsqrtf(float) noexcept(true);
int main() { return 0; }
"""
# what makes the preprocessor see glibc 2.42 on an older host (features.h first, then its test)
PRETEND_242 = "#include <features.h>\n#undef __GLIBC_PREREQ\n#define __GLIBC_PREREQ(maj, min) 1\n"


def _gxx() -> str:
    """The host's g++ (Debian's CI image has it: under CI a missing one fails)."""
    found = shutil.which("g++")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("g++ is not installed although CI is set")
        pytest.skip("compiles the headers with the host's g++, which is not installed")
    return found


def _run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def _mirror(root: Path, label: str = "13.0.1", math_h: bytes = MATH_H) -> Path:
    archives = [a for a in toolkit(LINUX) if a.component != "cuda_crt"]
    archives.append(MirrorArchive("cuda_crt", LINUX, "13.0.88", {
        "include/crt/host_config.h": b"// hc", H: math_h, HPP: MATH_HPP}))
    build_mirror(root, label, archives)
    return root


def _install(mirror: Path, prefix: Path, *extra: str, train: str = "13.0") -> Result:
    r = _run("install", train, "--prefix", str(prefix), "--base-url", str(mirror), "--platform", LINUX,
             *extra)
    assert r.exit_code == 0, r.output
    return r


def _record(prefix: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((prefix / ".cudaredist" / "record.json").read_text())
    return data


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_install_applies_the_fix_says_it_once_and_records_the_fixed_bytes(tmp_path: Path) -> None:
    prefix = tmp_path / "cuda"
    r = _install(_mirror(tmp_path / "m"), prefix)
    line = f"host fix glibc-2.42-rsqrt: {H}, {HPP} changed (applies when glibc >= 2.42; --no-host-fixes"
    assert r.stderr.count("host fix glibc-2.42-rsqrt") == 1 and line in r.stderr
    fixed = (prefix / H).read_bytes()
    assert b"rsqrt(double x) _NV_RSQRT_SPECIFIER;" in fixed and b"__GLIBC_PREREQ(2,42)" in fixed
    assert b"__func__(float rsqrtf(const float a)) _NV_RSQRT_SPECIFIER" in (prefix / HPP).read_bytes()
    rec = _record(prefix)
    entries = rec["host_fixes"]
    assert isinstance(entries, list)
    assert [(e["id"], e["path"], e["before"], e["after"]) for e in entries] == [
        ("glibc-2.42-rsqrt", H, _sha(MATH_H), _sha(fixed)),
        ("glibc-2.42-rsqrt", HPP, _sha(MATH_HPP), _sha((prefix / HPP).read_bytes()))]
    assert "llvm-project#185701" in entries[0]["source"]
    files = {f["path"]: f for f in rec["files"]}  # type: ignore[attr-defined]
    assert files[H]["sha256"] == _sha(fixed) and files[H]["size"] == len(fixed)
    info = _run("info", "--prefix", str(prefix))
    assert info.exit_code == 0
    assert f"  glibc-2.42-rsqrt: {H}, {HPP} (source: CUDA 13.2's" in info.output
    assert f"{H}: sha256 {_sha(MATH_H)} -> {_sha(fixed)}" in info.output
    verify = _run("verify", "--prefix", str(prefix))
    assert verify.exit_code == 0, verify.output
    # NVIDIA's bytes put back by hand: verify sees the file changed
    (prefix / H).write_bytes(MATH_H)
    verify = _run("verify", "--prefix", str(prefix))
    assert verify.exit_code == 1
    assert f"changed  {H} (size {len(MATH_H)}, recorded {len(fixed)})" in verify.output
    # a plain install again is a no-op: the record says the fix is there
    again = _install(_mirror(tmp_path / "m"), prefix)
    assert "already installed" in again.stderr and "host fix" not in again.stderr


def test_a_hardlinked_tree_is_fixed_without_changing_the_cache(tmp_path: Path) -> None:
    prefix, cache = tmp_path / "cuda", tmp_path / "cache"
    _install(_mirror(tmp_path / "m"), prefix, "--link-mode", "hardlink", "--cache-dir", str(cache))
    assert b"_NV_RSQRT_SPECIFIER" in (prefix / H).read_bytes()
    in_cache = [p for p in cache.rglob("math_functions.h")]
    assert in_cache and all(p.read_bytes() == MATH_H for p in in_cache)
    # the other files are the cache's own (hard links), so the test would see an edit in place
    other = [p for p in cache.rglob("host_config.h")]
    assert len(other) == 1 and other[0].stat().st_ino == (prefix / "include/crt/host_config.h").stat().st_ino
    assert _run("verify", "--prefix", str(prefix)).exit_code == 0


def test_no_host_fixes_keeps_nvidias_bytes_and_either_way_round_reinstalls(tmp_path: Path) -> None:
    mirror, prefix = _mirror(tmp_path / "m"), tmp_path / "cuda"
    r = _install(mirror, prefix, "--no-host-fixes")
    assert "host fix" not in r.stderr
    assert (prefix / H).read_bytes() == MATH_H and (prefix / HPP).read_bytes() == MATH_HPP
    assert "host_fixes" not in _record(prefix)
    info = _run("info", "--prefix", str(prefix)).output
    assert "host fixes" not in info
    # the command that applies it redoes this tree's request (redo.request_argv): its platform and
    # where it came from, not a plain `install 13.0.1 --prefix P` that would ask NVIDIA's server
    notes = [ln for ln in info.splitlines()
             if ln.startswith("note: host fix glibc-2.42-rsqrt is not applied")]
    assert len(notes) == 1 and notes[0] in _run("verify", "--prefix", str(prefix)).output, info
    redo = split_line(notes[0].split("`")[1])
    assert redo[:5] == ["cudaredist", "install", "13.0.1", "--prefix", str(prefix)], redo
    assert redo[redo.index("--platform") + 1] == LINUX and "--base-url" in redo, redo
    # the same request: nothing to do
    assert "already installed" in _install(mirror, prefix, "--no-host-fixes").stderr
    # the note's command: the fix this tree lacks is applied (offline, from the tree's own files)
    r = _run(*redo[1:])
    assert r.exit_code == 0, r.output
    assert f"{prefix}: host fix glibc-2.42-rsqrt is not applied to it; updating" in r.stderr
    assert "host fix glibc-2.42-rsqrt: " in r.stderr and b"_NV_RSQRT" in (prefix / H).read_bytes()
    # and back: NVIDIA's bytes again
    r = _install(mirror, prefix, "--no-host-fixes")
    assert "it has host fix glibc-2.42-rsqrt, and --no-host-fixes keeps NVIDIA's bytes; updating" in r.stderr
    assert (prefix / H).read_bytes() == MATH_H and "host_fixes" not in _record(prefix)


def test_a_cross_tree_gets_the_fix_where_its_placement_put_the_headers(tmp_path: Path) -> None:
    """`--platform linux-sbsa --host linux-x86_64`: the tools' crt headers land under
    targets/sbsa-linux/include/crt/ (plan.placed); the fix finds them there, at install and in
    info, verify and the no-op check."""
    archives = []
    for platform in (LINUX, "linux-sbsa"):
        archives += [a for a in toolkit(platform) if a.component != "cuda_crt"]
        archives.append(MirrorArchive("cuda_crt", platform, "13.0.88", {
            "include/crt/host_config.h": b"// hc", H: MATH_H, HPP: MATH_HPP}))
    mirror, prefix = tmp_path / "m", tmp_path / "cross"
    build_mirror(mirror, "13.0.1", archives)
    cross = ("--platform", "linux-sbsa", "--host", LINUX)
    th, thpp = f"targets/sbsa-linux/{H}", f"targets/sbsa-linux/{HPP}"
    r = _run("install", "13.0", "--prefix", str(prefix), "--base-url", str(mirror), *cross, "--no-host-fixes")
    assert r.exit_code == 0, r.output
    assert (prefix / th).read_bytes() == MATH_H
    # the tree lacks the fix: info and verify say so, and the same request without the option updates it
    info = _run("info", "--prefix", str(prefix)).output
    assert "note: host fix glibc-2.42-rsqrt is not applied" in info, info
    r = _run("install", "13.0", "--prefix", str(prefix), "--base-url", str(mirror), *cross)
    assert r.exit_code == 0, r.output
    assert "host fix glibc-2.42-rsqrt is not applied to it; updating" in r.stderr
    assert f"host fix glibc-2.42-rsqrt: {th}, {thpp} changed" in r.stderr, r.stderr
    assert b"rsqrt(double x) _NV_RSQRT_SPECIFIER;" in (prefix / th).read_bytes()
    entries = _record(prefix)["host_fixes"]
    assert isinstance(entries, list) and [e["path"] for e in entries] == [th, thpp]
    assert "is not applied" not in _run("info", "--prefix", str(prefix)).output
    assert _run("verify", "--prefix", str(prefix)).exit_code == 0
    again = _run("install", "13.0", "--prefix", str(prefix), "--base-url", str(mirror), *cross)
    assert "nothing to do" in again.stderr, again.output


def test_a_fix_whose_file_no_placement_reaches_is_said() -> None:
    fix = hostfixes.fixes()[0]
    owners = [(f"opt/x/{H}", "cuda_crt"), (f"opt/x/{HPP}", "cuda_crt")]
    assert hostfixes.locate(fix, owners, {}) == (
        {}, f"the tree holds {H} at opt/x/{H}, where no component's placement puts it")
    placed = {"cuda_crt": (("include", "opt/x/include"),)}
    assert hostfixes.locate(fix, owners, placed) == ({H: f"opt/x/{H}", HPP: f"opt/x/{HPP}"}, "")
    assert hostfixes.locate(fix, [("bin/nvcc", "cuda_nvcc")], {}) == ({}, "")


def test_a_file_that_is_not_what_the_fix_expects_is_left_alone_and_said(tmp_path: Path) -> None:
    odd = MATH_H.replace(b"rsqrtf(float x);", b"rsqrtf(float x) noexcept;")
    prefix = tmp_path / "cuda"
    r = _install(_mirror(tmp_path / "m", math_h=odd), prefix, "-q")
    assert (f"note: host fix glibc-2.42-rsqrt not applied: {H} holds 0 times, not 1, the text it changes "
            "('rsqrtf(float x);')") in r.stderr  # a warning: said even with -q
    assert (prefix / H).read_bytes() == odd and (prefix / HPP).read_bytes() == MATH_HPP
    assert "host_fixes" not in _record(prefix)
    assert "already installed" in _install(_mirror(tmp_path / "m", math_h=odd), prefix).stderr


def test_a_release_that_has_nvidias_own_fix_is_not_touched(tmp_path: Path) -> None:
    prefix = tmp_path / "cuda"
    r = _install(_mirror(tmp_path / "m", label="13.2.0"), prefix, train="13.2")
    assert "host fix" not in r.stderr and (prefix / H).read_bytes() == MATH_H
    assert [f.id for f in hostfixes.for_release("13.1.1", LINUX)] == ["glibc-2.42-rsqrt"]
    assert hostfixes.for_release("13.2.0", LINUX) == []
    assert hostfixes.for_release("13.1.1", "windows-x86_64") == []


def test_a_known_release_whose_fix_gives_other_bytes_is_refused() -> None:
    fix = hostfixes.fixes()[0]
    bad = hostfixes.Fix(fix.id, fix.since, fix.before, fix.platforms, fix.condition, fix.summary, fix.source,
                        fix.edits, ((H, _sha(MATH_H), "0" * 64),))
    files = {H: MATH_H, HPP: MATH_HPP}
    assert hostfixes.plan_fix(fix, files.get)[0].keys() == {H, HPP}
    with pytest.raises(hostfixes.ManifestError, match="not the known"):
        hostfixes.plan_fix(bad, files.get)


@posix_only("compiles the headers with the host's g++")
def test_the_fixed_headers_build_against_glibc_242_and_change_nothing_on_an_older_one(tmp_path: Path) -> None:
    """Without the fix, g++ refuses glibc 2.42's noexcept rsqrt after CUDA's; with it, it builds,
    and on this host's own glibc (or any other) the declarations are NVIDIA's."""
    news, why = hostfixes.plan_fix(hostfixes.fixes()[0], {H: MATH_H, HPP: MATH_HPP}.get)
    assert not why
    (tmp_path / "pretend.h").write_text(PRETEND_242)
    (tmp_path / "t.cpp").write_text(GLIBC_242)

    def build(name: str, tree: dict[str, bytes], *flags: str) -> subprocess.CompletedProcess[str]:
        inc = tmp_path / name
        for rel, data in tree.items():
            (inc / rel).parent.mkdir(parents=True, exist_ok=True)
            (inc / rel).write_bytes(data)
        return subprocess.run([_gxx(), "-std=c++17", "-fsyntax-only", *flags, "-I", str(inc / "include"),
                               str(tmp_path / "t.cpp")], capture_output=True, text=True, cwd=tmp_path)

    pretend = ("-include", str(tmp_path / "pretend.h"))
    unfixed = build("nvidia", {H: MATH_H, HPP: MATH_HPP}, *pretend)
    assert unfixed.returncode != 0 and "different exception specifier" in unfixed.stderr
    fixed = build("fixed", news, *pretend)
    assert fixed.returncode == 0, fixed.stderr
    # the host's glibc (here older than 2.42): the fixed header declares rsqrt as NVIDIA does
    out = subprocess.run([_gxx(), "-std=c++17", "-E", "-P", "-I", str(tmp_path / "fixed" / "include"),
                          "-x", "c++", "-"], input="#include <crt/math_functions.h>\n", capture_output=True,
                         text=True, cwd=tmp_path)
    glibc = subprocess.run(["getconf", "GNU_LIBC_VERSION"], capture_output=True, text=True).stdout.split()
    old = glibc and tuple(int(x) for x in glibc[-1].split(".")[:2]) < (2, 42)
    assert ("noexcept" not in out.stdout) if old else ("noexcept(true)" in out.stdout)


# CUDA 12.x's texts for sinpi and cospi (13.0 has NVIDIA's own fix), beside rsqrt's
MATH_H_12 = MATH_H.replace(b"}\n#if defined(NEVER_DEFINED)\n", b"""\
extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ double                 sinpi(double x);
extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ float                  sinpif(float x);
extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ double                 cospi(double x);
extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ float                  cospif(float x);
}
#if defined(NEVER_DEFINED)
__func__(double sinpi(double a));
__func__(double cospi(double a));
__func__(float sinpif(float a));
__func__(float cospif(float a));
""")
MATH_HPP_12 = MATH_HPP.replace(b"#endif\n", b"""\
__func__(double sinpi(double a))
__func__(void sincospi(const double a, double *sptr, double *cptr))
__func__(float sinpif(const float a))
__func__(void sincospif(const float a, float *sptr, float *cptr))
#endif
""")
GLIBC_241 = """#include <crt/math_functions.h>
extern "C" double sinpi(double) noexcept(true);
extern "C" float cospif(float) noexcept(true);
int main() { return 0; }
"""


def test_a_12_x_tree_gets_both_fixes_in_order(tmp_path: Path) -> None:
    root, prefix = tmp_path / "m", tmp_path / "cuda"
    archives = [a for a in toolkit(LINUX) if a.component in NVCC_12]
    for a in archives:  # before 13.0 the crt headers are cuda_nvcc's
        if a.component == "cuda_nvcc":
            a.members = {**a.members, H: MATH_H_12, HPP: MATH_HPP_12}
    build_mirror(root, "12.9.1", archives)
    r = _install(root, prefix, train="12.9")
    assert r.stderr.index("host fix glibc-2.42-rsqrt: ") < r.stderr.index("host fix glibc-2.41-sinpi-cospi: ")
    entries = _record(prefix)["host_fixes"]
    assert isinstance(entries, list)
    assert [(e["id"], e["path"]) for e in entries] == [
        ("glibc-2.42-rsqrt", H), ("glibc-2.42-rsqrt", HPP), ("glibc-2.41-sinpi-cospi", H),
        ("glibc-2.41-sinpi-cospi", HPP)]
    assert entries[0]["after"] == entries[2]["before"]  # the second fix changed what the first left
    assert entries[2]["after"] == _sha((prefix / H).read_bytes())
    assert _run("verify", "--prefix", str(prefix)).exit_code == 0


@posix_only("compiles the headers with the host's g++")
def test_the_12_x_headers_build_against_glibc_241_with_the_fix(tmp_path: Path) -> None:
    tree = {H: MATH_H_12, HPP: MATH_HPP_12}
    for fix in hostfixes.for_release("12.9.1", LINUX):
        news, why = hostfixes.plan_fix(fix, tree.get)
        assert not why
        tree = tree | news
    # 2.42 is also >= 2.41; and its C23 maths, as g++'s _GNU_SOURCE gives with glibc >= 2.40
    c23 = "#undef __GLIBC_USE_ISOC23\n#define __GLIBC_USE_ISOC23 1\n"
    (tmp_path / "pretend.h").write_text(PRETEND_242 + c23)
    (tmp_path / "t.cpp").write_text(GLIBC_241)
    for name, files in (("nvidia", {H: MATH_H_12, HPP: MATH_HPP_12}), ("fixed", tree)):
        for rel, data in files.items():
            (tmp_path / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / rel).write_bytes(data)
    cmd = [_gxx(), "-std=c++17", "-fsyntax-only", "-include", str(tmp_path / "pretend.h"),
           str(tmp_path / "t.cpp"), "-I"]
    unfixed = subprocess.run([*cmd, str(tmp_path / "nvidia" / "include")], capture_output=True, text=True)
    assert unfixed.returncode != 0 and "different exception specifier" in unfixed.stderr
    fixed = subprocess.run([*cmd, str(tmp_path / "fixed" / "include")], capture_output=True, text=True)
    assert fixed.returncode == 0, fixed.stderr


_GOOD_FIX = """[[fix]]
id = "one"
since = "11.0"
before = "13.2"
condition = "c"
summary = "s"
source = "x"
"""
_GOOD_EDIT = '[[fix.edit]]\nfile = "include/a.h"\nfind = "a"\nreplace = "b"\n'


@pytest.mark.parametrize(("text", "words"), [
    pytest.param("[[fix]\n", "cannot read", id="not-toml"),
    pytest.param("fix = 3\n", "[[fix]] must be an array of tables", id="fix-not-an-array"),
    pytest.param("fix = [3]\n", "each [[fix]] must be a table", id="fix-not-a-table"),
    pytest.param(_GOOD_FIX, "(fix one): a fix needs at least one [[fix.edit]]", id="no-edit"),
    pytest.param(_GOOD_FIX + _GOOD_EDIT.replace('replace = "b"', 'replace = "b"\ncount = 0'),
                 "(fix one): an edit's count must be a positive number", id="count-zero"),
    pytest.param(_GOOD_FIX + 'edit = ["include/a.h"]\n', "(fix one): each [[fix.edit]] must be a table",
                 id="edit-not-a-table"),
    pytest.param(_GOOD_FIX + _GOOD_EDIT.replace('find = "a"\n', ""),
                 "(fix one): 'find' must be a non-empty string", id="edit-without-find"),
    pytest.param(_GOOD_FIX.replace('condition = "c"\n', "") + _GOOD_EDIT,
                 "(fix one): 'condition' must be a non-empty string", id="fix-without-condition"),
    pytest.param(_GOOD_FIX.replace('"x"\n', '"x"\nplatforms = "linux-x86_64"\n') + _GOOD_EDIT,
                 "(fix one): platforms must be a list of names", id="platforms-a-string"),
    pytest.param(_GOOD_FIX.replace('"x"\n', '"x"\nknown = ["include/a.h"]\n') + _GOOD_EDIT,
                 "(fix one): each [[fix.known]] must be a table", id="known-not-a-table"),
    pytest.param(_GOOD_FIX.replace('"x"\n', '"x"\nknown = "include/a.h"\n') + _GOOD_EDIT,
                 "(fix one): each [[fix.known]] must be a table", id="known-a-string"),
    pytest.param((_GOOD_FIX + _GOOD_EDIT) * 2, "two fixes have the same id", id="same-id-twice"),
])
def test_a_malformed_hostfixes_toml_is_one_manifest_error_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, words: str) -> None:
    """The loader given a hostfixes.toml that is not TOML or not the schema: a ManifestError of one line
    that names the file (and the fix), never an AttributeError from inside the loader."""
    (tmp_path / hostfixes.FILE).write_text(text)
    monkeypatch.setattr(hostfixes, "data_dir", lambda: tmp_path)
    hostfixes.fixes.cache_clear()
    try:
        with pytest.raises(hostfixes.ManifestError) as info:
            hostfixes.fixes()
    finally:
        hostfixes.fixes.cache_clear()  # the next test reads the real file again
    said = str(info.value)
    assert said.startswith(str(tmp_path / hostfixes.FILE)) or said.startswith("cannot read"), said
    assert words in said and str(tmp_path / hostfixes.FILE) in said and "\n" not in said, said


def test_a_well_formed_hostfixes_toml_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / hostfixes.FILE).write_text(_GOOD_FIX + _GOOD_EDIT)
    monkeypatch.setattr(hostfixes, "data_dir", lambda: tmp_path)
    hostfixes.fixes.cache_clear()
    try:
        (fix,) = hostfixes.fixes()
    finally:
        hostfixes.fixes.cache_clear()
    assert (fix.id, fix.files, fix.platforms, fix.known) == ("one", ("include/a.h",), (), ())
