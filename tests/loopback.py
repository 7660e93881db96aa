"""The tests' loopback networking: a scripted HTTP server (which can also serve a folder) and ports with nothing
listening, for the download, fault, end-to-end and tracking tests."""

from __future__ import annotations

import collections
import contextlib
import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path


class ScriptedServer:
    """A loopback HTTP server whose answer per path is a script of responses, the last one repeating.

    A response is ``("ok", body)``; ``("status", code)``; ``("hang", seconds)``: answer nothing for that
    long; ``("truncate", body)``: promise the whole body, send half, close; or ``("stall", body)``:
    promise the whole body, send half, then wait until the server stops (a download to kill midway);
    ``("drip", seconds)``: promise a megabyte, send one byte every ``seconds`` until the client goes or the
    server stops; ``("flood", n)``: no Content-Length, zeros until ``n`` bytes or the client goes.
    Unscripted paths answer the file of that name under ``folder`` when there is one, else 404; ``hits``
    counts requests per path.
    """

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder
        self.routes: dict[str, list[tuple[str, object]]] = {}
        self.hits: collections.Counter[str] = collections.Counter()
        self.release = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.hits[self.path] += 1
                script = server.routes.get(self.path) or server.from_folder(self.path)
                kind, arg = script[min(server.hits[self.path], len(script)) - 1]
                if kind == "status":
                    self.send_error(arg)
                    return
                if kind == "hang":
                    threading.Event().wait(arg)  # not time.sleep, which a test may replace
                    return
                if kind in ("drip", "flood"):
                    self.send_response(200)
                    if kind == "drip":
                        self.send_header("Content-Length", str(1 << 20))
                    self.end_headers()  # flood: HTTP/1.0 without a length, the body runs until the server closes
                    try:
                        if kind == "drip":
                            while not server.release.wait(arg):
                                self.wfile.write(b"x")
                                self.wfile.flush()
                        else:
                            for _ in range(arg // (1 << 16)):
                                self.wfile.write(bytes(1 << 16))
                    except OSError:  # the client hung up: what a capped or timed-out download does
                        pass
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(arg)))
                self.end_headers()
                self.wfile.write(arg if kind == "ok" else arg[: len(arg) // 2])
                self.wfile.flush()
                if kind == "stall":
                    server.release.wait(120)

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        # A short poll interval, or every shutdown() waits half a second.
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    def from_folder(self, path: str) -> list[tuple[str, object]]:
        file = self.folder / path.lstrip("/") if self.folder is not None else None
        return [("ok", file.read_bytes())] if file is not None and file.is_file() else [("status", 404)]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"


@contextlib.contextmanager
def running_server(folder: Path | None = None) -> Iterator[ScriptedServer]:
    """A started :class:`ScriptedServer` (serving ``folder``'s files), stopped (and any stalled answer released) on
    exit."""
    server = ScriptedServer(folder)
    server.thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.httpd.shutdown()
        server.httpd.server_close()


class socket_closed_port:
    """A loopback port with nothing listening."""

    def __enter__(self) -> int:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        return self.sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.sock.close()


def free_port() -> int:
    """A loopback port that was free a moment ago (bound, then closed): connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
