"""Loopback HTTP(S) servers for the tests: a file server with scripted faults, and a forward proxy.

``FaultServer(root)`` serves the files under ``root`` on 127.0.0.1 (HTTP/1.1 keep-alive,
a bounded number of handler threads) and records every request. Faults are scripted per
URL path; the counted ones are used up by the requests they hit, then the file is served
normally (``times=None``: every time)::

    srv.status(p, 503, times=2)              # two 503s, then the file
    srv.status(p, 429, retry_after="7")      # 429 with Retry-After
    srv.reset(p, at=1000)                    # the connection closes when the body reaches byte 1000
    srv.reset(p, at=1000, rst=True)          # ... with a TCP RST instead of a FIN
    srv.stall(p, at=1000, seconds=2)         # sending pauses at byte 1000
    srv.flip(p, at=10)                       # byte 10 is inverted (every response)
    srv.truncate(p, to=500)                  # the file is 500 bytes long (honest Content-Length)
    srv.truncate(p, to=500, honest=False)    # Content-Length of the whole file, body ends at 500
    srv.pad(p, b"junk")                      # the body is longer than the file
    srv.ignore_range(p)                      # Range is ignored: always 200 and the whole body
    srv.always_partial(p)                    # 206 (with the whole file's Content-Range) even without Range
    srv.unsized(p)                           # no Content-Length: the body ends where the connection does

Offsets are positions in the file, so a fault hits whichever request's byte range covers
it: a plain GET, a resumed one, or one segment of a segmented download.
``srv.requests`` lists ``Request(method, path, range, status)`` in arrival order.
"""

from __future__ import annotations

import http.client
import http.server
import socket
import ssl
import struct
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

SEND_CHUNK = 16 << 10


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    range: str | None
    status: int


@dataclass
class _Cut:
    at: int
    kind: str            # "reset" | "stall"
    times: int | None    # None: every time
    seconds: float = 0.0
    rst: bool = False


@dataclass
class _Status:
    code: int
    retry_after: str | None
    times: int | None


@dataclass
class _Script:
    statuses: list[_Status] = field(default_factory=list)
    cuts: list[_Cut] = field(default_factory=list)
    flips: list[int] = field(default_factory=list)
    truncate_to: int | None = None
    honest: bool = True
    pad: bytes = b""
    ranges: bool = True
    always_partial: bool = False
    unsized: bool = False


def _use(times: int | None) -> tuple[bool, int | None]:
    """(applies, remaining) for a fault with ``times`` uses left."""
    if times is None:
        return True, None
    return times > 0, max(0, times - 1)


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """[start, end) of a single "bytes=a-b" / "bytes=a-" range; None when unparsable."""
    unit, _, spec = header.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        return None
    first, _, last = spec.strip().partition("-")
    if not first.isdigit():
        return None
    start = int(first)
    end = int(last) + 1 if last.isdigit() else size
    return start, min(end, size)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    timeout = 10  # an idle keep-alive connection does not hold a thread for ever

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        owner = self.server.owner
        path = unquote(urlsplit(self.path).path)
        rng = self.headers.get("Range")
        status = owner.take_status(path)
        if status is not None:
            headers = {"Retry-After": status.retry_after} if status.retry_after is not None else {}
            return self._reply(path, rng, status.code, b"", headers)
        data = owner.read(path)
        if data is None:
            return self._reply(path, rng, 404, b"not found\n", {"Content-Type": "text/plain"})
        script = owner.script(path)
        if script.truncate_to is not None and script.honest:
            data = data[: script.truncate_to]
        if script.flips:
            buf = bytearray(data)
            for at in script.flips:
                if at < len(buf):
                    buf[at] ^= 0xFF
            data = bytes(buf)
        data += script.pad
        size = len(data)
        start, end, code = 0, size, 200
        headers = {"Content-Type": "application/octet-stream"}
        parsed = _parse_range(rng, size) if rng is not None and script.ranges else None
        if script.ranges:
            headers["Accept-Ranges"] = "bytes"
        if parsed is not None and parsed[0] >= size:
            return self._reply(path, rng, 416, b"", {"Content-Range": f"bytes */{size}"})
        if parsed is not None:
            start, end = parsed
            code = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        elif script.always_partial:
            code = 206
            headers["Content-Range"] = f"bytes 0-{size - 1}/{size}"
        body_end = end
        if script.truncate_to is not None and not script.honest:
            body_end = max(start, min(end, script.truncate_to))
        cut = owner.take_cut(path, start, body_end)
        if script.unsized:
            headers["Connection"] = "close"
            self.close_connection = True
        else:
            headers["Content-Length"] = str(end - start)
        owner.record(Request(self.command, path, rng, code))
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        try:
            stop = cut.at if cut is not None else body_end
            self._send(data, start, stop)
            if cut is not None and cut.kind == "stall":
                owner.stopping.wait(cut.seconds)
                self._send(data, stop, body_end)
            elif cut is not None:
                return self._abort(rst=cut.rst)
            if body_end < end:  # a dishonest Content-Length: the body stops short
                return self._abort(rst=False)
        except OSError:  # the client gave up, e.g. on a stalled transfer
            self.close_connection = True

    def _send(self, data: bytes, start: int, end: int) -> None:
        for i in range(start, end, SEND_CHUNK):
            self.wfile.write(data[i:min(end, i + SEND_CHUNK)])

    def _abort(self, *, rst: bool) -> None:
        self.close_connection = True
        if rst:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        else:
            self.connection.shutdown(socket.SHUT_RDWR)

    def _reply(self, path: str, rng: str | None, code: int, body: bytes, headers: dict[str, str]) -> None:
        self.server.owner.record(Request(self.command, path, rng, code))
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Quiet:
    """Clients that drop a connection (a timed-out read, a closed pool) are not server errors."""

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError, ssl.SSLError)):
            super().handle_error(request, client_address)  # type: ignore[misc]


class _Server(_Quiet, http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, owner: FaultServer, max_threads: int) -> None:
        self.owner = owner
        self.slots = threading.BoundedSemaphore(max_threads)
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request, client_address):  # type: ignore[no-untyped-def]
        self.slots.acquire()  # bounded: the accept loop waits while every thread is busy
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):  # type: ignore[no-untyped-def]
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class FaultServer:
    """Serves ``root`` on 127.0.0.1 with scripted faults; ``ssl_context`` makes it HTTPS."""

    def __init__(self, root: Path, *, ssl_context: ssl.SSLContext | None = None,
                 max_threads: int = 32) -> None:
        self.root = root.resolve()
        self.lock = threading.Lock()
        self.scripts: dict[str, _Script] = {}
        self.requests: list[Request] = []
        self.stopping = threading.Event()
        self._files: dict[Path, bytes] = {}
        self._srv = _Server(self, max_threads)
        if ssl_context is not None:
            self._srv.socket = ssl_context.wrap_socket(self._srv.socket, server_side=True)
        self.scheme = "https" if ssl_context is not None else "http"
        threading.Thread(target=self._srv.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    @property
    def base(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self._srv.server_address[1]}/"

    def url(self, path: str) -> str:
        return self.base + path.lstrip("/")

    def close(self) -> None:
        self.stopping.set()  # wakes stalled handlers
        self._srv.shutdown()
        self._srv.server_close()

    def __enter__(self) -> FaultServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def read(self, path: str) -> bytes | None:
        p = (self.root / path.lstrip("/")).resolve()
        if p.is_dir():
            p = p / "index.html"
        if not p.is_relative_to(self.root) or not p.is_file():
            return None
        with self.lock:
            if p not in self._files:
                self._files[p] = p.read_bytes()
            return self._files[p]

    # -- scripting -----------------------------------------------------------------------------------
    def script(self, path: str) -> _Script:
        with self.lock:
            return self.scripts.setdefault("/" + path.lstrip("/"), _Script())

    def status(self, path: str, code: int, *, times: int | None = 1, retry_after: str | None = None) -> None:
        self.script(path).statuses.append(_Status(code, retry_after, times))

    def reset(self, path: str, *, at: int, times: int | None = 1, rst: bool = False) -> None:
        self.script(path).cuts.append(_Cut(at, "reset", times, rst=rst))

    def stall(self, path: str, *, at: int, seconds: float, times: int | None = 1) -> None:
        self.script(path).cuts.append(_Cut(at, "stall", times, seconds=seconds))

    def flip(self, path: str, *, at: int) -> None:
        self.script(path).flips.append(at)

    def truncate(self, path: str, *, to: int, honest: bool = True) -> None:
        s = self.script(path)
        s.truncate_to, s.honest = to, honest

    def pad(self, path: str, extra: bytes) -> None:
        self.script(path).pad = extra

    def ignore_range(self, path: str) -> None:
        self.script(path).ranges = False

    def always_partial(self, path: str) -> None:
        self.script(path).always_partial = True

    def unsized(self, path: str) -> None:
        self.script(path).unsized = True

    def take_status(self, path: str) -> _Status | None:
        script = self.script(path)
        with self.lock:
            for st in script.statuses:
                applies, st.times = _use(st.times)
                if applies:
                    return st
        return None

    def take_cut(self, path: str, start: int, end: int) -> _Cut | None:
        """The first unused reset/stall whose offset lies in [start, end), used up by this request."""
        script = self.script(path)
        with self.lock:
            for cut in script.cuts:
                if start <= cut.at < end:
                    applies, remaining = _use(cut.times)
                    if applies:
                        cut.times = remaining
                        return cut
        return None

    # -- what was asked --------------------------------------------------------------------------------
    def record(self, req: Request) -> None:
        with self.lock:
            self.requests.append(req)

    def requests_for(self, path: str) -> list[Request]:
        path = "/" + path.lstrip("/")
        with self.lock:
            return [r for r in self.requests if r.path == path]

    def ranges_for(self, path: str) -> list[str | None]:
        return [r.range for r in self.requests_for(path)]


# -- a forward proxy --------------------------------------------------------------------------------
_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailers",
        "transfer-encoding", "upgrade", "content-length"}


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer
    timeout = 10

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        target = urlsplit(self.path)  # a forward proxy is sent absolute URLs
        with self.server.lock:
            self.server.seen.append(self.path)
        if target.scheme != "http" or not target.hostname:
            self.send_error(400, "absolute http:// URLs only")
            return
        conn = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=10)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            conn.request("GET", target.path + (f"?{target.query}" if target.query else ""), headers=headers)
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP:
                self.send_header(k, v)
        self.send_header("Via", "1.1 test-proxy")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _ProxyServer(_Quiet, http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[str] = []
        super().__init__(("127.0.0.1", 0), _ProxyHandler)


class ForwardProxy:
    """A plain-HTTP forward proxy on 127.0.0.1 that records the URLs it relays."""

    def __init__(self) -> None:
        self._srv = _ProxyServer()
        threading.Thread(target=self._srv.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._srv.server_address[1]}"

    @property
    def seen(self) -> list[str]:
        with self._srv.lock:
            return list(self._srv.seen)

    def close(self) -> None:
        self._srv.shutdown()
        self._srv.server_close()
