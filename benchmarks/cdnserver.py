"""A loopback file server that behaves like a CDN link, for the install benchmark.

HTTP/1.1 with keep-alive, single-range ``Range`` requests (206/416) and HEAD, serving one
directory on 127.0.0.1 only. Each response waits a time-to-first-byte before its headers;
body bytes pass two token buckets, one per connection and one shared by all connections,
in 256 KiB writes (no sendfile: the buckets must see every write). A directory answers with its
``index.html``, or with its ``index.json`` to a client that accepts PEP 691's
``application/vnd.pypi.simple.v1+json`` (so a package index can be served from files).

Everything is bounded: requests per connection and in total, idle connections time out,
and the server exits by itself after ``--max-seconds`` or when its parent goes away.

    python benchmarks/cdnserver.py --root MIRROR [--conn-rate 20e6] [--agg-rate 200e6] [--ttfb 0.025]

prints its base URL (``http://127.0.0.1:PORT/``) on the first line of stdout. ``GET /__stats__``
answers with JSON counters (requests, bytes, connections, peak concurrent connections);
``/__stats__?reset=1`` zeroes them after answering.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import posixpath
import re
import socket
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

WRITE_SIZE = 256 << 10
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
PEP691 = "application/vnd.pypi.simple.v1+json"
_TYPES = {".json": "application/json", ".html": "text/html; charset=utf-8", ".txt": "text/plain"}


class TokenBucket:
    """Paces bytes to ``rate`` per second with a burst of ``burst`` bytes (GCRA, thread-safe).

    ``reserve(n)`` books ``n`` bytes and returns the monotonic time at which they may go;
    bookings are served in the order they were made, so concurrent senders share fairly.
    """

    def __init__(self, rate: float, burst: int = WRITE_SIZE) -> None:
        self.rate = rate
        self.tolerance = burst / rate if rate > 0 else 0.0
        self._tat = 0.0  # theoretical arrival time of the next byte
        self._lock = threading.Lock()

    def reserve(self, n: int) -> float:
        if self.rate <= 0:
            return 0.0
        with self._lock:
            now = time.monotonic()
            tat = max(self._tat, now)
            self._tat = tat + n / self.rate
            return max(now, tat - self.tolerance)


def _sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.requests = self.ranged = self.connections = self.bytes = 0
        self.active = getattr(self, "active", 0)
        self.peak = self.active

    def snapshot(self) -> dict[str, int]:
        return {"requests": self.requests, "ranged_requests": self.ranged, "connections": self.connections,
                "bytes": self.bytes, "active_connections": self.active, "peak_connections": self.peak}


class CDNServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, root: Path, *, conn_rate: float, agg_rate: float, ttfb: float,
                 max_requests: int, max_requests_per_connection: int, idle_timeout: float) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.root = root.resolve()
        self.conn_rate = conn_rate
        self.aggregate = TokenBucket(agg_rate)
        self.ttfb = ttfb
        self.max_requests = max_requests
        self.max_requests_per_connection = max_requests_per_connection
        self.idle_timeout = idle_timeout
        self.stats = Stats()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CDNServer
    server_version = "cdnserver/1"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.idle_timeout)  # an idle keep-alive connection ends
        # headers and body are separate writes: without this, Nagle + delayed ACK add ~40 ms
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.bucket = TokenBucket(self.server.conn_rate)
        self.served = 0
        self.buf = bytearray(WRITE_SIZE)
        st = self.server.stats
        with st.lock:
            st.connections += 1
            st.active += 1
            st.peak = max(st.peak, st.active)

    def finish(self) -> None:
        st = self.server.stats
        with st.lock:
            st.active -= 1
        super().finish()

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    # -- one request -----------------------------------------------------------------------------
    def _count(self, ranged: bool) -> bool:
        st = self.server.stats
        with st.lock:
            st.requests += 1
            st.ranged += ranged
            over = st.requests > self.server.max_requests
        self.served += 1
        if self.served >= self.server.max_requests_per_connection:
            self.close_connection = True
        return not over

    def _plain(self, code: int, text: str, extra: dict[str, str] | None = None, body: bool = True) -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _resolve(self, path: str) -> Path | None:
        rel = posixpath.normpath(unquote(path)).lstrip("/")
        if rel.startswith("..") or "\0" in rel:
            return None
        p = self.server.root / rel if rel not in ("", ".") else self.server.root
        if p.is_dir():
            # PEP 691: a package index page as JSON to a client that asks for it, else the HTML
            wants_json = PEP691 in self.headers.get("Accept", "")
            p = p / "index.json" if wants_json and (p / "index.json").is_file() else p / "index.html"
        return p if p.is_file() else None

    def _serve(self, *, body: bool) -> None:
        url = urlsplit(self.path)
        rng = self.headers.get("Range")
        if not self._count(rng is not None):
            self.close_connection = True
            self._plain(503, "request limit of this benchmark server reached\n", {"Connection": "close"},
                        body)
            return
        if url.path == "/__stats__":
            st = self.server.stats
            with st.lock:
                snap = st.snapshot()
                if "reset=1" in url.query:
                    st.reset()
            data = json.dumps(snap).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if self.server.ttfb > 0:
            time.sleep(self.server.ttfb)
        path = self._resolve(url.path)
        if path is None:
            self._plain(404, "not found\n", body=body)
            return
        size = path.stat().st_size
        start, end = 0, size  # [start, end)
        status = 200
        if rng is not None:
            m = _RANGE.match(rng.strip())
            if m is None or (not m.group(1) and not m.group(2)):
                self._plain(416, "only one byte range is supported\n", {"Content-Range": f"bytes */{size}"},
                            body)
                return
            if m.group(1):
                start = int(m.group(1))
                end = min(size, int(m.group(2)) + 1) if m.group(2) else size
            else:  # suffix range: the last N bytes
                start = max(0, size - int(m.group(2)))
            if start >= size or start >= end:
                self._plain(416, "range not satisfiable\n", {"Content-Range": f"bytes */{size}"}, body)
                return
            status = 206
        self.send_response(status)
        kind = PEP691 if path.name == "index.json" and not url.path.endswith(".json") else None
        self.send_header("Content-Type", kind or _TYPES.get(path.suffix, "application/octet-stream"))
        self.send_header("Content-Length", str(end - start))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.end_headers()
        if body:
            self._send_body(path, start, end)

    def _send_body(self, path: Path, start: int, end: int) -> None:
        agg = self.server.aggregate
        view = memoryview(self.buf)
        sent = 0
        try:
            with open(path, "rb", buffering=0) as fh:
                fh.seek(start)
                left = end - start
                while left > 0:
                    n = fh.readinto(view[: min(WRITE_SIZE, left)])
                    if not n:
                        raise OSError(f"{path} shrank while being served")
                    _sleep_until(self.bucket.reserve(n))
                    _sleep_until(agg.reserve(n))
                    self.wfile.write(view[:n])  # an unbuffered socket writer: sendall
                    left -= n
                    sent += n
        finally:
            st = self.server.stats
            with st.lock:
                st.bytes += sent


def _watch(server: CDNServer, max_seconds: float, parent: int) -> None:
    """Stop after ``max_seconds``, or as soon as the process that started us is gone."""
    deadline = time.monotonic() + max_seconds
    while time.monotonic() < deadline:
        if os.getppid() != parent:
            break
        time.sleep(0.5)
    server.shutdown()


def start_in_thread(root: Path, **kwargs: float) -> CDNServer:
    """Run a server in this process (for tests and experiments); stop it with ``shutdown()``."""
    srv = CDNServer(root, conn_rate=kwargs.get("conn_rate", 0), agg_rate=kwargs.get("agg_rate", 0),
                    ttfb=kwargs.get("ttfb", 0), max_requests=int(kwargs.get("max_requests", 100_000)),
                    max_requests_per_connection=int(kwargs.get("max_requests_per_connection", 10_000)),
                    idle_timeout=kwargs.get("idle_timeout", 30.0))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True, help="directory to serve")
    ap.add_argument("--conn-rate", type=float, default=20e6, help="bytes/s per connection (0: no cap)")
    ap.add_argument("--agg-rate", type=float, default=200e6, help="bytes/s for all connections (0: no cap)")
    ap.add_argument("--ttfb", type=float, default=0.025, help="seconds before each response's headers")
    ap.add_argument("--max-seconds", type=float, default=3600, help="exit after this long")
    ap.add_argument("--max-requests", type=int, default=100_000, help="answer 503 after this many")
    ap.add_argument("--max-requests-per-connection", type=int, default=10_000)
    ap.add_argument("--idle-timeout", type=float, default=30.0, help="close idle connections after this")
    a = ap.parse_args(argv)
    if not a.root.is_dir():
        ap.error(f"{a.root} is not a directory")
    srv = CDNServer(a.root, conn_rate=a.conn_rate, agg_rate=a.agg_rate, ttfb=a.ttfb,
                    max_requests=a.max_requests, max_requests_per_connection=a.max_requests_per_connection,
                    idle_timeout=a.idle_timeout)
    threading.Thread(target=_watch, args=(srv, a.max_seconds, os.getppid()), daemon=True).start()
    print(srv.base_url, flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
