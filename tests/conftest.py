"""Shared fixtures: isolated cache/env, mirrors built from tiny real archives, a loopback server."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.archives import build_mirror, toolkit

SHARED = Path(__file__).resolve().parents[2] / "shared"
SHARED_MANIFESTS = SHARED / "redist" / "manifests"

_SCRUB = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
          "all_proxy", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "CUDAREDIST_BASE_URL",
          "CUDAREDIST_MIRROR", "CUDAREDIST_CACHE_DIR", "CUDAREDIST_LOCK_TIMEOUT", "CUDAREDIST_SOURCE",
          "CUDA_PATH", "CUDA_HOME", "GITHUB_ENV", "GITHUB_PATH", "PIP_INDEX_URL", "CUDAREDIST_TRUSTED_HOST")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's proxies, caches or CUDA; each gets its own cache dir."""
    for name in _SCRUB:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUDAREDIST_CACHE_DIR", str(tmp_path / "cache"))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[object]:
    """serve(directory) -> base URL of a real HTTP server on 127.0.0.1 serving it."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(directory: Path) -> str:
        handler = functools.partial(_QuietHandler, directory=str(directory))
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    """A tiny 13.0.1 mirror (linux-x86_64 and windows-x86_64) plus an older 12.9.1 release."""
    root = tmp_path / "mirror"
    build_mirror(root, "13.0.1", toolkit("linux-x86_64") + toolkit("windows-x86_64"))
    build_mirror(root, "12.9.1", [a for a in toolkit("linux-x86_64")
                                  if a.component in ("cuda_nvcc", "cuda_cudart", "cuda_cccl",
                                                      "cuda_profiler_api", "cuda_nvtx")])
    return root


@pytest.fixture
def shared_manifests() -> Path:
    if not SHARED_MANIFESTS.is_dir():
        pytest.skip(f"{SHARED_MANIFESTS} is absent (the real NVIDIA manifests live in ../shared)")
    return SHARED_MANIFESTS
