"""Session fixtures: a redist-shaped mirror of CUDA 13.0.2 with REAL NVIDIA binaries, and nginx.

The mirror is built once per session by ``cudaredist mirror 13.0.2 --source pypi`` (NVIDIA's
component wheels from PyPI, re-packed as redist archives) for linux-x86_64 and
windows-x86_64, into a session temp dir. The wheels go through cudaredist's download cache:
``$CUDAREDIST_TEST_CACHE`` when set (kept across sessions: a warm rerun needs only PyPI's
index pages), else a session temp dir. ``real_mirror_1302_libs`` completes a hard-linked copy of
it with the linux-x86_64 libraries that the `build` profile needs (cuRAND, NVRTC). Import the
fixtures into a test module (the mirror fixture needs the cache fixture in the module too)::

    from tests.realmirror import real_mirror_1302, real_wheel_cache  # noqa: F401
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

LABEL = "13.0.2"
PLATFORMS = ("linux-x86_64", "windows-x86_64")
ENV_CACHE = "CUDAREDIST_TEST_CACHE"
XZ_PRESET = "1"  # a test fixture: fast to build (the command's default is 6)
# Each module that imports a fixture gets its own copy of it, even session-scoped: what the
# first copy made is kept here, so the session builds the mirror once.
_made: dict[str, Path] = {}


# Variables through which a host toolkit could leak into a build; the e2e tests drop them all.
HOST_CUDA_VARS = ("CUDA_PATH", "CUDA_HOME", "CUDA_ROOT", "CUDACXX", "CUDAToolkit_ROOT",
                  "CUDA_TOOLKIT_ROOT_DIR", "LD_LIBRARY_PATH", "CPATH", "LIBRARY_PATH",
                  "CMAKE_PREFIX_PATH", "CMAKE_GENERATOR", "CXX", "CC")


def host_free_env(cache: Path) -> dict[str, str]:
    """No CUDA from the host: its variables unset, PATH without /usr/local/bin (a system nvcc)."""
    env = {k: v for k, v in os.environ.items()
           if k not in HOST_CUDA_VARS and not k.startswith("CUDA_PATH_V")}
    env["PATH"] = "/usr/bin:/bin"
    env["CUDAREDIST_CACHE_DIR"] = str(cache)
    return env


def run_cudaredist(*args: str, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudaredist", *args], env=env, text=True,
                          capture_output=True, timeout=timeout)


@contextmanager
def scratch(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Path]:
    """A module fixture's folder, removed when the fixture is torn down. pytest keeps every
    ``mktemp`` folder to the end of the run: the suite's trees, sid root sessions and builds came to
    about 35 GB at the peak of a CI run, more than some machines have free."""
    path = tmp_path_factory.mktemp(name)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def dropped_at_end(trees: dict[str, Path]) -> Iterator[None]:
    """A module's autouse fixture: the trees its parametrized fixture made once per module (each
    in a ``mktemp`` folder of its own), removed when the module is done."""
    yield
    for prefix in trees.values():
        shutil.rmtree(prefix.parent, ignore_errors=True)
    trees.clear()


def _shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory every pytest-xdist worker of this run shares (the run's own temp dir when serial)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Path]) -> Path:
    """``make(dir)`` once per run, whatever the number of workers: the first builds under a lock,
    the others wait for it and use what it built."""
    import filelock

    if name not in _made:
        root = _shared(tmp_path_factory)
        done = root / f"{name}.done"
        with filelock.FileLock(str(root / f"{name}.lock")):
            if not done.is_file():
                target = root / name
                if target.exists():  # a worker that failed half-way: start again
                    shutil.rmtree(target)
                target.mkdir()
                done.write_text(str(make(target)))
        _made[name] = Path(done.read_text())
    return _made[name]


@pytest.fixture(scope="session")
def real_wheel_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """cudaredist's download cache for NVIDIA's wheels: $CUDAREDIST_TEST_CACHE or a dir of this run."""
    if "cache" not in _made:
        given = os.environ.get(ENV_CACHE)
        _made["cache"] = (Path(given).absolute() if given
                          else _once(tmp_path_factory, "pypi-wheel-cache", lambda d: d))
    return _made["cache"]


@pytest.fixture(scope="session")
def real_mirror_1302(tmp_path_factory: pytest.TempPathFactory, real_wheel_cache: Path) -> Path:
    """The mirror root (index.html, redistrib_13.0.2.json, archives) for both platforms."""
    return _once(tmp_path_factory, "real-mirror-1302", lambda d: _build_mirror(d, real_wheel_cache))


@pytest.fixture(scope="session")
def real_mirror_1343_windows_runtime(tmp_path_factory: pytest.TempPathFactory,
                                     real_wheel_cache: Path) -> Path:
    """A mirror of CUDA 13.4.3's Windows ``runtime`` profile (cudart, crt: about 3 MB of wheels)."""
    return _once(tmp_path_factory, "real-mirror-1343", lambda d: _build_mirror(
        d, real_wheel_cache, LABEL_134, ("windows-x86_64",), "runtime"))


@pytest.fixture(scope="session")
def real_mirror_1302_cusparselt(tmp_path_factory: pytest.TempPathFactory, real_wheel_cache: Path) -> Path:
    """CUDA 13.0.2 (nvcc profile) for linux-x86_64 with cuSPARSELt 0.10 inside, at
    ``<root>/cusparselt/redist/`` (``cudaredist mirror --with``): about 250 MB of wheels, stored
    (``--xz-preset store``: preset 1 took ~100 s of a CI run over cuSPARSELt's fatbins)."""
    return _once(tmp_path_factory, "real-mirror-1302-cusparselt", lambda d: _build_mirror(
        d, real_wheel_cache, platforms=("linux-x86_64",), products=("cusparselt=0.10",), preset="store"))


@pytest.fixture(scope="session")
def real_mirror_1302_sbsa(tmp_path_factory: pytest.TempPathFactory, real_wheel_cache: Path) -> Path:
    """CUDA 13.0.2's nvcc profile for linux-x86_64 and linux-sbsa (the halves of a cross tree),
    stored (``--xz-preset store``): about 330 MB of wheels."""
    return _once(tmp_path_factory, "real-mirror-1302-sbsa", lambda d: _build_mirror(
        d, real_wheel_cache, platforms=("linux-x86_64", "linux-sbsa"), preset="store"))


@pytest.fixture(scope="session")
def real_mirror_135(tmp_path_factory: pytest.TempPathFactory, real_wheel_cache: Path) -> Path:
    """CUDA 13.5.0's nvcc profile for linux-x86_64 (nvcc 13.5.37 beside NVTX 13.5.25), stored."""
    return _once(tmp_path_factory, "real-mirror-135", lambda d: _build_mirror(
        d, real_wheel_cache, LABEL_135, ("linux-x86_64",), preset="store"))


LABEL_134 = "13.4.3"
LABEL_135 = "13.5.0"
# What ATen/cuda/CUDAContext.h includes beyond the nvcc profile (cusparse.h, cublas_v2.h, cublasLt.h,
# cusolverDn.h): the part of the torch profile tests/e2e/test_torch_headers.py installs.
TORCH_HEADER_LIBS = ("libcublas", "libcusparse", "libcusolver")


@pytest.fixture(scope="session")
def real_mirror_1302_libs(tmp_path_factory: pytest.TempPathFactory, real_wheel_cache: Path,
                          real_mirror_1302: Path) -> Path:
    """linux-x86_64 of 13.0.2 for the `build` profile (nvcc + NVRTC, cuRAND): real_mirror_1302,
    hard-linked (its archives verify and stay), completed with those, stored (``--xz-preset store``,
    as real_mirror_1302_torch_libs)."""

    def make(d: Path) -> Path:
        root = d / "mirror"
        shutil.copytree(real_mirror_1302, root, copy_function=os.link)
        return _build_mirror(root, real_wheel_cache, platforms=("linux-x86_64",), profile="build",
                             preset="store")

    return _once(tmp_path_factory, "real-mirror-1302-libs", make)


@pytest.fixture(scope="session")
def real_mirror_1302_torch_libs(tmp_path_factory: pytest.TempPathFactory, real_wheel_cache: Path,
                                real_mirror_1302: Path) -> Path:
    """linux-x86_64 of 13.0.2: real_mirror_1302 (hard-linked) completed with TORCH_HEADER_LIBS, packed
    with ``--xz-preset store``: 1.0 GB of archives, which xz's preset 0 packs at ~6 MB/s (~190 s of
    a CI run); stored, in ~10 s."""

    def make(d: Path) -> Path:
        root = d / "mirror"
        shutil.copytree(real_mirror_1302, root, copy_function=os.link)
        return _build_mirror(root, real_wheel_cache, platforms=("linux-x86_64",),
                             components=TORCH_HEADER_LIBS, preset="store")

    return _once(tmp_path_factory, "real-mirror-1302-torch-libs", make)


def _build_mirror(root: Path, real_wheel_cache: Path, label: str = LABEL,
                  platforms: tuple[str, ...] = PLATFORMS, profile: str = "nvcc",
                  components: tuple[str, ...] = (), preset: str = XZ_PRESET,
                  products: tuple[str, ...] = ()) -> Path:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAREDIST_")}
    env["CUDAREDIST_CACHE_DIR"] = str(real_wheel_cache)
    cmd = [sys.executable, "-m", "cudaredist", "mirror", label, "--source", "pypi", "--profile", profile,
           *(a for p in platforms for a in ("--platform", p)),
           *(a for c in components for a in ("--component", c)), "--out", str(root),
           *(a for p in products for a in ("--with", p)), "--xz-preset", preset, "--json"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, f"cudaredist mirror --source pypi failed ({r.returncode}):\n{r.stderr[-4000:]}"
    report = json.loads(r.stdout)
    assert report["releases"] == [label], report
    manifest = json.loads((root / f"redistrib_{label}.json").read_text())
    for plat in platforms:
        assert any(isinstance(c, dict) and plat in c for c in manifest.values()), (plat, manifest)
    return root


def tree_of(prefix: Path) -> dict[str, tuple[str, str]]:
    """path -> ("file", sha256 + exec bit) / ("link", target) / ("dir", ""): what two installs of one
    release must agree on. Not licenses/ (a redist archive's own licence files may differ from a
    wheel's) and not .cudaredist/ (the record names its source)."""
    out: dict[str, tuple[str, str]] = {}
    for path in sorted(prefix.rglob("*")):
        rel = path.relative_to(prefix).as_posix()
        if rel.split("/")[0] in ("licenses", ".cudaredist"):
            continue
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            out[rel] = ("dir", "")
        else:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            out[rel] = ("file", f"{digest} {'x' if os.access(path, os.X_OK) else '-'}")
    return out


# -- a real web server --------------------------------------------------------------------------
NGINX_CONF = """\
{user}worker_processes 1;
daemon off;
pid {run}/nginx.pid;
error_log {run}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log {run}/access.log;
    client_body_temp_path {run}/body;
    proxy_temp_path {run}/proxy;
    fastcgi_temp_path {run}/fastcgi;
    uwsgi_temp_path {run}/uwsgi;
    scgi_temp_path {run}/scgi;
    types {{ text/html html; application/json json; application/zip zip; application/x-xz xz; }}
    default_type application/octet-stream;
    sendfile on;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{ index index.html; }}
    }}
}}
"""


def nginx_binary() -> str | None:
    import shutil

    found = shutil.which("nginx")
    if found:
        return found
    return "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def nginx_serve(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """nginx_serve(directory) -> base URL of a real nginx on 127.0.0.1 serving it (skips without nginx)."""
    import time

    if os.name == "nt":
        pytest.skip("POSIX: the Debian nginx package (a Linux program, configured with POSIX paths)")
    binary = nginx_binary()
    if binary is None:
        if os.environ.get("CI"):  # CI installs it (.ci/run): a missing nginx there is a failure
            pytest.fail("nginx is not installed although CI is set; .ci/run should have installed it")
        pytest.skip("nginx is not installed (apt-get install nginx; .ci/run does)")
    procs: list[subprocess.Popen[bytes]] = []

    def start(root: Path) -> str:
        run = tmp_path_factory.mktemp("nginx")
        # nginx's config has no quoting for '$' in root: serve through a link with a plain name
        (run / "root").symlink_to(Path(root).absolute(), target_is_directory=True)
        for _attempt in range(3):
            port = _free_port()
            user = "user root;\n" if hasattr(os, "geteuid") and os.geteuid() == 0 else ""
            conf = run / "nginx.conf"
            conf.write_text(NGINX_CONF.format(user=user, run=run, port=port, root=run / "root"))
            proc = subprocess.Popen([binary, "-p", str(run), "-c", str(conf), "-e", str(run / "error.log")],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and proc.poll() is None and not _listening(port):
                time.sleep(0.05)
            if proc.poll() is None and _listening(port):
                procs.append(proc)
                return f"http://127.0.0.1:{port}/"
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        log = (run / "error.log").read_text() if (run / "error.log").exists() else ""
        pytest.fail(f"nginx did not start: {log[-2000:]}")

    yield start
    for proc in procs:
        proc.terminate()  # SIGTERM: nginx's fast shutdown
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
