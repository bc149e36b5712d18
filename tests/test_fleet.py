"""A fleet behind one cache: docs/fleet/nginx-cuda-proxy.conf, run as shipped, in front of a
loopback origin shaped like NVIDIA's redist server, with eight concurrent installs through it.

The origin counts the body bytes it sends per path, so the test measures what the upstream
would pay: each archive about once (the slice module plus proxy_cache_lock), however many
runners and byte ranges ask for it. A second wave with the origin stopped proves that the cache
alone serves a fleet.
"""

from __future__ import annotations

import email.utils
import hashlib
import http.server
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.archives import Dir, Exe, MirrorArchive, build_mirror
from tests.hosts import skip_on_windows
from tests.realmirror import _free_port, _listening, nginx_binary, tree_of

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "docs" / "fleet" / "nginx-cuda-proxy.conf"
PLACEHOLDERS = ("@UPSTREAM@", "@LISTEN@", "@CACHE_DIR@")
REDIST = "/compute/cuda/redist/"  # the path NVIDIA serves the tree under; the config proxies only it
SLICE = 4 << 20                   # `slice 4m` in the config
RUNNERS = 8
LABEL = "13.0.1"
MiB = 1 << 20


# -- the origin: NVIDIA's server in miniature ---------------------------------------------------------
class _OriginHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _OriginServer
    timeout = 10

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        origin = self.server.origin
        path = unquote(urlsplit(self.path).path)
        found = origin.read(path)
        rng = self.headers.get("Range")
        if found is None:
            return self._send(path, rng, 404, b"not found\n", {})
        data, etag, mtime = found
        headers = {"ETag": etag, "Last-Modified": email.utils.formatdate(mtime, usegmt=True),
                   "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        if self.headers.get("If-None-Match") == etag:
            return self._send(path, rng, 304, b"", headers)
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng or "")
        if m is None:
            return self._send(path, rng, 200, data, headers)
        start = int(m[1])
        end = min(int(m[2]) + 1 if m[2] else len(data), len(data))
        if start >= len(data):
            return self._send(path, rng, 416, b"", {"Content-Range": f"bytes */{len(data)}"})
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
        return self._send(path, rng, 206, data[start:end], headers)

    def _send(self, path: str, rng: str | None, code: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        sent = 0
        try:
            for i in range(0, len(body), 64 << 10):
                self.wfile.write(body[i:i + (64 << 10)])
                sent += min(64 << 10, len(body) - i)
        finally:
            self.server.origin.count(path, rng, code, sent)


class _OriginServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        super().__init__(("127.0.0.1", 0), _OriginHandler)


class Origin:
    """Serves ``root`` on 127.0.0.1 (Range, ETag/If-None-Match) and counts the body bytes it sends."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.lock = threading.Lock()
        self.sent: dict[str, int] = defaultdict(int)
        self.requests: list[tuple[str, str | None, int]] = []
        self._srv = _OriginServer(self)
        self.base = f"http://127.0.0.1:{self._srv.server_address[1]}"
        self._thread = threading.Thread(target=self._srv.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def read(self, path: str) -> tuple[bytes, str, float] | None:
        p = (self.root / path.lstrip("/")).resolve()
        if p.is_dir():
            p = p / "index.html"
        if not p.is_relative_to(self.root) or not p.is_file():
            return None
        data = p.read_bytes()
        return data, '"' + hashlib.sha256(data).hexdigest()[:16] + '"', p.stat().st_mtime

    def count(self, path: str, rng: str | None, code: int, n: int) -> None:
        with self.lock:
            self.sent[path] += n
            self.requests.append((path, rng, code))

    def stop(self) -> None:
        if self._srv.socket.fileno() < 0:
            return  # already stopped
        self._srv.shutdown()
        self._srv.server_close()
        self._thread.join(timeout=10)


# -- the proxy: the shipped config, inside a minimal main config -------------------------------------
MAIN_CONF = """\
{user}worker_processes 2;
daemon off;
pid {run}/nginx.pid;
error_log {run}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    log_format fleet '$request_uri "$http_range" $status $upstream_cache_status $body_bytes_sent';
    access_log {run}/access.log fleet;
    client_body_temp_path {run}/body;
    proxy_temp_path {run}/proxy;
    fastcgi_temp_path {run}/fastcgi;
    uwsgi_temp_path {run}/uwsgi;
    scgi_temp_path {run}/scgi;
    default_type application/octet-stream;
    include {run}/cuda-proxy.conf;
}}
"""


def require_nginx_with_slice() -> str:
    skip_on_windows("the Debian nginx package (a Linux program, configured with POSIX paths)")
    binary = nginx_binary()
    problem = None
    if binary is None:
        problem = "nginx is not installed (apt-get install nginx; .ci/run does)"
    else:
        built = subprocess.run([binary, "-V"], capture_output=True, text=True, timeout=30)
        if "http_slice_module" not in built.stdout + built.stderr:
            problem = (f"{binary} lacks ngx_http_slice_module, which docs/fleet/nginx-cuda-proxy.conf "
                       "needs (Debian: apt-get install nginx)")
    if problem is None:
        assert binary is not None
        return binary
    if os.environ.get("CI"):  # CI installs it (.ci/run): missing there is a failure, not a skip
        pytest.fail(problem + "; CI is set and .ci/run should have installed it")
    pytest.skip(problem)


def render(conf: str, *, upstream: str, listen: str, cache_dir: Path) -> str:
    for token, value in zip(PLACEHOLDERS, (upstream, listen, str(cache_dir)), strict=True):
        conf = conf.replace(token, value)
    return conf


class Proxy:
    def __init__(self, binary: str, run: Path, upstream: str) -> None:
        self.run = run
        user = "user root;\n" if os.geteuid() == 0 else ""
        for _attempt in range(3):
            port = _free_port()
            (run / "cuda-proxy.conf").write_text(
                render(CONF.read_text(), upstream=upstream, listen=f"127.0.0.1:{port}",
                       cache_dir=run / "cache"))
            (run / "nginx.conf").write_text(MAIN_CONF.format(user=user, run=run))
            self.proc = subprocess.Popen([binary, "-p", str(run), "-c", str(run / "nginx.conf"),
                                          "-e", str(run / "error.log")],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.proc.poll() is None and not _listening(port):
                time.sleep(0.05)
            if self.proc.poll() is None and _listening(port):
                self.base = f"http://127.0.0.1:{port}"
                return
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
        pytest.fail(f"nginx did not start with the fleet config: {self.errors()[-3000:]}")

    def errors(self) -> str:
        log = self.run / "error.log"
        return log.read_text() if log.exists() else ""

    def log(self) -> list[tuple[str, str, int, str, int]]:
        """(uri, Range, status, cache status, body bytes) per client request, in order."""
        rows = []
        for line in (self.run / "access.log").read_text().splitlines():
            uri, rng, status, cache, sent = re.fullmatch(r'(\S+) "(.*)" (\d+) (\S+) (\d+)', line).groups()
            rows.append((uri, rng, int(status), cache, int(sent)))
        return rows

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- a redist-shaped mirror big enough for ranged and segmented downloads -----------------------------
def blob(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)  # incompressible: the archive is as big as its member


def build_origin_tree(root: Path) -> Path:
    """A 13.0.1 nvcc profile for linux-x86_64: two archives past 2 x 4 MiB (downloaded as several
    concurrent ranges, spanning three slices), one of two slices (one plain GET), four tiny ones."""
    plat = "linux-x86_64"
    archives = [
        MirrorArchive("cuda_nvcc", plat, "13.0.88", {
            "bin/": Dir(), "bin/nvcc": Exe(b"#!/bin/sh\necho nvcc\n"), "bin/nvcc.profile": b"TOP = ..",
            "bin/ptxas": Exe(blob(1, 10 * MiB + 12345)), "LICENSE": b"eula"}),
        MirrorArchive("libnvvm", plat, "13.0.88", {"nvvm/bin/cicc": Exe(blob(2, 9 * MiB + 999))}),
        MirrorArchive("cuda_cudart", plat, "13.0.96", {
            "include/cuda_runtime.h": b"// rt", "lib/libcudart_static.a": blob(3, 5 * MiB),
            "LICENSE": b"eula"}),
        MirrorArchive("cuda_cccl", plat, "13.0.85", {"include/cccl/thrust/version.h": b"// t"}),
        MirrorArchive("cuda_crt", plat, "13.0.88", {"include/crt/host_config.h": b"// hc"}),
        MirrorArchive("cuda_profiler_api", plat, "13.0.85", {"include/cuda_profiler_api.h": b"// prof"}),
        MirrorArchive("cuda_nvtx", plat, "13.0.85", {"include/nvtx3/nvToolsExt.h": b"// nvtx"}),
    ]
    redist = root / REDIST.strip("/")
    build_mirror(redist, LABEL, archives)
    return redist


# -- the runners ---------------------------------------------------------------------------------------
CACHE_HOST = "cuda-cache.test"  # the proxy by name: plain HTTP that nothing authenticates


def cudaredist_env(mirror: str, proxy: str) -> dict[str, str]:
    """A runner of the fleet (docs/fleet.md): CUDAREDIST_MIRROR names the cache by host name, which
    this machine cannot resolve, so the cache is also the HTTP proxy for that name (loopback stays
    direct): the runner sends nginx `GET http://cuda-cache.test:PORT/...` as it would on a LAN."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CUDAREDIST_") and k.lower() not in ("http_proxy", "https_proxy", "all_proxy",
                                                                     "no_proxy")}
    env["CUDAREDIST_MIRROR"] = mirror
    env["HTTP_PROXY"], env["NO_PROXY"] = proxy, "127.0.0.1,localhost"
    return env


def install_wave(tmp: Path, name: str, *, mirror: str, base: str, proxy: str,
                 lock: Path | None = None) -> list[Path]:
    """RUNNERS installs at once, each with its own download cache and prefix."""
    env = cudaredist_env(mirror, proxy)
    prefixes = [tmp / f"{name}-{i}" / "cuda" for i in range(RUNNERS)]
    what = ["--lock", str(lock)] if lock is not None else ["13.0", "--platform", "linux-x86_64"]
    procs = [subprocess.Popen(
        [sys.executable, "-m", "cudaredist", "install", *what,
         "--prefix", str(p), "--cache-dir", str(p.parent / "cache"), "--base-url", base],
        env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for p in prefixes]
    outs = [p.communicate(timeout=300) for p in procs]
    for i, (proc, (_out, err)) in enumerate(zip(procs, outs, strict=True)):
        assert proc.returncode == 0, f"{name} runner {i} failed ({proc.returncode}):\n{err[-3000:]}"
        # nothing fell back to the base URL: every byte came through the cache
        assert "trying" not in err, f"{name} runner {i} left the mirror:\n{err}"
    for p in prefixes:
        verify = subprocess.run([sys.executable, "-m", "cudaredist", "verify", "--prefix", str(p)],
                                env=env, text=True, capture_output=True, timeout=120)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        record = json.loads((p / ".cudaredist" / "record.json").read_text())
        # the safe mode: hashes from the authenticated base (or the lock), every archive from the cache
        assert record["plan"]["base_url"] == base
        assert all(url.startswith(mirror) for url in record["provenance"]["archives"].values()), record
        if lock is not None:
            assert record["provenance"]["hashes_from"] == f"the lock file {lock}"
    return prefixes


def test_config_has_exactly_the_documented_placeholders() -> None:
    conf = CONF.read_text()
    assert sorted(set(re.findall(r"@[A-Z_]+@", conf))) == sorted(PLACEHOLDERS)
    rendered = render(conf, upstream="https://developer.download.nvidia.com", listen="8080",
                      cache_dir=Path("/var/cache/nginx/cuda-redist"))
    directives = "\n".join(line.split("#", 1)[0] for line in rendered.splitlines())
    assert "@" not in directives  # nothing left to fill in
    # the pieces docs/fleet.md promises: slices in the archive cache key, one fetch per entry
    assert "slice 4m;" in conf and "$slice_range" in conf and "proxy_cache_lock on;" in conf
    assert "proxy_cache_revalidate on;" in conf


@pytest.mark.e2e  # nginx and 16 installs (slow)
def test_fleet_of_runners_behind_one_nginx_cache(tmp_path: Path) -> None:
    binary = require_nginx_with_slice()
    redist = build_origin_tree(tmp_path / "origin")
    manifest = json.loads((redist / f"redistrib_{LABEL}.json").read_text())
    sizes = {REDIST + entry["linux-x86_64"]["relative_path"]: int(entry["linux-x86_64"]["size"])
             for entry in manifest.values() if isinstance(entry, dict)}
    assert sum(size >= 2 * SLICE for size in sizes.values()) == 2  # the segmented ones are there

    origin = Origin(tmp_path / "origin")
    run = tmp_path / "nginx"
    run.mkdir()
    proxy = Proxy(binary, run, origin.base)
    try:
        mirror = f"http://{CACHE_HOST}:{proxy.base.rsplit(':', 1)[1]}{REDIST}"
        base = origin.base + REDIST
        first = install_wave(tmp_path, "wave1", mirror=mirror, base=base, proxy=proxy.base)
        lock = tmp_path / "cuda.lock"
        locked = subprocess.run([sys.executable, "-m", "cudaredist", "lock", "13.0", "--platform",
                                 "linux-x86_64", "--base-url", base, "-o", str(lock)],
                                env=cudaredist_env(mirror, proxy.base), text=True, capture_output=True,
                                timeout=120)
        assert locked.returncode == 0, locked.stderr

        # the origin sent each archive's bytes about once, in aligned slices
        report = {path: (origin.sent[path], size) for path, size in sorted(sizes.items())}
        print("\norigin bytes per archive (sent / size):")
        for path, (sent, size) in report.items():
            print(f"  {path.rsplit('/', 1)[-1]:<48} {sent:>10} / {size:>10} = {sent / size:.3f}x")
        for path, (sent, size) in report.items():
            assert size <= sent <= 1.25 * size, (path, sent, size)
        archive_requests = [(p, r) for p, r, _code in origin.requests if p in sizes]
        assert archive_requests and all(
            r is not None and int(re.fullmatch(r"bytes=(\d+)-\d+", r)[1]) % SLICE == 0  # type: ignore[index]
            for _p, r in archive_requests), archive_requests
        # the runners did cut the big archives into concurrent ranges (cudaredist/net.py)
        log = proxy.log()
        ranged = {uri for uri, rng, status, _c, _n in log if rng != "-" and status == 206}
        assert {p for p, size in sizes.items() if size >= 2 * SLICE} <= ranged, ranged
        to_runners = [row for row in log if row[0] in sizes]
        print(f"  nginx answered {len(to_runners)} archive requests from {RUNNERS} runners "
              f"({sum(row[1] != '-' for row in to_runners)} ranged, {sum(row[4] for row in to_runners)} "
              f"bytes); the origin answered {len(archive_requests)} slice requests "
              f"({sum(n for _s, (n, _z) in report.items())} bytes)")
        assert len(first) == RUNNERS

        # second wave: fresh caches, and no origin at all. The cache is plain HTTP, so its manifest
        # is not believed: without the base, a runner needs the lock (or --trusted-host)
        origin.stop()
        alone = subprocess.run([sys.executable, "-m", "cudaredist", "resolve", "13.0", "--base-url", base],
                               env=cudaredist_env(mirror, proxy.base), text=True, capture_output=True,
                               timeout=120)
        assert alone.returncode == 1 and "Three ways out" in alone.stderr, alone.stderr
        before = len(proxy.log())
        second = install_wave(tmp_path, "wave2", mirror=mirror, base=base, proxy=proxy.base, lock=lock)
        wave2 = [row for row in proxy.log()[before:] if row[0] in sizes]
        assert {row[0] for row in wave2} == set(sizes)
        assert all(status in (200, 206) and cache == "HIT" for _u, _r, status, cache, _n in wave2), wave2
        reference = tree_of(first[0])
        assert all(tree_of(p) == reference for p in first[1:] + second)
    finally:
        proxy.stop()
        origin.stop()
    assert "[emerg]" not in proxy.errors() and "[alert]" not in proxy.errors(), proxy.errors()
