"""Python's own http.server on loopback, for tests of what meets a server that is not vLLM: it
answers GET with a file or an HTML 404 page and POST with an HTML 501 page."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def plain_web_server(folder: Path) -> Iterator[str]:
    """Serve ``folder``; yields the root URL (``http://127.0.0.1:PORT``)."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
