"""A real HTTP server on 127.0.0.1 for a test: a directory, or any request handler."""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def directory_handler(directory: Path) -> functools.partial[QuietHandler]:
    return functools.partial(QuietHandler, directory=str(directory))


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler] | functools.partial[QuietHandler], *,
            host: str = "127.0.0.1") -> Iterator[str]:
    """The base URL (``http://HOST:PORT/``) of a server answering with ``handler``, while it runs
    (``host``: another loopback address, e.g. 127.0.0.2: Linux routes all of 127.0.0.0/8)."""
    srv = http.server.ThreadingHTTPServer((host, 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://{host}:{srv.server_address[1]}/"
    finally:
        srv.shutdown()
        srv.server_close()
