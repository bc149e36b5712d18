"""A session fixture: a redist-shaped mirror of CUDA 13.0.2 with REAL NVIDIA binaries.

Built once per session by ``../shared/tools/pypi-mirror.sh`` (NVIDIA's component wheels
from PyPI, re-packed as redist archives) for linux-x86_64 and windows-x86_64, into
``$CUDAREDIST_TEST_MIRROR`` when set (kept and reused across sessions) or a session
temp dir. Import it into a test module::

    from tests.realmirror import real_mirror_1302  # noqa: F401
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED

LABEL = "13.0.2"
PLATFORMS = ("linux-x86_64", "windows-x86_64")
SCRIPT = SHARED / "tools" / "pypi-mirror.sh"
ENV_DIR = "CUDAREDIST_TEST_MIRROR"


def _complete(root: Path) -> bool:
    """Does ``root`` already hold the manifest and every archive it lists for PLATFORMS?"""
    try:
        manifest = json.loads((root / f"redistrib_{LABEL}.json").read_text())
    except (OSError, ValueError):
        return False
    found = set()
    for comp in manifest.values():
        if not isinstance(comp, dict):
            continue
        for plat in PLATFORMS:
            entry = comp.get(plat)
            if isinstance(entry, dict) and "relative_path" in entry:
                p = root / entry["relative_path"]
                if not p.is_file() or p.stat().st_size != int(entry["size"]):
                    return False
                found.add(plat)
    return found == set(PLATFORMS)


@pytest.fixture(scope="session")
def real_mirror_1302(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The mirror root (index.html, redistrib_13.0.2.json, archives) for both platforms."""
    if not SCRIPT.is_file():
        pytest.skip(f"{SCRIPT} is absent (../shared is not next to the repository)")
    import filelock

    chosen = os.environ.get(ENV_DIR)
    root = Path(chosen).absolute() if chosen else tmp_path_factory.mktemp("real-mirror-1302")
    root.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(root.parent / f".{root.name}.build.lock")):
        if not _complete(root):
            env = dict(os.environ)
            # the script calls `pip` and `python3`: take this interpreter's (3.11+, has pip)
            env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
            r = subprocess.run(["bash", str(SCRIPT), LABEL, str(root), ",".join(PLATFORMS)],
                               env=env, capture_output=True, text=True, timeout=1200)
            assert r.returncode == 0, f"pypi-mirror.sh failed ({r.returncode}):\n{r.stderr[-4000:]}"
            assert _complete(root), f"pypi-mirror.sh left an incomplete mirror in {root}"
    return root


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

    binary = nginx_binary()
    if binary is None:
        pytest.skip("nginx is not installed (apt-get install nginx-light; .ci/run does)")
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
