"""Shared fixtures: isolated cache/env, mirrors built from tiny real archives, a loopback server."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.archives import build_mirror, toolkit
from tests.loopback import directory_handler, serving

if TYPE_CHECKING:
    from tests.sources.pypi.test_pypi_source import FakeIndex

SHARED = Path(__file__).resolve().parents[2] / "shared"
# NVIDIA's real manifests: ../shared/redist/manifests, or where CUDAREDIST_TEST_MANIFESTS says (ci.yml's
# test job fills that folder with .ci/fetch-manifests.py, from the list in .ci/manifests.txt)
MANIFESTS_VAR = "CUDAREDIST_TEST_MANIFESTS"
SHARED_MANIFESTS = Path(os.environ.get(MANIFESTS_VAR) or SHARED / "redist" / "manifests")

_SCRUB = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
          "all_proxy", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "CUDAREDIST_BASE_URL",
          "CUDAREDIST_MIRROR", "CUDAREDIST_CACHE_DIR", "CUDAREDIST_LOCK_TIMEOUT", "CUDAREDIST_SOURCE",
          "CUDA_PATH", "CUDA_HOME", "GITHUB_ENV", "GITHUB_PATH", "PIP_INDEX_URL", "CUDAREDIST_TRUSTED_HOST",
          "CUDAREDIST_CHANNEL",
          # where a --with product's folder is (CUDAREDIST_CUDNN_BASE_URL, ...)
          *(f"CUDAREDIST_{p.upper()}_BASE_URL" for p in ("cudnn", "cutensor", "cusparselt", "cudss")))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's proxies, caches or CUDA; each gets its own cache dir."""
    for name in _SCRUB:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUDAREDIST_CACHE_DIR", str(tmp_path / "cache"))
    # `--verbose` in one CliRunner test must not give the next one in this process tracebacks
    from cudaredist.commands import base

    monkeypatch.setattr(base, "_VERBOSE", False)


@pytest.fixture
def serve() -> Iterator[object]:
    """serve(directory) -> base URL of a real HTTP server on 127.0.0.1 serving it."""
    with contextlib.ExitStack() as servers:
        yield lambda directory: servers.enter_context(serving(directory_handler(directory)))


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
        if os.environ.get("CI") and os.environ.get(MANIFESTS_VAR):  # the fetch step should have filled it
            pytest.fail(f"{MANIFESTS_VAR}={SHARED_MANIFESTS} is absent although CI is set (ci.yml fills it "
                        "with .ci/fetch-manifests.py)")
        pytest.skip(f"{SHARED_MANIFESTS} is absent (the real NVIDIA manifests live in ../shared, or where "
                    f"{MANIFESTS_VAR} says: .ci/fetch-manifests.py fetches them)")
    return SHARED_MANIFESTS


@pytest.fixture
def fake_index() -> Iterator[FakeIndex]:
    """A package index with tiny wheels shaped like NVIDIA's (tests/sources/pypi/test_pypi_source.py),
    served through respx: what every test of the pypi source installs from."""
    import respx

    from tests.sources.pypi.test_pypi_source import FakeIndex

    idx = FakeIndex()
    with respx.mock(assert_all_called=False) as router:
        idx.mount(router)
        yield idx
