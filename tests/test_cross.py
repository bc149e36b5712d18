"""Cross trees (`install --platform TARGET --host HOST`): the tools of HOST's archives at the root,
the target's headers and libraries where NVIDIA's cross layout has them; one plan, one record, one
verify; pairs NVIDIA does not publish and a release one side lacks refused before any download.
Tiny archives from tests/archives.py in a directory base (the real trees: tests/e2e/test_cross_e2e.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cudaredist.cli import app
from cudaredist.plan import Plan, placed, plan_from_json
from tests.archives import Exe, MirrorArchive, build_mirror, toolkit
from tests.hosts import posix_only
from tests.wintools import ARM64_MAIN_CUDART, llvm


def _run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def _tagged(platform: str) -> list[MirrorArchive]:
    """toolkit(platform) with each file's bytes naming the platform, so the tree shows whose it is."""
    out = []
    for a in toolkit(platform):
        tag = platform.encode()
        members = {k: (Exe(v.data + tag, v.mode) if isinstance(v, Exe) else v + tag if isinstance(v, bytes)
                       else v) for k, v in a.members.items()}
        out.append(MirrorArchive(a.component, a.platform, a.version, members))
    return out


@pytest.fixture
def cross_site(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    build_mirror(root, "13.0.1", _tagged("linux-x86_64") + _tagged("linux-sbsa")
                 + _tagged("windows-x86_64") + _tagged("windows-arm64"))
    return root


def _install(site: Path, prefix: Path, target: str, host: str, *more: str) -> Result:
    return _run("install", "13.0", "--platform", target, "--host", host, "--prefix", str(prefix),
                "--base-url", str(site), *more)


def test_linux_cross_tree_has_host_tools_and_the_targets_libraries(cross_site: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "sbsa"
    r = _install(cross_site, prefix, "linux-sbsa", "linux-x86_64")
    assert r.exit_code == 0, r.output
    assert (prefix / "bin/nvcc").read_bytes().endswith(b"linux-x86_64")
    assert (prefix / "nvvm/bin/cicc").read_bytes().endswith(b"linux-x86_64")
    target = prefix / "targets/sbsa-linux"
    assert (target / "lib/libcudart.so.13.0.96").read_bytes().endswith(b"linux-sbsa")
    assert (target / "include/cuda_runtime.h").read_bytes().endswith(b"linux-sbsa")
    assert (target / "include/cccl/thrust/version.h").is_file()
    # the crt headers come with the tools, where nvcc -target-dir reads headers
    assert (target / "include/crt/host_config.h").read_bytes().endswith(b"linux-x86_64")
    # the root's include/ and lib/ are the target's, as NVIDIA's installed toolkit links them: for
    # nvcc.profiles naming $(TOP)/include (NVIDIA's wheels from 13.2 on) and CMake before 4.x
    made = json.loads((prefix / ".cudaredist/record.json").read_text())["links"]
    rec_links = {ln["path"]: ln["link"] for ln in made}
    assert rec_links == {"include": "targets/sbsa-linux/include", "lib": "targets/sbsa-linux/lib",
                         "lib64": "targets/sbsa-linux/lib"}
    assert (prefix / "lib64/libcudart.so.13.0.96").read_bytes().endswith(b"linux-sbsa")
    assert (prefix / "include/crt/host_config.h").read_bytes().endswith(b"linux-x86_64")
    rec = json.loads((prefix / ".cudaredist/record.json").read_text())
    plan = plan_from_json(rec["plan"])
    assert (plan.platform, plan.host) == ("linux-sbsa", "linux-x86_64")
    assert {i.component: plan.archive_platform(i) for i in plan.items} == {
        "cuda_nvcc": "linux-x86_64", "libnvvm": "linux-x86_64", "cuda_crt": "linux-x86_64",
        "cuda_cudart": "linux-sbsa", "cuda_cccl": "linux-sbsa", "cuda_profiler_api": "linux-sbsa",
        "cuda_nvtx": "linux-sbsa"}
    assert _run("verify", "--prefix", str(prefix)).exit_code == 0
    info = _run("info", "--prefix", str(prefix))
    assert "platform:  linux-sbsa (tools for linux-x86_64)" in info.output, info.output
    again = _install(cross_site, prefix, "linux-sbsa", "linux-x86_64")
    assert again.exit_code == 0 and "nothing to do" in again.output, again.output
    # the same prefix asked as a native tree is another request: rebuilt, not a no-op
    native = _run("install", "13.0", "--platform", "linux-sbsa", "--prefix", str(prefix),
                  "--base-url", str(cross_site))
    assert native.exit_code == 0 and "nothing to do" not in native.output, native.output
    assert (prefix / "bin/nvcc").read_bytes().endswith(b"linux-sbsa")
    assert not (prefix / "targets").exists()  # the swap leaves nothing of the cross tree behind


def test_windows_cross_tree_keeps_the_targets_arm64_folders(cross_site: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "woa"
    r = _install(cross_site, prefix, "windows-arm64", "windows-x86_64")
    assert r.exit_code == 0, r.output
    assert (prefix / "bin/nvcc.exe").read_bytes().endswith(b"windows-x86_64")
    assert (prefix / "bin/arm64/cudart64_13.dll").is_file()
    assert (prefix / "lib/arm64/cudart.lib").read_bytes().endswith(b"windows-arm64")
    assert not (prefix / "lib/x64").exists() and not (prefix / "bin/x64").exists()
    assert (prefix / "include/cuda_runtime.h").read_bytes().endswith(b"windows-arm64")
    assert _run("verify", "--prefix", str(prefix)).exit_code == 0
    assert _run("uninstall", "--prefix", str(prefix)).exit_code == 0
    assert not prefix.exists()


@pytest.mark.parametrize(("target", "host"), [
    pytest.param("linux-x86_64", "linux-sbsa", id="aarch64-tools-for-x86"),
    pytest.param("linux-sbsa", "windows-x86_64", id="windows-tools-for-linux"),
    pytest.param("windows-x86_64", "windows-arm64", id="arm64-tools-for-x64"),
])
def test_a_pair_nvidia_does_not_publish_is_refused_before_any_download(target: str, host: str,
                                                                      tmp_path: Path) -> None:
    # a base nobody serves: the refusal comes before the network is asked
    r = _install(tmp_path / "nowhere", tmp_path / "p", target, host)
    assert r.exit_code == 2, r.output
    assert f"NVIDIA publishes no cross toolkit that builds for {target} on {host}" in r.output
    assert "linux-x86_64 -> linux-sbsa" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "p").exists()


def test_a_release_the_target_lacks_is_refused_naming_that_side(tmp_path: Path) -> None:
    site = tmp_path / "site"
    build_mirror(site, "13.0.1", _tagged("linux-x86_64") + [a for a in _tagged("linux-sbsa")
                                                            if a.component != "cuda_cudart"])
    r = _install(site, tmp_path / "p", "linux-sbsa", "linux-x86_64")
    assert r.exit_code == 1, r.output
    assert "linux-x86_64 -> linux-sbsa cross tree takes its headers and libraries (--platform) " \
           "from linux-sbsa" in r.output and "cuda_cudart" in r.output, r.output
    assert not (tmp_path / "p").exists()


def test_host_needs_a_prefix(tmp_path: Path) -> None:
    r = _run("install", "13.0", "--platform", "linux-sbsa", "--host", "linux-x86_64",
             "--install-dir", str(tmp_path / "managed"))
    assert r.exit_code == 2 and "goes into --prefix" in r.output, r.output


def test_a_host_equal_to_the_platform_is_a_native_tree(cross_site: Path, tmp_path: Path) -> None:
    r = _install(cross_site, tmp_path / "p", "linux-sbsa", "linux-sbsa")
    assert r.exit_code == 0, r.output
    plan = plan_from_json(json.loads((tmp_path / "p/.cudaredist/record.json").read_text())["plan"])
    assert plan.host == "" and not (tmp_path / "p/targets").exists()


@pytest.mark.parametrize(("rel", "place", "want"), [
    pytest.param("lib/libcudart.so", (("", "targets/sbsa-linux"),), "targets/sbsa-linux/lib/libcudart.so",
                 id="everything"),
    pytest.param("include/crt/a.h", (("include", "targets/x/include"),), "targets/x/include/crt/a.h",
                 id="one-folder"),
    pytest.param("bin/nvcc", (("include", "targets/x/include"),), "bin/nvcc", id="other-folder-stays"),
    pytest.param("includes/a.h", (("include", "t"),), "includes/a.h", id="prefix-is-not-a-folder"),
    pytest.param("lib/x64/a.lib", (("lib", ""),), None, id="dropped"),
])
def test_placed(rel: str, place: tuple[tuple[str, str], ...], want: str | None) -> None:
    assert placed(rel, place) == want


def test_a_cross_plan_round_trips_and_keys_apart_from_a_native_one(cross_site: Path, tmp_path: Path) -> None:
    assert _install(cross_site, tmp_path / "p", "linux-sbsa", "linux-x86_64").exit_code == 0
    obj = json.loads((tmp_path / "p/.cudaredist/record.json").read_text())["plan"]
    plan: Plan = plan_from_json(obj)
    assert plan_from_json(plan.to_json()) == plan
    from dataclasses import replace

    native = replace(plan, host="", items=tuple(replace(i, platform="", place=()) for i in plan.items))
    assert native.content_key() != plan.content_key()



def test_windows_cross_tree_links_an_arm64_program_with_lld(tmp_path: Path) -> None:
    """x64 tools and the arm64 runtime as NVIDIA's wheels have it (a DLL, no .lib): the tree's nvcc.exe
    is an x64 image, lib/arm64 gets an ARM64 import library, and lld-link links an ARM64 program
    with it that imports cudaGetDeviceCount from cudart64_13.dll."""
    from cudaredist.tree.implib import MACHINE_AMD64, MACHINE_ARM64, read_exports
    from tests.pe import AMD64, ARM64, make_dll

    host = [a for a in toolkit("windows-x86_64") if a.component != "cuda_nvcc"]
    host.append(MirrorArchive("cuda_nvcc", "windows-x86_64", "13.0.88", {
        "bin/nvcc.exe": make_dll("nvcc.exe", code=("main",), data=(), machine=AMD64), "LICENSE": b"eula"}))
    target = [a for a in toolkit("windows-arm64") if a.component != "cuda_cudart"]
    target.append(MirrorArchive("cuda_cudart", "windows-arm64", "13.0.96", {
        "bin/arm64/cudart64_13.dll": make_dll("cudart64_13.dll", code=("cudaGetDeviceCount", "cudaMalloc"),
                                              data=(), machine=ARM64),
        "include/cuda_runtime.h": b"// rt", "LICENSE": b"eula"}))
    site = tmp_path / "site"
    build_mirror(site, "13.0.1", host + target)
    prefix = tmp_path / "woa"
    r = _install(site, prefix, "windows-arm64", "windows-x86_64")
    assert r.exit_code == 0, r.output
    assert read_exports((prefix / "bin/nvcc.exe").read_bytes()).machine == MACHINE_AMD64
    assert read_exports((prefix / "bin/arm64/cudart64_13.dll").read_bytes()).machine == MACHINE_ARM64
    implib = prefix / "lib/arm64/cudart.lib"
    assert implib.is_file() and not (prefix / "lib/x64").exists()
    assert "Machine: IMAGE_FILE_MACHINE_ARM64" in llvm("llvm-readobj", "--file-headers", str(implib))
    (tmp_path / "main.s").write_text(ARM64_MAIN_CUDART)
    llvm("llvm-mc", "-triple=aarch64-pc-windows-msvc", "-filetype=obj", str(tmp_path / "main.s"),
          "-o", str(tmp_path / "main.obj"))
    exe = tmp_path / "main.exe"
    llvm("lld-link", "/machine:arm64", "/subsystem:console", "/entry:mainCRTStartup", "/nodefaultlib",
          f"/out:{exe}", str(tmp_path / "main.obj"), f"/libpath:{prefix / 'lib/arm64'}", "cudart.lib")
    imports = llvm("llvm-readobj", "--coff-imports", str(exe))
    assert "Name: cudart64_13.dll" in imports and "Symbol: cudaGetDeviceCount" in imports, imports
    assert "Arch: aarch64" in llvm("llvm-readobj", "--file-headers", str(exe))
    assert _run("verify", "--prefix", str(prefix)).exit_code == 0


# -- doctor ---------------------------------------------------------------------------------------
FAKE_NVCC = """#!/bin/sh
# records its arguments and the nvcc variables, writes the file -o names
{ echo "ARGS $*"; echo "CCBIN=$NVCC_CCBIN"; echo "APPEND=$NVCC_APPEND_FLAGS"; } >> "$(dirname "$0")/calls"
while [ $# -gt 1 ]; do [ "$1" = -o ] && : > "$2"; shift; done
exit 0
"""


def _cross_toolkit(tmp_path: Path):  # type: ignore[no-untyped-def]
    from cudaredist.doctor.checks import Toolkit

    prefix = tmp_path / "tree"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin/nvcc").write_text(FAKE_NVCC)
    (prefix / "bin/nvcc").chmod(0o755)
    crt = prefix / "targets/sbsa-linux/include/crt"
    crt.mkdir(parents=True)
    (crt / "host_config.h").write_text("/* accepts every compiler */\n")
    return Toolkit(prefix, "13.0.2", "linux-sbsa", "13.0.88", True, True, False, "linux-x86_64")


@posix_only("a shell script stands in for nvcc")
def test_doctor_without_the_cross_compiler_checks_only_the_compile_step(tmp_path: Path) -> None:
    from cudaredist.doctor.compiler import cross_checks

    tk = _cross_toolkit(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "NVCC_APPEND_FLAGS": "-target-dir sbsa-linux"}
    host_compiler, probe = cross_checks(tk, env, which=lambda _cmd, _path: None)
    assert host_compiler.status == probe.status == "warn"
    assert "aarch64-linux-gnu-g++ (NVCC_CCBIN), which is not installed: only the compile step was " \
           "checked" in host_compiler.detail
    assert "only the compile step was checked" in probe.detail
    assert "apt-get install g++-aarch64-linux-gnu" in probe.fix
    calls = (tk.prefix / "bin/calls").read_text()
    assert f"-cubin -arch=sm_90 -I{tk.prefix}/targets/sbsa-linux/include" in calls
    assert "APPEND=\n" in calls and "CCBIN=\n" in calls  # the target's flags are left out


@posix_only("shell scripts stand in for nvcc and the cross compiler")
def test_doctor_probes_with_the_cross_compiler_when_installed(tmp_path: Path) -> None:
    from cudaredist.doctor.compiler import cross_checks

    tk = _cross_toolkit(tmp_path)
    gxx = tmp_path / "aarch64-linux-gnu-g++"
    gxx.write_text("#!/bin/sh\necho 'aarch64-linux-gnu-g++ (fake) 12.2.0'\n")
    gxx.chmod(0o755)
    host_compiler, probe = cross_checks(tk, {"PATH": "/usr/bin:/bin"},
                                        which=lambda cmd, _path: str(gxx) if cmd == gxx.name else None)
    assert (host_compiler.status, probe.status) == ("ok", "ok"), (host_compiler, probe)
    assert str(gxx) in host_compiler.detail
    assert "for linux-sbsa, with aarch64-linux-gnu-g++ and -target-dir sbsa-linux" in probe.detail
    calls = (tk.prefix / "bin/calls").read_text()
    assert "CCBIN=aarch64-linux-gnu-g++" in calls and "APPEND=-target-dir sbsa-linux" in calls


def test_a_lock_pins_both_platforms_and_installs_the_same_tree(cross_site: Path, tmp_path: Path) -> None:
    lock = tmp_path / "cuda.lock.json"
    r = _run("lock", "13.0", "--platform", "linux-sbsa", "--host", "linux-x86_64",
             "--base-url", str(cross_site), "-o", str(lock))
    assert r.exit_code == 0, r.output
    body = json.loads(lock.read_text())
    assert body["request"]["host"] == "linux-x86_64" and body["platforms"] == ["linux-sbsa"]
    locked = plan_from_json(body["plans"]["linux-sbsa"])
    assert locked.host == "linux-x86_64"
    assert {locked.archive_platform(i) for i in locked.items} == {"linux-x86_64", "linux-sbsa"}
    a, b = tmp_path / "from-train", tmp_path / "from-lock"
    assert _install(cross_site, a, "linux-sbsa", "linux-x86_64").exit_code == 0
    r = _run("install", "--lock", str(lock), "--platform", "linux-sbsa", "--prefix", str(b),
             "--base-url", str(cross_site))
    assert r.exit_code == 0, r.output
    plan_a, plan_b = (plan_from_json(json.loads((p / ".cudaredist/record.json").read_text())["plan"])
                      for p in (a, b))
    assert plan_a.content_key() == plan_b.content_key() == locked.content_key()
    assert (b / "targets/sbsa-linux/lib/libcudart.so.13.0.96").read_bytes().endswith(b"linux-sbsa")
    # the lock's host obeys --host's rule: a cross tree goes into --prefix, never the install dir
    home = tmp_path / "toolkits"
    r = _run("install", "--lock", str(lock), "--platform", "linux-sbsa", "--install-dir", str(home),
             "--base-url", str(cross_site))
    assert r.exit_code == 2 and "a cross tree (tools for linux-x86_64: --host, or a lock file" in r.output, \
        r.output
    assert not home.exists() or not any(home.iterdir())
    # --host and --lock together: the lock pins the host already
    both = _run("install", "--lock", str(lock), "--host", "linux-x86_64", "--platform", "linux-sbsa",
                "--prefix", str(tmp_path / "c"))
    assert both.exit_code == 2 and "give one of them" in both.output, both.output


# -- env ------------------------------------------------------------------------------------------
def test_env_of_a_linux_cross_tree_points_nvcc_and_cmake_at_the_target() -> None:
    from cudaredist.envexport import environment, render
    from cudaredist.hostcc import for_tree

    # hostcc's decision for a tree without its headers: the cross compiler and -target-dir, judged by nothing
    chosen = for_tree(Path("/opt/cuda sbsa"), platform="linux-sbsa", release="13.0.2", env={},
                      host_windows=False, host="linux-x86_64")
    env = environment("/opt/cuda sbsa", platform="linux-sbsa", release="13.0.2", host_windows=False,
                      host="linux-x86_64", host_compiler=chosen)
    sets = dict(env.variables)
    assert sets["NVCC_APPEND_FLAGS"] == "-target-dir sbsa-linux"
    assert sets["NVCC_CCBIN"] == "aarch64-linux-gnu-g++" and sets["CUDA_PATH"] == "/opt/cuda sbsa"
    assert dict(env.prepend) == {"PATH": ("/opt/cuda sbsa/bin",),
                                 "LD_LIBRARY_PATH": ("/opt/cuda sbsa/nvvm/lib64",)}
    assert {"-DCMAKE_SYSTEM_PROCESSOR=aarch64", "-DCMAKE_CUDA_COMPILER=/opt/cuda sbsa/bin/nvcc",
            "-DCUDAToolkit_ROOT=/opt/cuda sbsa", "-DCUDAToolkit_TARGET_DIR=/opt/cuda sbsa/targets/sbsa-linux",
            "-DCMAKE_CUDA_HOST_COMPILER=aarch64-linux-gnu-g++",
            "-DCMAKE_CUDA_FLAGS=-target-dir sbsa-linux"} <= set(env.cmake_args)
    assert "export NVCC_CCBIN='aarch64-linux-gnu-g++'" in render(env, "sh")
    assert any("aarch64-linux-gnu-g++" in n and "-target-dir sbsa-linux" in n for n in env.notes)


@posix_only("a shell script stands in for the user's cross compiler")
def test_env_of_a_cross_tree_keeps_the_users_compiler_and_flags(cross_site: Path, tmp_path: Path) -> None:
    """Finding 2: the user's NVCC_CCBIN and NVCC_APPEND_FLAGS (a --sysroot) stay; -target-dir is added."""
    prefix = tmp_path / "sbsa"
    assert _install(cross_site, prefix, "linux-sbsa", "linux-x86_64").exit_code == 0
    mine = tmp_path / "my-aarch64-g++"
    mine.write_text("#!/bin/sh\nexit 0\n")  # preprocesses the tree's host_config.h without an #error
    mine.chmod(0o755)
    user = {"NVCC_CCBIN": str(mine), "NVCC_APPEND_FLAGS": "--sysroot=/opt/sysroot-arm64",
            "CUDAREDIST_HOST_COMPILER": None}
    r = CliRunner().invoke(app, ["env", "--prefix", str(prefix), "--json"], env=user)
    assert r.exit_code == 0, r.output
    sets = json.loads(r.stdout)["set"]
    assert sets.get("NVCC_CCBIN", str(mine)) == str(mine), sets
    assert sets["NVCC_APPEND_FLAGS"] == "--sysroot=/opt/sysroot-arm64 -target-dir sbsa-linux"
    # -target-dir given already: the user's flags are left as they are
    r = CliRunner().invoke(app, ["env", "--prefix", str(prefix), "--json"],
                           env={**user, "NVCC_APPEND_FLAGS": "-target-dir sbsa-linux --sysroot=/s"})
    assert "NVCC_APPEND_FLAGS" not in json.loads(r.stdout)["set"], r.output


def test_env_of_a_windows_cross_tree_on_windows_gives_the_arm64_library_folder() -> None:
    from cudaredist.envexport import environment

    env = environment("C:\\cuda woa", platform="windows-arm64", release="13.4.3", host_windows=True,
                      host="windows-x86_64")
    assert dict(env.prepend) == {"PATH": ("C:\\cuda woa\\bin",)}  # the arm64 DLLs do not load on x64
    assert dict(env.variables)["CUDA_PATH"] == "C:\\cuda woa" and "NVCC_CCBIN" not in dict(env.variables)
    assert "-DCMAKE_VS_GLOBALS=CudaToolkitLibDir=C:\\cuda woa\\lib\\arm64" in env.cmake_args
    assert "-DCMAKE_CUDA_COMPILER=C:\\cuda woa\\bin\\nvcc.exe" in env.cmake_args
    assert any("-A ARM64" in n for n in env.notes) and any("x64_arm64" in n for n in env.notes)


def test_env_of_a_windows_cross_tree_elsewhere_is_for_cross_compiling_only() -> None:
    from cudaredist.envexport import environment

    env = environment("/t/woa", platform="windows-arm64", release="13.4.3", host_windows=False,
                      host="windows-x86_64")
    assert env.variables == (("WINDOWS_CUDA_HOME", "/t/woa"),) and env.prepend == ()


def test_with_products_follow_the_target(tmp_path: Path, serve: object) -> None:
    """--with cudnn: the target's cuDNN (and the cuBLAS it loads) in targets/sbsa-linux; the host
    is never asked for the product (it has no cuDNN here at all)."""
    from tests.test_products_install import LINUX_CUDNN, cublas, product_mirror

    compute = tmp_path / "site" / "compute"
    build_mirror(compute / "cuda" / "redist", "13.0.1", _tagged("linux-x86_64") + _tagged("linux-sbsa")
                 + [cublas("linux-sbsa")])
    product_mirror(compute / "cudnn" / "redist", "cudnn", "9.27.0", "cudnn", "9.27.0.42",
                   {"linux-sbsa": {"cuda13": LINUX_CUDNN}})
    assert callable(serve)
    site = str(serve(tmp_path / "site")) + "compute/cuda/redist/"
    prefix = tmp_path / "p"
    r = _run("install", "13.0", "--platform", "linux-sbsa", "--host", "linux-x86_64", "--with", "cudnn",
             "--prefix", str(prefix), "--base-url", site)
    assert r.exit_code == 0, r.output
    target = prefix / "targets/sbsa-linux"
    assert (target / "include/cudnn.h").is_file() and (target / "lib/libcudnn.so.9.27.0").is_file()
    assert (target / "lib/libcublas.so.13.1.0.3").is_file()
    plan = plan_from_json(json.loads((prefix / ".cudaredist/record.json").read_text())["plan"])
    assert {plan.archive_platform(i) for i in plan.items if i.component in ("cudnn", "libcublas")} == {
        "linux-sbsa"}
    assert [p.name for p in plan.products] == ["cudnn"]
    again = _run("install", "13.0", "--platform", "linux-sbsa", "--host", "linux-x86_64", "--with", "cudnn",
                 "--prefix", str(prefix), "--base-url", "http://127.0.0.1:9/")
    assert again.exit_code == 0 and "already installed" in again.output, again.output


def test_resolve_shows_whose_archive_each_is(cross_site: Path) -> None:
    r = _run("resolve", "13.0", "--platform", "linux-sbsa", "--host", "linux-x86_64",
             "--base-url", str(cross_site))
    assert r.exit_code == 0, r.output
    assert "for linux-sbsa with the tools of linux-x86_64" in r.output
    lines = {ln.split()[0]: ln for ln in r.output.splitlines() if ln.startswith(("  c", "  l"))}
    assert lines["cuda_nvcc"].endswith("(linux-x86_64)") and lines["cuda_cudart"].endswith("(linux-sbsa)")
    refused = _run("resolve", "13.0", "--platform", "linux-sbsa", "--host", "windows-x86_64",
                   "--base-url", "http://127.0.0.1:9/")
    assert refused.exit_code == 2 and "NVIDIA publishes no cross toolkit" in refused.output


def test_doctor_reinstall_hint_of_a_cross_tree_keeps_its_host(cross_site: Path, tmp_path: Path) -> None:
    from cudaredist.doctor.toolkit import check_toolkit

    prefix = tmp_path / "sbsa"
    assert _install(cross_site, prefix, "linux-sbsa", "linux-x86_64").exit_code == 0
    (prefix / "targets/sbsa-linux/include/cuda_runtime.h").unlink()
    check, tk = check_toolkit(prefix, host_windows=False)
    assert check.status == "fail" and tk is not None and tk.host == "linux-x86_64"
    assert f"--prefix {prefix} --platform linux-sbsa --host linux-x86_64 " in check.fix
    assert "--reinstall" in check.fix
    assert tk.include() == prefix / "targets/sbsa-linux/include"
