"""hostcc: the host compilers installed here, judged by a tree's own crt/host_config.h, and the choice.

Linux: fake g++-14/15/16 (and clang++) on a temp PATH, each the real g++ posing as that GCC
(``-D__GNUC__=N``), so the header's ``#if __GNUC__ > N`` decides. Windows, on this Linux host: the
fake Visual Studio layout of tests/fakevs.py (two installs, toolsets 14.50, 14.44, 14.43, vswhere),
each cl.exe clang in cl mode posing as that MSVC; with real host_config.h files from NVIDIA's
wheels (CUDA 13.0, 13.2, 13.4) in the e2e tests at the end.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudaredist import hostcc, msvc
from cudaredist.doctor.checks import Toolkit
from cudaredist.doctor.compiler import check_host_compiler, check_probe
from cudaredist.envexport import environment
from cudaredist.errors import UsageError
from tests.fakevs import build_layout, need_tool
from tests.hosts import posix_only
from tests.realmirror import host_free_env, real_wheel_cache, run_cudaredist, scratch  # noqa: F401  (fixture)

pytestmark = posix_only("fake compilers are shell scripts on a ':'-separated PATH")

HEADER = """\
#if defined(__CUDACC__) && defined(__GNUC__) && !defined(__clang__)
#if __GNUC__ > {limit}
#error -- unsupported GNU version! gcc versions later than {limit} are not supported! The nvcc flag \
'-allow-unsupported-compiler' can be used to override this version check.
#endif
#endif
#if defined(_MSC_VER)
#if _MSC_VER < 1920 || _MSC_VER >= {msc}
#error -- unsupported Microsoft Visual Studio version! Only the versions between 2019 and 2022 are supported!
#endif
#include <crtdefs.h>
#include <corecrt.h>
#endif
"""


def tree(tmp_path: Path, limit: int = 15, msc: int = 1950) -> Path:
    include = tmp_path / "tree" / "include"
    (include / "crt").mkdir(parents=True, exist_ok=True)
    (include / "crt" / "host_config.h").write_text(HEADER.format(limit=limit, msc=msc))
    return include


def fake_gcc(bindir: Path, *versions: int, default: int | None = None) -> Path:
    """g++-N for each version (the real g++ posing as GCC N); ``default``: gcc and g++ link to it."""
    gxx = need_tool("g++")
    bindir.mkdir(parents=True, exist_ok=True)
    for v in versions:
        p = bindir / f"g++-{v}"
        p.write_text(f'#!/bin/sh\ncase "$1" in -dumpversion) echo {v}; exit 0;; esac\n'
                     f'exec {gxx} -U__GNUC__ -D__GNUC__={v} "$@"\n')
        p.chmod(0o755)
    if default is not None:
        for name in ("gcc", "g++"):
            (bindir / name).symlink_to(f"g++-{default}")
    return bindir


def linux_env(bindir: Path) -> dict[str, str]:
    return {"PATH": str(bindir)}  # only the fakes: /bin and /usr/bin hold the real g++


# -- Linux --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("limit", "chosen"), [
    pytest.param(15, "g++-15", id="13.2-like: g++-16 refused, g++-15 chosen"),
    pytest.param(14, "g++-14", id="g++-14 is the newest accepted"),
    pytest.param(16, None, id="the default g++-16 works: nothing changes"),
])
def test_the_newest_installed_that_the_header_accepts(tmp_path: Path, limit: int, chosen: str | None) -> None:
    bindir = fake_gcc(tmp_path / "bin", 14, 15, 16, default=16)
    choice = hostcc.choose(tree(tmp_path, limit), linux_env(bindir), windows=False, release="13.2.1")
    if chosen is None:
        assert choice.compiler is None and choice.variables == () and choice.quiet
        assert "nvcc's default, gcc 16" in choice.reason and "passes" in choice.reason
        return
    path = str(bindir / chosen)
    assert choice.compiler is not None and choice.compiler.path == path and not choice.quiet
    assert choice.variables == (("NVCC_CCBIN", path), ("CUDAHOSTCXX", path)) and choice.prepend == ()
    assert choice.reason == (
        f"host compiler: {chosen} ({path}): nvcc's default, gcc 16 ({bindir / 'gcc'}), is refused by CUDA "
        f"13.2.1's host_config.h (\"unsupported GNU version! gcc versions later than {limit} are not "
        f"supported!\"); {chosen} is the newest installed that CUDA 13.2.1's host_config.h accepts")


def test_none_accepted_sets_nothing_and_says_so(tmp_path: Path) -> None:
    bindir = fake_gcc(tmp_path / "bin", 14, 15, 16, default=16)
    choice = hostcc.choose(tree(tmp_path, 13), linux_env(bindir), windows=False)
    assert choice.compiler is None and choice.variables == () and not choice.quiet
    assert "none of the" in choice.reason and "cudaredist doctor" in choice.reason


def test_what_the_user_named_is_kept_unless_refused_and_off_turns_it_off(tmp_path: Path) -> None:
    """Finding 3: NVCC_CCBIN or -ccbin that the tree accepts is kept; one it refuses is replaced by one
    it accepts, said in one line with the way to keep it; CUDAHOSTCXX alone is CMake's, not nvcc's."""
    bindir = fake_gcc(tmp_path / "bin", 15, 16, default=16)
    include = tree(tmp_path, 15)
    g15, g16 = str(bindir / "g++-15"), str(bindir / "g++-16")
    kept = hostcc.choose(include, {**linux_env(bindir), "NVCC_CCBIN": g15}, windows=False)
    assert kept.compiler is None and kept.quiet and kept.accepted and kept.variables == ()
    assert kept.reason == f"host compiler: {g15} (NVCC_CCBIN) passes the tree's host_config.h; kept"
    for named, extra in (({"NVCC_CCBIN": g16}, {}),
                         ({"NVCC_APPEND_FLAGS": f"-O2 -ccbin {g16} --sysroot=/sr"},
                          {"NVCC_APPEND_FLAGS": "-O2 --sysroot=/sr"}),
                         ({"CUDAHOSTCXX": g16}, {})):  # nvcc never reads CUDAHOSTCXX: gcc 16 still runs
        choice = hostcc.choose(include, {**linux_env(bindir), **named}, windows=False)
        assert dict(choice.variables) == {"NVCC_CCBIN": g15, "CUDAHOSTCXX": g15, **extra}, named
        assert not choice.quiet and choice.accepted
        assert "is refused by the tree's host_config.h" in choice.reason
        assert ("keeps yours" in choice.reason) == ("CUDAHOSTCXX" not in named), choice.reason
    # CMake's CUDAHOSTCXX, accepted, is kept while nvcc's refused default is replaced
    cmake = hostcc.choose(include, {**linux_env(bindir), "CUDAHOSTCXX": g15}, windows=False)
    assert dict(cmake.variables) == {"NVCC_CCBIN": g15}
    # -allow-unsupported-compiler: the user's refused compiler is kept, and said
    allowed = hostcc.choose(include, {**linux_env(bindir), "NVCC_CCBIN": g16,
                                      "NVCC_APPEND_FLAGS": "-allow-unsupported-compiler"}, windows=False)
    assert allowed.variables == () and "kept: -allow-unsupported-compiler is set in NVCC_APPEND_FLAGS" in \
        allowed.reason
    assert hostcc.choose(include, linux_env(bindir), windows=False, mode="off") == hostcc.Choice(None, "")
    # a compiler named by --host-compiler is used as it is, and the header's verdict said
    named = hostcc.choose(include, linux_env(bindir), windows=False, mode="g++-16")
    assert named.compiler is not None and named.compiler.path == str(bindir / "g++-16")
    assert "named by --host-compiler" in named.reason and "refuses it" in named.reason
    with pytest.raises(UsageError, match="no such compiler"):
        hostcc.choose(include, linux_env(bindir), windows=False, mode="g++-99")


def test_a_ccbin_beside_an_unclosed_quote_is_taken_out_as_nvccs_flags_were_read(tmp_path: Path) -> None:
    """NVCC_APPEND_FLAGS that shlex cannot split (an unclosed quote) naming a refused compiler: the
    flags are read as select_host_compiler read them (split on spaces), -ccbin taken out; no ValueError."""
    bindir = fake_gcc(tmp_path / "bin", 15, 16, default=16)
    g15, g16 = str(bindir / "g++-15"), str(bindir / "g++-16")
    env = {**linux_env(bindir), "NVCC_APPEND_FLAGS": f'-ccbin {g16} -Xcompiler "-O2'}
    choice = hostcc.choose(tree(tmp_path, 15), env, windows=False)
    assert dict(choice.variables) == {"NVCC_CCBIN": g15, "CUDAHOSTCXX": g15,
                                      "NVCC_APPEND_FLAGS": "-Xcompiler '\"-O2'"}, choice


def test_discovery_order_and_links(tmp_path: Path) -> None:
    bindir = fake_gcc(tmp_path / "bin", 14, 15, default=14)
    clang = bindir / "clang++-19"
    clang.write_text("#!/bin/sh\nexit 0\n")
    clang.chmod(0o755)
    found = hostcc.linux_compilers({"PATH": str(bindir)})
    # g++ (a link to g++-14) is listed once, by its suffixed name; g++ before clang++, newest first
    assert [c.name for c in found] == ["g++-15", "g++-14", "clang++-19"]
    assert [c.version for c in found] == [(15,), (14,), (19,)]


def test_ccache_masquerade_wrappers_are_judged_by_their_names(tmp_path: Path) -> None:
    """Finding 6: every g++-N in ccache's folder links to ccache; each is still its own compiler, so
    the accepted g++-15 behind ccache is chosen, by its ccache path."""
    real = fake_gcc(tmp_path / "real", 14, 15, 16, default=16)
    masq = tmp_path / "ccache"
    masq.mkdir()
    (tmp_path / "ccache-bin").write_text(f'#!/bin/sh\nexec "{real}/${{0##*/}}" "$@"\n')
    (tmp_path / "ccache-bin").chmod(0o755)
    for name in ("gcc", "g++", "g++-14", "g++-15", "g++-16"):
        (masq / name).symlink_to(tmp_path / "ccache-bin")
    env = {"PATH": f"{masq}:{real}"}
    found = hostcc.linux_compilers(env)
    assert {str(masq / n) for n in ("g++", "g++-14", "g++-15", "g++-16")} <= {c.path for c in found}
    choice = hostcc.choose(tree(tmp_path, 15), env, windows=False)
    assert choice.compiler is not None and choice.compiler.path == str(masq / "g++-15"), choice.reason
    assert dict(choice.candidates)["g++-16"].startswith("refused: unsupported GNU version")


def test_env_exports_the_choice(tmp_path: Path) -> None:
    """envexport: the choice's variables after the tree's; a Linux tree gets no CMake -T."""
    bindir = fake_gcc(tmp_path / "bin", 15, 16, default=16)
    choice = hostcc.choose(tree(tmp_path, 15), linux_env(bindir), windows=False, release="13.2.1")
    env = environment("/opt/cuda", platform="linux-x86_64", release="13.2.1", host_windows=False,
                      host_compiler=choice)
    assert dict(env.variables)["NVCC_CCBIN"] == str(bindir / "g++-15")
    assert env.notes == (choice.reason,) and env.cmake_args == ()


# -- doctor: the fix that works here -------------------------------------------------------------
def tk_of(include: Path, *, windows: bool = False, release: str = "13.0.2") -> Toolkit:
    return Toolkit(include.parent, release, "windows-x86_64" if windows else "linux-x86_64", "13.0.88",
                   True, True, windows)


def test_doctor_advises_an_installed_compiler_never_one_that_is_not(tmp_path: Path) -> None:
    bindir = fake_gcc(tmp_path / "bin", 14, 15, 16, default=16)
    tk = tk_of(tree(tmp_path, 15))
    check = check_host_compiler(tk, linux_env(bindir), windows=False)
    assert check.status == "fail" and "later than 15" in check.detail
    assert f"export NVCC_CCBIN={bindir / 'g++-15'}" in check.fix and "g++-13" not in check.fix
    # nothing installed passes: the package that installs one the header accepts
    only16 = fake_gcc(tmp_path / "only16", 16, default=16)
    fix = check_host_compiler(tk, linux_env(only16), windows=False).fix
    assert "apt-get install g++-15" in fix and "NVCC_CCBIN=/usr/bin/g++-15" in fix
    assert hostcc.gcc_limit(tk.prefix / "include") == 15


def test_doctor_judges_the_shell_against_the_decision(tmp_path: Path) -> None:
    """Finding 3: a refused NVCC_CCBIN or CUDAHOSTCXX-only shell gets a fix that `cudaredist env`
    carries out; CUDAREDIST_HOST_COMPILER is the decision's too (finding 10: a bad one is the variable's
    error); a shell that lacks what env sets is told."""
    bindir = fake_gcc(tmp_path / "bin", 14, 15, 16, default=16)
    tk = tk_of(tree(tmp_path, 15))
    g15, g16 = bindir / "g++-15", str(bindir / "g++-16")
    for named in ({"NVCC_CCBIN": g16}, {"CUDAHOSTCXX": g16}):
        chosen = hostcc.choose(tk.prefix / "include", {**linux_env(bindir), **named}, windows=False)
        assert dict(chosen.variables).get("NVCC_CCBIN") == str(g15), chosen.reason  # env exports it ...
        check = check_host_compiler(tk, {**linux_env(bindir), **named}, windows=False)
        assert check.status == "fail" and "`cudaredist env` exports it as NVCC_CCBIN" in check.fix, check
    check = check_host_compiler(tk, linux_env(bindir) | {"CUDAREDIST_HOST_COMPILER": "g++-14"}, windows=False)
    assert "use g++-14" in check.fix, check.fix
    check = check_host_compiler(tk, {**linux_env(bindir), "NVCC_CCBIN": str(g15),
                                     "CUDAREDIST_HOST_COMPILER": "g++-14"}, windows=False)
    assert check.status == "ok" and f"`cudaredist env` sets NVCC_CCBIN={bindir / 'g++-14'}" in check.detail
    check = check_host_compiler(tk, {**linux_env(bindir), "CUDAREDIST_HOST_COMPILER": "junk"}, windows=False)
    assert check.status == "fail" and check.detail.startswith("CUDAREDIST_HOST_COMPILER=junk: no such")
    assert "--host-compiler junk" not in check.detail
    for keyword, chosen in (("OFF", None), ("Auto", str(g15))):  # keywords in any case, not compiler names
        choice = hostcc.for_tree(tk.prefix, platform="linux-x86_64", release="13.0.2", host_windows=False,
                                 env={**linux_env(bindir), "CUDAREDIST_HOST_COMPILER": keyword})
        assert choice is not None and dict(choice.variables).get("NVCC_CCBIN") == chosen, keyword


@pytest.mark.parametrize(("output", "detail", "fix"), [
    pytest.param("/usr/include/x86_64-linux-gnu/bits/mathcalls.h(206): error: exception specification is "
                 "incompatible with that of previous function \"rsqrt\" (declared at line 629 of "
                 "/t/include/crt/math_functions.h)", "glibc 2.41", "--reinstall", id="glibc-rsqrt"),
    pytest.param("preprocessor.h(23): fatal error C1189: #error:  MSVC/cl.exe with traditional preprocessor "
                 "is used.", "/Zc:preprocessor", "-Xcompiler=/Zc:preprocessor", id="traditional-cpp"),
    pytest.param("host_config.h(164): fatal error C1189: #error:  -- unsupported GNU version! gcc versions "
                 "later than 15 are not supported!", "outside the range", "NVCC_CCBIN=", id="host-config"),
])
def test_a_failed_probe_is_explained_with_a_concrete_fix(tmp_path: Path, output: str, detail: str,
                                                         fix: str) -> None:
    bindir = fake_gcc(tmp_path / "bin", 15, 16, default=16)
    include = tree(tmp_path, 15)
    nvcc = include.parent / "bin" / "nvcc"
    nvcc.parent.mkdir()
    (tmp_path / "out.txt").write_text(output)
    nvcc.write_text(f"#!/bin/sh\n/bin/cat {tmp_path / 'out.txt'} >&2\nexit 2\n")
    nvcc.chmod(0o755)
    # the tree's record: the reinstall line redoes its request (redo.request_argv), profile and all
    record = {"plan": {"release": "13.0.2", "platform": "linux-x86_64", "profile": "build",
                       "source": "nvidia", "base_url": "https://mirror.example/redist/"}, "request": {}}
    check = check_probe(dataclasses.replace(tk_of(include), record=record), linux_env(bindir))
    assert check.status == "fail" and detail in check.detail and fix in check.fix, check
    assert "above" not in check.fix
    if "rsqrt" in output:
        assert (f"cudaredist install 13.0.2 --prefix {include.parent} --platform linux-x86_64 --base-url "
                "https://mirror.example/redist/ --profile build --reinstall") in check.fix, check.fix
        assert "13.2 or later" in check.fix


def test_a_probe_failure_with_an_accepted_compiler_advises_no_other(tmp_path: Path) -> None:
    """nvcc failed running a compiler the header takes: another compiler is no fix."""
    bindir = fake_gcc(tmp_path / "bin", 15, 16, default=15)
    include = tree(tmp_path, 15)
    nvcc = include.parent / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text('#!/bin/sh\necho "nvcc fatal   : Failed to preprocess host compiler properties." >&2\n'
                    'exit 1\n')
    nvcc.chmod(0o755)
    check = check_probe(tk_of(include), linux_env(bindir))
    assert check.status == "fail" and "nvcc cannot start its host compiler" in check.detail
    assert "passes the tree's host_config.h" in check.fix and "-v probe.cu" in check.fix
    assert "use g++" not in check.fix


def test_a_probe_that_cannot_find_cudart_dll_at_run_time(tmp_path: Path) -> None:
    """On a Windows host the probe also runs: a missing cudart64_*.dll names the tree's DLL folder."""
    include = tree(tmp_path, 15)
    bindir = include.parent / "bin"
    bindir.mkdir()
    (bindir / "nvcc.exe").write_text('#!/bin/sh\nprintf \'#!/bin/sh\\necho "cudart64_13.dll was not found"'
                                     '\\nexit 53\\n\' > probe.exe\nchmod +x probe.exe\n')
    (bindir / "nvcc.exe").chmod(0o755)
    check = check_probe(tk_of(include, windows=True, release="13.0.2"), {"PATH": "/usr/bin:/bin"},
                        host_windows=True)
    assert check.status == "fail" and "cudart64_*.dll" in check.detail, check
    assert "cudaredist env" in check.fix


# -- Windows, on this host: the fake Visual Studio layout ---------------------------------------
@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return build_layout(tmp_path_factory.mktemp("vs"))


def test_toolsets_of_every_visual_studio(layout: dict[str, str]) -> None:
    found = hostcc.installed(layout, windows=True)
    assert [c.toolset.version for c in found if c.toolset] == ["14.50.35717", "14.44.35207", "14.43.34808"]
    assert found[0].name == "MSVC 14.50.35717 (Visual Studio Enterprise 2026)"
    assert found[0].toolset is not None and found[0].toolset.generator == "Visual Studio 18 2026"
    assert found[2].toolset is not None and found[2].toolset.generator == "Visual Studio 17 2022"


@pytest.mark.parametrize(("msc", "short"), [pytest.param(1950, "14.44", id="13.0-like: refuses 14.50"),
                                             pytest.param(1960, "14.50", id="13.2-like: takes 14.50")])
def test_the_msvc_toolset_and_its_environment(tmp_path: Path, layout: dict[str, str], msc: int,
                                              short: str) -> None:
    include = tree(tmp_path, msc=msc)
    env = {**layout, "PATH": "/usr/bin:/bin"}  # no cl.exe on PATH: a plain shell on a runner
    choice = hostcc.choose(include, env, windows=True, release="13.0.2")
    ts = choice.toolset
    assert ts is not None and ts.short == short and ts.vs_name == "Visual Studio Enterprise 2026"
    assert "nvcc finds no cl.exe on PATH" in choice.reason
    if short == "14.44":  # the newer toolset's refusal is said
        assert ("MSVC 14.50.35717 (Visual Studio Enterprise 2026) is refused by CUDA 13.0.2's host_config.h "
                '("unsupported Microsoft Visual Studio version!') in choice.reason
    got = dict(choice.variables)
    cl = os.path.join(ts.root, "bin", "Hostx64", "x64", "cl.exe")
    assert got["NVCC_CCBIN"] == cl and got["CUDAHOSTCXX"] == cl and got["VCToolsVersion"] == ts.version
    assert got["VCToolsInstallDir"] == os.path.join(ts.root, "")
    assert got["WindowsSDKVersion"] == "10.0.26100.0\\"
    prepend = dict(choice.prepend)
    sdk = Path(layout["ProgramFiles(x86)"]) / "Windows Kits" / "10" / "Include" / "10.0.26100.0"
    assert prepend["PATH"][0] == os.path.dirname(cl)
    assert prepend["INCLUDE"] == (os.path.join(ts.root, "include"), str(sdk / "ucrt"), str(sdk / "shared"),
                                  str(sdk / "um"))
    assert prepend["LIB"][0] == os.path.join(ts.root, "lib", "x64")
    out = environment("C:\\cuda", platform="windows-x86_64", release="13.0.2", host_windows=True,
                      host_compiler=choice)
    assert out.cmake_args == ("-T", f"version={short}")
    assert f'cmake -G "Visual Studio 18 2026" -T version={short}' in out.notes[1]
    assert out.notes[2].endswith(f"vcvars64.bat -vcvars_ver={short}")
    assert dict(out.prepend)["PATH"][:2] == ("C:\\cuda\\bin", "C:\\cuda\\bin\\x64")  # the tree's first


def prompt_env(layout: dict[str, str]) -> dict[str, str]:
    """VS 2026's developer prompt: its newest toolset's cl.exe on PATH, its INCLUDE set."""
    newest = hostcc.installed(layout, windows=True)[0]
    assert newest.toolset is not None
    prepend = dict(msvc.toolset_environment(newest.toolset, layout)[1])
    return {**layout, "PATH": f"{os.path.dirname(newest.path)}:/usr/bin:/bin",
            "INCLUDE": os.pathsep.join(prepend["INCLUDE"])}


def test_a_default_cl_on_path_that_is_refused(tmp_path: Path, layout: dict[str, str]) -> None:
    """A developer prompt of VS 2026 (cl.exe 14.50 on PATH) and a tree that refuses it: 14.44."""
    include = tree(tmp_path, msc=1950)
    env = prompt_env(layout)
    choice = hostcc.choose(include, env, windows=True)
    assert choice.toolset is not None and choice.toolset.short == "14.44"
    assert "nvcc's default, cl.exe 14.50.35717" in choice.reason and "is refused" in choice.reason
    # --host-compiler 14.43 picks that toolset; one that is not installed is refused with the list
    named = hostcc.choose(include, layout, windows=True, mode="14.43")
    assert named.toolset is not None and named.toolset.version == "14.43.34808"
    with pytest.raises(UsageError, match="14.50.35717, 14.44.35207, 14.43.34808"):
        hostcc.choose(include, layout, windows=True, mode="14.29")


def test_doctor_names_the_side_by_side_toolset(tmp_path: Path, layout: dict[str, str]) -> None:
    include = tree(tmp_path, msc=1950)
    env = prompt_env(layout)
    check = check_host_compiler(tk_of(include, windows=True), env, windows=True)
    assert check.status == "fail" and "unsupported Microsoft Visual Studio version" in check.detail
    assert "use MSVC 14.44.35207 (Visual Studio Enterprise 2026), installed here" in check.fix
    assert "vcvars64.bat -vcvars_ver=14.44" in check.fix and "-T version=14.44" in check.fix
    assert "toolset: 14.44" in check.fix and "install a Visual Studio" not in check.fix


# -- real host_config.h files: CUDA 13.0, 13.2 and 13.4 from NVIDIA's wheels ----------------------
@pytest.fixture(scope="module")
def real_headers(tmp_path_factory: pytest.TempPathFactory,
                 real_wheel_cache: Path) -> Iterator[dict[str, Path]]:  # noqa: F811
    """Each train's windows-x86_64 cuda_crt (its include/crt/host_config.h), installed from the wheels."""
    with scratch(tmp_path_factory, "crt") as tmp:
        out = {}
        for train in ("13.0", "13.2", "13.4", "13.5"):
            prefix = tmp / train
            r = run_cudaredist("install", train, "--source", "pypi", "--platform", "windows-x86_64", "--only",
                               "--component", "cuda_crt", "--prefix", str(prefix), "-q",
                               env=host_free_env(real_wheel_cache))
            assert r.returncode == 0, r.stderr
            out[train] = prefix / "include"
        yield out


@pytest.mark.e2e
@pytest.mark.pypi
@pytest.mark.skipif(sys.platform != "linux", reason="clang in cl mode on a Linux host")
@pytest.mark.parametrize(("train", "short"), [pytest.param("13.0", "14.44", id="13.0"),
                                              pytest.param("13.2", "14.50", id="13.2"),
                                              pytest.param("13.4", "14.50", id="13.4"),
                                              pytest.param("13.5", "14.50", id="13.5")])
def test_real_headers_choose_the_toolset(real_headers: dict[str, Path], layout: dict[str, str], train: str,
                                         short: str) -> None:
    choice = hostcc.choose(real_headers[train], {**layout, "PATH": "/usr/bin:/bin"}, windows=True,
                           release=train)
    assert choice.toolset is not None and choice.toolset.short == short, choice.reason
    refused = [c.toolset.short for c in hostcc.installed(layout, windows=True)
               if c.toolset and not hostcc.judge(c, real_headers[train], layout).accepted]
    assert refused == (["14.50"] if train == "13.0" else [])


@pytest.mark.e2e
@pytest.mark.pypi
def test_real_135_header_takes_gcc_16(tmp_path: Path, real_wheel_cache: Path) -> None:  # noqa: F811
    """CUDA 13.5's host_config.h (13.5.37's crt): gcc up to 16 (13.0-13.4: 15), clang below 23, MSVC
    below 1960; hostcc reads none of it, it asks the header."""
    prefix = tmp_path / "crt135"
    r = run_cudaredist("install", "13.5", "--source", "pypi", "--platform", "linux-x86_64", "--only",
                       "--component", "cuda_crt", "--prefix", str(prefix), "-q",
                       env=host_free_env(real_wheel_cache))
    assert r.returncode == 0, r.stderr
    assert hostcc.gcc_limit(prefix / "include") == 16
    bindir = fake_gcc(tmp_path / "bin", 15, 16, 17, default=17)
    choice = hostcc.choose(prefix / "include", linux_env(bindir), windows=False, release="13.5.0")
    assert choice.compiler is not None and choice.compiler.name == "g++-16", choice.reason
    verdicts = dict(choice.candidates)
    assert "later than 16 are not supported" in verdicts[f"nvcc's default, gcc 17 ({bindir}/gcc)"]


# -- the commands: env and run -------------------------------------------------------------------
def test_env_and_run_export_the_choice(mirror: Path, tmp_path: Path) -> None:
    """A managed 13.0.1 tree whose host_config.h takes gcc up to 15, with gcc 16 the default: `env`
    says so and exports g++-15, `run` gives it to the command; --host-compiler off / the variable."""
    bindir = fake_gcc(tmp_path / "bin", 14, 15, 16, default=16)
    root = tmp_path / "toolkits"
    base = {**host_free_env(tmp_path / "cache"), "CUDAREDIST_INSTALL_DIR": str(root)}
    r = run_cudaredist("install", "13.0", "--base-url", str(mirror), "--platform", "linux-x86_64", "-q",
                       env=base)
    assert r.returncode == 0, r.stderr
    prefix = next(root.glob("cuda-13.0.1-*"))
    (prefix / "include" / "crt" / "host_config.h").write_text(HEADER.format(limit=15, msc=1950))
    env = {**base, "PATH": f"{bindir}:/usr/bin:/bin"}
    r = run_cudaredist("env", "13.0", env=env)
    assert r.returncode == 0, r.stderr
    assert f"export NVCC_CCBIN='{bindir / 'g++-15'}'\nexport CUDAHOSTCXX='{bindir / 'g++-15'}'\n" in r.stdout
    assert r.stderr.startswith("note: host compiler: g++-15") and "gcc 16" in r.stderr
    r = run_cudaredist("run", "13.0", "--", "sh", "-c", 'echo "$NVCC_CCBIN"', env=env)
    assert r.returncode == 0 and r.stdout.strip() == str(bindir / "g++-15"), r.stderr
    for off in (["--host-compiler", "off"], []):
        given = {} if off else {"CUDAREDIST_HOST_COMPILER": "off"}
        r = run_cudaredist("env", "13.0", *off, env=env | given)
        assert r.returncode == 0 and "NVCC_CCBIN" not in r.stdout and "host compiler" not in r.stderr
    r = run_cudaredist("run", "13.0", "--host-compiler", "off", "--", "sh", "-c", 'echo "[$NVCC_CCBIN]"',
                       env=env)
    assert r.stdout.strip() == "[]", r.stderr
    r = run_cudaredist("env", "13.0", "--host-compiler", "g++-99", env=env)
    assert r.returncode == 2 and "--host-compiler g++-99: no such compiler" in r.stderr
    # finding 10: the variable is reported as itself; OFF and Auto are keywords in any case
    r = run_cudaredist("env", "13.0", env=env | {"CUDAREDIST_HOST_COMPILER": "junk"})
    assert r.returncode == 2 and "CUDAREDIST_HOST_COMPILER=junk: no such compiler" in r.stderr, r.stderr
    assert "--host-compiler" not in r.stderr.split(":")[0]
    for keyword in ("OFF", "Auto"):
        r = run_cudaredist("env", "13.0", env=env | {"CUDAREDIST_HOST_COMPILER": keyword})
        assert r.returncode == 0 and ("NVCC_CCBIN" in r.stdout) == (keyword == "Auto"), (keyword, r.stderr)
    assert "Traceback" not in r.stderr
