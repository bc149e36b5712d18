"""On a real newer host: trees of CUDA 13.0, 13.2 and 13.4 from NVIDIA's wheels, installed into a
Debian sid root (glibc 2.43, g++-14/15/16, Python 3.14: tests/sidroot.py), where cudaredist itself
runs: after ``eval "$(cudaredist env --prefix T)"`` a plain ``nvcc`` builds a kernel that uses
``<cmath>`` (rsqrtf, sinpi, cospif; std::sqrt and rsqrt in host code) and the program runs its host
side (no GPU here: cudaMalloc fails cleanly); doctor's probe passes and verify holds.

CUDA < 13.2 needs the host fix glibc-2.42-rsqrt (manifests/hostfixes.toml): without it
(``--no-host-fixes``) 13.0 fails on this host with the exception-specification clash. 13.0 and 13.2
also refuse the default g++-16 (host_config.h): `env` chooses g++-15 for them and exports
NVCC_CCBIN (cudaredist/hostcc.py), so the plain nvcc of the first test builds with every train; the
same builds with ``NVCC_CCBIN=g++-15`` exported by hand check that an override is kept.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realmirror import _once, host_free_env, real_wheel_cache, run_cudaredist, scratch  # noqa: F401  (fixture)
from tests.sidroot import Chroot, chroot_session, make_site, require_sid_root

pytestmark = [pytest.mark.e2e, pytest.mark.pypi]

PROGRAM = r"""
#include <cmath>
#include <cstdio>
#include <cuda_runtime.h>

__global__ void k(float *p) {
    int i = threadIdx.x;
    p[i] = rsqrtf(p[i]) + (float)sinpi((double)p[i]) + cospif(p[i]);
}

int main() {
    double h = std::sqrt(2.0) * rsqrt(4.0);
    std::printf("host %.6f\n", h);
    float *p = nullptr;
    cudaError_t e = cudaMalloc(&p, 32 * sizeof(float));
    if (e != cudaSuccess) {
        std::printf("cudaMalloc: %s\n", cudaGetErrorName(e));
        return 0;
    }
    k<<<1, 32>>>(p);
    e = cudaDeviceSynchronize();
    cudaFree(p);
    std::printf("device: %s\n", cudaGetErrorName(e));
    return e != cudaSuccess;
}
"""
CLASH = 'exception specification is incompatible with that of previous function "rsqrt"'


@pytest.fixture(scope="module")
def sid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chroot]:
    require_sid_root()
    site = _once(tmp_path_factory, "sid-site", make_site)
    with scratch(tmp_path_factory, "sid") as tmp:
        yield from chroot_session(tmp, site)


_trees: dict[tuple[str, ...], tuple[Path, str]] = {}


def tree(sid: Chroot, cache: Path, train: str, *extra: str) -> tuple[Path, str]:
    """(the tree of ``train`` from NVIDIA's wheels in the session's directory, install's stderr),
    installed once per module from the host; ``extra``: more install options."""
    key = (train, *extra)
    if key not in _trees:
        prefix = sid.host_dir / "-".join(["cuda", train, *(x.strip("-") for x in extra)])
        r = run_cudaredist("install", train, "--source", "pypi", "--prefix", str(prefix), *extra,
                           env=host_free_env(cache))
        assert r.returncode == 0, r.stderr
        _trees[key] = prefix, r.stderr
    return _trees[key]


def build_and_run(sid: Chroot, prefix: Path, ccbin: str = "") -> subprocess.CompletedProcess[str]:
    """In the root: the tree's env, then a plain nvcc (with NVCC_CCBIN exported when ``ccbin``)."""
    t = shlex.quote(sid.path(prefix))
    work = shlex.quote(sid.path(prefix.parent / f"build-{prefix.name}{'-' + ccbin if ccbin else ''}"))
    return sid.run(
        f"set -e; mkdir -p {work}; cd {work}; cat > k.cu <<'EOF'\n{PROGRAM}\nEOF\n"
        f'eval "$(cudaredist env --prefix {t})"\n'
        + (f"export NVCC_CCBIN={ccbin}\n" if ccbin else "")
        + "nvcc -arch=sm_90 k.cu -o k\n./k\n")


def doctor_and_verify(sid: Chroot, prefix: Path, ccbin: str = "") -> None:
    t = shlex.quote(sid.path(prefix))
    d = sid.run(f'eval "$(cudaredist env --prefix {t})"\n' + (f"export NVCC_CCBIN={ccbin}\n" if ccbin else "")
                + f"cudaredist doctor --prefix {t}")
    probe = [line for line in d.stdout.splitlines() if line.split()[1:2] == ["probe"]]
    assert probe and probe[0].startswith("ok    probe"), d.stdout + d.stderr
    v = sid.run(f"cudaredist verify --prefix {t}")
    assert v.returncode == 0 and v.stdout.startswith("ok: "), v.stdout + v.stderr


def check_build(r: subprocess.CompletedProcess[str]) -> None:
    assert r.returncode == 0, r.stdout + r.stderr
    assert "host 0.707107" in r.stdout  # sqrt(2) * rsqrt(4), on the CPU
    assert "cudaMalloc: cudaError" in r.stdout or "device: cudaSuccess" in r.stdout, r.stdout


def test_the_root_is_the_newer_host(sid: Chroot) -> None:
    r = sid.run("ldd --version | head -n 1; g++ --version | head -n 1; python3 --version")
    assert r.returncode == 0, r.stderr
    glibc = r.stdout.splitlines()[0].split()[-1]
    assert tuple(int(x) for x in glibc.split(".")[:2]) >= (2, 42), r.stdout
    assert "g++ (Debian 16." in r.stdout and "Python 3.14" in r.stdout, r.stdout


@pytest.mark.parametrize("train", ["13.0", "13.2", "13.4"])
def test_a_plain_nvcc_builds_with_the_default_compiler(sid: Chroot, real_wheel_cache: Path,  # noqa: F811
                                                       train: str) -> None:
    prefix, _ = tree(sid, real_wheel_cache, train)
    check_build(build_and_run(sid, prefix))
    doctor_and_verify(sid, prefix)


@pytest.mark.parametrize("train", ["13.0", "13.2"])
def test_a_plain_nvcc_builds_with_g_15_exported(sid: Chroot, real_wheel_cache: Path,  # noqa: F811
                                                train: str) -> None:
    """What `env` chooses for these trains here (g++-16 refused), exported by hand: an override holds."""
    prefix, said = tree(sid, real_wheel_cache, train)
    fixed = train == "13.0"
    assert ("host fix glibc-2.42-rsqrt: include/crt/math_functions.h, include/crt/math_functions.hpp "
            "changed") in said if fixed else "host fix" not in said
    check_build(build_and_run(sid, prefix, "g++-15"))
    doctor_and_verify(sid, prefix, "g++-15")


def test_13_0_without_the_host_fix_fails_on_this_host(sid: Chroot, real_wheel_cache: Path) -> None:  # noqa: F811
    prefix, said = tree(sid, real_wheel_cache, "13.0", "--no-host-fixes")
    assert "host fix" not in said
    r = build_and_run(sid, prefix, "g++-15")
    assert r.returncode != 0 and CLASH in r.stdout + r.stderr, r.stdout + r.stderr
    v = sid.run(f"cudaredist verify --prefix {shlex.quote(sid.path(prefix))}")
    assert v.returncode == 0, v.stdout  # NVIDIA's bytes, as the record says


MATH = ("include/crt/math_functions.h", "include/crt/math_functions.hpp")


@pytest.mark.parametrize("fixes", [True, False], ids=["fixed", "nvidia"])
def test_12_9_headers_build_here_with_both_host_fixes(sid: Chroot, real_wheel_cache: Path,  # noqa: F811
                                                      fixes: bool) -> None:
    """CUDA 12.x needs glibc-2.41-sinpi-cospi as well here. Its compiler is not on PyPI (NVIDIA's
    cu12 nvcc wheels hold ptxas, NVVM and the crt headers, no nvcc driver or cudafe++), so 12.9's
    math headers, as install lays them out, stand in a hard-linked copy of 13.0's NVIDIA tree."""
    headers, said = tree(sid, real_wheel_cache, "12.9", "--only", "--component", "cuda_nvcc",
                         *(() if fixes else ("--no-host-fixes",)))
    for fix in ("glibc-2.42-rsqrt", "glibc-2.41-sinpi-cospi"):
        assert (f"host fix {fix}: include/crt/math_functions.h, include/crt/math_functions.hpp changed"
                in said) == fixes, said
    base, _ = tree(sid, real_wheel_cache, "13.0", "--no-host-fixes")
    mixed = sid.host_dir / f"mixed-12.9-{'fixed' if fixes else 'nvidia'}"
    if not mixed.exists():
        shutil.copytree(base, mixed, symlinks=True, copy_function=os.link)
        for rel in MATH:
            os.unlink(mixed / rel)  # a hard link to the 13.0 tree's file: replaced, never written to
            shutil.copyfile(headers / rel, mixed / rel)
    r = build_and_run(sid, mixed, "g++-15")
    if fixes:
        check_build(r)
    else:
        out = r.stdout + r.stderr
        assert r.returncode != 0 and CLASH in out, out
        assert 'exception specification is incompatible with that of previous function "sinpi"' in out
