"""The CLI on a Windows host, driven as a Windows runner drives it, with real NVIDIA binaries.

Runs only under a Windows CPython (``sys.platform == "win32"``): in CI that is the official Windows
CPython 3.13 under Wine, started by ``tests/test_windows_host.py`` with the project's wheel
installed (so ``python -m cudaredist`` here is the installed wheel, not this checkout). The mirror
of real ``windows-x86_64`` archives (``cudaredist mirror 13.0.2 --source pypi``, built on the Linux
side) is named by ``CUDAREDIST_WINDOWS_E2E_MIRROR``; this module serves it on 127.0.0.1 itself.
``CUDAREDIST_WINDOWS_E2E_CACHE``, when set, is a wheel cache for the ``--source pypi`` case (it is
copied, never written).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.loopback import directory_handler, serving

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(sys.platform != "win32", reason="drives the CLI on a Windows host (on Linux, "
                       "tests/test_windows_host.py runs this module under the Windows CPython)"),
]

MIRROR_VAR = "CUDAREDIST_WINDOWS_E2E_MIRROR"
CACHE_VAR = "CUDAREDIST_WINDOWS_E2E_CACHE"
UNDER_WINE = os.environ.get("UNDER_WINE") == "1"

# A kernel in PTX that ptxas turns into an sm_90 cubin (no headers, no host compiler needed).
PTX = """\
.version 8.0
.target sm_90
.address_size 64

.visible .entry add_one(.param .u64 p)
{
    .reg .b64 %rd<3>;
    .reg .b32 %r<3>;
    ld.param.u64 %rd1, [p];
    cvta.to.global.u64 %rd2, %rd1;
    ld.global.u32 %r1, [%rd2];
    add.s32 %r2, %r1, 1;
    st.global.u32 [%rd2], %r2;
    ret;
}
"""


@pytest.fixture(scope="module")
def mirror_dir() -> Path:
    given = os.environ.get(MIRROR_VAR)
    if not given:
        if os.environ.get("CI"):
            pytest.fail(f"{MIRROR_VAR} is not set although CI is set (on a Windows runner ci.yml's step "
                        "'The mirror of real windows-x86_64 archives' sets it; on Linux "
                        "tests/test_windows_host.py does)")
        pytest.skip(f"{MIRROR_VAR} names no mirror of real windows-x86_64 archives "
                    "(tests/test_windows_host.py builds one and sets it)")
    root = Path(given)
    assert (root / "redistrib_13.0.2.json").is_file(), root
    return root


@pytest.fixture(scope="module")
def base_url(mirror_dir: Path) -> Iterator[str]:
    with serving(directory_handler(mirror_dir)) as base:
        yield base


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One download cache for the module, as a runner's restored cache: the first install is cold,
    later ones place the unpacked entries (the cases that must fetch have caches of their own)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def env(warm_cache: Path) -> dict[str, str]:
    """A Windows runner's environment, with no CUDA of the host's."""
    out = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUDA_", "CUDAREDIST_")) and k not in ("CUDA_PATH", "CUDA_HOME")}
    out["CUDAREDIST_CACHE_DIR"] = str(warm_cache)
    out.pop("PYTHONIOENCODING", None)
    out.pop("PYTHONUTF8", None)
    return out


def cli(*args: str, env: dict[str, str], timeout: float = 600, check: bool = True,
        **kwargs: object) -> subprocess.CompletedProcess[str]:
    """``python -m cudaredist ARGS`` with stdout and stderr piped, as a runner's step captures them."""
    r = subprocess.run([sys.executable, "-m", "cudaredist", *args], env=env, capture_output=True,
                       encoding="utf-8", errors="replace", timeout=timeout, **kwargs)  # type: ignore[call-overload]
    assert "Traceback" not in r.stderr, r.stderr
    if check:
        what = " ".join(args)
        assert r.returncode == 0, f"cudaredist {what} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r  # type: ignore[no-any-return]


def install(prefix: Path, base: str, env: dict[str, str], *extra: str,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    return cli("install", "13.0", "--base-url", base, "--prefix", str(prefix), *extra, env=env, check=check)


def pwsh_string(expr: str) -> str:
    """The value of a PowerShell string expression of 'quoted' parts and [char]0xNNNN codes joined by +."""
    import re

    expr = expr.strip()
    if expr.startswith("(") and expr.endswith(")"):
        expr = expr[1:-1]
    parts = re.findall(r"'((?:[^']|'')*)'|\[char\]0x([0-9A-Fa-f]+)", expr)
    assert parts, expr
    return "".join(q.replace("''", "'") if not code else chr(int(code, 16)) for q, code in parts)


class Holder:
    """Another process that holds a file open, as an editor, an antivirus scan or a second job does:
    CreateFileW with no FILE_SHARE_DELETE, so the file can be neither deleted nor renamed."""

    def __init__(self, path: Path) -> None:
        # GENERIC_READ, FILE_SHARE_READ only, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL
        code = ("import _winapi, sys\n"
                "h = _winapi.CreateFile(sys.argv[1], 0x80000000, 1, 0, 3, 0x80, 0)\n"
                "print('held', flush=True)\n"
                "sys.stdin.read()\n")
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "held"

    def release(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


def test_default_install_noop_verify_in_a_prefix_with_spaces(base_url: str, env: dict[str, str],
                                                            tmp_path: Path) -> None:
    prefix = tmp_path / "Program Files" / "cuda 13.0"
    r = install(prefix, base_url, env)  # default --jobs: segmented downloads for the big archives
    assert "CUDA 13.0.2" in r.stderr
    nvcc = prefix / "bin" / "nvcc.exe"
    assert nvcc.read_bytes()[:2] == b"MZ"
    assert (prefix / "include" / "cuda_runtime.h").is_file()
    version = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, env=env, timeout=120)
    assert version.returncode == 0 and "release 13.0" in version.stdout, version.stdout + version.stderr

    again = install(prefix, base_url, env)
    assert "nothing to do" in again.stderr

    verified = cli("verify", "--prefix", str(prefix), env=env)
    assert "ok:" in verified.stdout
    info = json.loads(cli("info", "--prefix", str(prefix), "--json", env=env).stdout)
    assert info["plan"]["release"] == "13.0.2" and info["plan"]["platform"] == "windows-x86_64"


def test_ptxas_from_the_tree_builds_a_cubin(base_url: str, env: dict[str, str], tmp_path: Path) -> None:
    prefix = tmp_path / "cuda"
    install(prefix, base_url, env)
    src = tmp_path / "add_one.ptx"
    src.write_text(PTX)
    out = tmp_path / "add_one.cubin"
    r = subprocess.run([str(prefix / "bin" / "ptxas.exe"), "-arch=sm_90", "-o", str(out), str(src)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    cubin = out.read_bytes()
    assert cubin[:4] == b"\x7fELF"
    assert b"add_one" in cubin


def test_env_for_cmd_pwsh_and_github(base_url: str, env: dict[str, str], tmp_path: Path) -> None:
    prefix = tmp_path / "cuda 13.0"
    install(prefix, base_url, env)
    cmd_text = cli("env", "--prefix", str(prefix), "--shell", "cmd", env=env).stdout
    # cmd itself reads it: the variables it sets are the tree's
    script = tmp_path / "use.cmd"
    script.write_text("@echo off\r\n" + cmd_text.replace("\n", "\r\n") +
                      "\r\necho CUDA_PATH=%CUDA_PATH%\r\necho CUDA_PATH_V13_0=%CUDA_PATH_V13_0%\r\n"
                      "echo PATH=%PATH%\r\n", encoding="utf-8")
    ran = subprocess.run(["cmd", "/d", "/c", str(script)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"CUDA_PATH={prefix}" in ran.stdout
    assert f"CUDA_PATH_V13_0={prefix}" in ran.stdout
    path_line = next(line for line in ran.stdout.splitlines() if line.startswith("PATH="))
    assert path_line[len("PATH="):].split(";")[0] == str(prefix / "bin"), path_line

    pwsh = cli("env", "--prefix", str(prefix), "--shell", "pwsh", env=env).stdout
    assert f"$env:CUDA_PATH = '{prefix}'" in pwsh
    assert f"$env:CUDA_PATH_V13_0 = '{prefix}'" in pwsh
    assert f"@('{prefix / 'bin'}', " in pwsh, pwsh

    genv, gpath = tmp_path / "github_env", tmp_path / "github_path"
    genv.write_text("")
    gpath.write_text("")
    cli("env", "--prefix", str(prefix), "--github", env=env | {"GITHUB_ENV": str(genv),
                                                                "GITHUB_PATH": str(gpath)})
    written = genv.read_text(encoding="utf-8")
    assert "CUDA_PATH<<" in written and str(prefix) in written
    assert str(prefix / "bin") in gpath.read_text(encoding="utf-8").splitlines()


def test_mirror_then_directory_and_file_url_bases_and_mirrors(base_url: str, env: dict[str, str],
                                                               tmp_path: Path) -> None:
    """The offline flow: ``mirror --out DIR``, then DIR as a base and as a mirror, as a path and as a
    ``file:///C:/...`` URL (cudart only: the URL handling is the same for every archive)."""
    small = ("--component", "cuda_cudart", "--only")
    out = tmp_path / "offline mirror"
    cli("mirror", "13.0", "--platform", "windows-x86_64", *small, "--base-url", base_url, "--out", str(out),
        env=env | {"CUDAREDIST_CACHE_DIR": str(tmp_path / "mirror-cache")})
    assert (out / "redistrib_13.0.2.json").is_file()
    url = out.as_uri() + "/"
    assert url.startswith("file:///C:/"), url
    unreachable = "http://127.0.0.1:9/"  # nothing listens on the discard port
    cases = {
        "directory base": ("--base-url", str(out)),
        "file:// base": ("--base-url", url),
        "directory mirror": ("--mirror", str(out), "--base-url", unreachable),
        "file:// mirror": ("--mirror", url, "--base-url", unreachable),
    }
    for i, (name, args) in enumerate(cases.items()):
        e = env | {"CUDAREDIST_CACHE_DIR": str(tmp_path / f"cache{i}")}  # nothing cached: all from there
        prefix = tmp_path / f"cuda{i}"
        r = cli("install", "13.0", *small, *args, "--prefix", str(prefix), env=e, check=False)
        assert r.returncode == 0, f"{name}: {r.stderr}"
        assert list(prefix.rglob("cudart64_13.dll")), name


def test_managed_install_list_find_run_uninstall(base_url: str, env: dict[str, str], tmp_path: Path) -> None:
    root = tmp_path / "toolkits"
    e = env | {"CUDAREDIST_INSTALL_DIR": str(root)}
    cli("install", "13.0", "--base-url", base_url, env=e)
    listed = json.loads(cli("list", "--json", env=e).stdout)
    assert Path(listed["install_dir"]) == root
    assert [t["release"] for t in listed["toolkits"]] == ["13.0.2"], listed
    path = Path(cli("find", "13.0", env=e).stdout.strip())
    assert path.parent == root and (path / "bin" / "nvcc.exe").is_file()
    ran = cli("run", "13.0", "--", sys.executable, "-c", "import os; print(os.environ['CUDA_PATH'])", env=e)
    assert Path(ran.stdout.strip()) == path
    # --install-dir is honoured by run too, whatever the environment says
    elsewhere = env | {"CUDAREDIST_INSTALL_DIR": str(tmp_path / "empty")}
    ran = cli("run", "13.0", "--install-dir", str(root), "--", sys.executable, "-c",
              "import os; print(os.environ['CUDA_PATH'])", env=elsewhere)
    assert Path(ran.stdout.strip()) == path
    cli("uninstall", "13.0", env=e)
    assert not path.exists()
    assert json.loads(cli("list", "--json", env=e).stdout)["toolkits"] == []


def test_non_ansi_paths_with_piped_stdout(base_url: str, env: dict[str, str], tmp_path: Path) -> None:
    """C:\\Users\\<a name outside the ANSI code page>\\AppData\\... is the managed default for such a
    user: env, find and list print it right through a pipe, with no traceback."""
    root = tmp_path / "Пользователь 测试" / "toolkits"
    e = env | {"CUDAREDIST_INSTALL_DIR": str(root)}
    cli("install", "13.0", "--base-url", base_url, env=e)
    found = cli("find", "13.0", env=e).stdout.strip()
    assert Path(found).parent == root, found
    assert Path(found).is_dir()
    listed = cli("list", env=e).stdout
    assert str(root) in listed, listed
    cmd_text = cli("env", "13.0", "--shell", "cmd", env=e).stdout
    assert f'set "CUDA_PATH={found}"' in cmd_text, cmd_text
    # pwsh's lines are ASCII (the path's other characters as [char] codes): right in every code page
    pwsh = cli("env", "13.0", "--shell", "pwsh", env=e).stdout
    assert pwsh.isascii(), pwsh
    line = next(x for x in pwsh.splitlines() if x.startswith("$env:CUDA_PATH = "))
    assert pwsh_string(line[len("$env:CUDA_PATH = "):]) == found, line


def test_file_in_use_during_reinstall_and_uninstall(base_url: str, env: dict[str, str],
                                                    tmp_path: Path) -> None:
    prefix = tmp_path / "cuda"
    install(prefix, base_url, env)
    holder = Holder(prefix / "bin" / "nvcc.exe")
    try:
        started = time.monotonic()
        r = install(prefix, base_url, env, "--reinstall", check=False)
        took = time.monotonic() - started
        print(f"--reinstall with a file of the old tree held open: {took:.1f}s, exit {r.returncode}")
        if r.returncode == 0:
            # the swap finished: a success; the old tree could not go yet, and the user is told
            assert "warning" in r.stderr.lower(), r.stderr
        else:
            # Windows refused to move the old tree aside: it is untouched, and the paragraph says
            # which file a process holds
            assert "nvcc.exe" in r.stderr and "process" in r.stderr.lower(), r.stderr
        assert cli("verify", "--prefix", str(prefix), env=env).returncode == 0
    finally:
        holder.release()
    # the next run removes what the held file kept, and says so
    later = install(prefix, base_url, env)
    assert [p.name for p in prefix.parent.iterdir() if "cudaredist-old" in p.name] == [], later.stderr

    before = sorted(p.relative_to(prefix).as_posix() for p in prefix.rglob("*"))
    holder = Holder(prefix / "bin" / "nvcc.exe")
    try:
        gone = cli("uninstall", "--prefix", str(prefix), env=env, check=False)
        assert gone.returncode != 0
        paragraph = gone.stderr.strip()
        assert "nvcc.exe" in paragraph and "process" in paragraph.lower(), paragraph
        assert "permission" not in paragraph.lower(), paragraph
        # all or nothing: the tree is as it was, and still verifies
        assert sorted(p.relative_to(prefix).as_posix() for p in prefix.rglob("*")) == before
        assert cli("verify", "--prefix", str(prefix), env=env).returncode == 0
    finally:
        holder.release()
    cli("uninstall", "--prefix", str(prefix), env=env)
    assert not prefix.exists()


@pytest.mark.pypi
def test_source_pypi(env: dict[str, str], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    given = os.environ.get(CACHE_VAR)
    if given and Path(given).is_dir():
        # the wheels are there already (PyPI serves the index pages); not the unpacked entries, which
        # hold every big library other tests installed (GBs copied for nothing)
        shutil.copytree(given, cache, ignore=shutil.ignore_patterns("unpacked", "tmp", "locks"))
    prefix = tmp_path / "cuda pypi"
    r = cli("install", "13.0.2", "--source", "pypi", "--prefix", str(prefix),
            env=env | {"CUDAREDIST_CACHE_DIR": str(cache)})
    assert "13.0.2" in r.stderr
    assert (prefix / "bin" / "nvcc.exe").read_bytes()[:2] == b"MZ"
    assert cli("verify", "--prefix", str(prefix), env=env).returncode == 0
