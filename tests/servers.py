"""Real local HTTP servers for webhook tests: they record what arrives and misbehave on request."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Reply:
    """What the server answers. `behaviour` overrides for hostile endpoints."""

    status: int = 200
    body: bytes = b"ok"
    headers: dict[str, str] = field(default_factory=dict)
    behaviour: str = "normal"  # normal | hang | drip | reset
    drip_interval: float = 0.5


class WebhookServer:
    """A threaded HTTP server on 127.0.0.1 that records requests and answers per `reply`."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.reply = Reply()
        self.responder: Callable[[Received], Reply] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                request = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with server._lock:
                    server.received.append(request)
                reply = server.responder(request) if server.responder else server.reply
                server._answer(self, reply)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _answer(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        if reply.behaviour == "hang":
            self._stop.wait(60)
            return
        if reply.behaviour == "reset":
            handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            handler.connection.close()
            return
        if reply.behaviour == "drip":
            handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
            handler.wfile.flush()
            while not self._stop.is_set():
                try:
                    handler.wfile.write(b"X")
                    handler.wfile.flush()
                except OSError:
                    return
                time.sleep(reply.drip_interval)
            return
        handler.send_response(reply.status)
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(reply.body)))
        handler.end_headers()
        handler.wfile.write(reply.body)

    def close(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
