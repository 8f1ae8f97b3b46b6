"""Real local HTTP servers for webhook tests: they record what arrives and misbehave on request."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    client: tuple[str, int] = ("", 0)  # the connection's far end: one per TCP connection


@dataclass
class Reply:
    """What the server answers. `behaviour` overrides for hostile endpoints.

    normal     status, headers and body, after `delay` seconds
    hang       read the request, never answer
    drip       send a status line, then one header byte every `drip_interval` (headers never end)
    drip_body  send complete headers without a length, then one body byte every `drip_interval`
    endless    a 200 whose body never ends, as fast as the client reads it
    reset      close the connection with a TCP reset
    """

    status: int = 200
    body: bytes = b"ok"
    headers: dict[str, str] = field(default_factory=dict)
    behaviour: str = "normal"  # normal | hang | drip | drip_body | endless | reset
    drip_interval: float = 0.5
    delay: float = 0.0  # seconds to wait before a normal answer (a slow endpoint)


class _Server(ThreadingHTTPServer):
    # Many ticks connect at once in the concurrency tests; the default backlog of 5
    # would drop SYNs and turn a burst into one-second connect retries.
    request_queue_size = 256
    daemon_threads = True


class WebhookServer:
    """A threaded HTTP server on 127.0.0.1 that records requests and answers per `reply`."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.reply = Reply()
        self.responder: Callable[[Received], Reply] | None = None
        self.body_bytes_sent = 0  # response body bytes written by `endless` answers
        self.answered = 0  # requests whose answer is over: written, or cut off by the client
        self.arrived_at: list[float] = []  # time.monotonic() of each request's arrival (rates)
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                request = Received(self.path, headers, body, self.client_address)
                with server._arrived:
                    server.received.append(request)
                    server.arrived_at.append(time.monotonic())
                    server._arrived.notify_all()
                reply = server.responder(request) if server.responder else server.reply
                try:
                    server._answer(self, reply)
                finally:
                    with server._arrived:
                        server.answered += 1
                        server._arrived.notify_all()

            do_GET = do_POST  # a redirect target may be fetched with GET

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_for(self, count: int, timeout: float = 30) -> list[Received]:
        """Block until at least `count` requests arrived; fail the test after `timeout`."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.received) >= count, timeout):
                raise AssertionError(f"expected {count} requests within {timeout}s, got {len(self.received)}")
            return list(self.received)

    def wait_answered(self, count: int, timeout: float = 30) -> None:
        """Block until the server is done answering `count` requests: nothing more leaves it for them."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: self.answered >= count, timeout):
                raise AssertionError(f"expected {count} answers over within {timeout}s, got {self.answered}")

    def webhook_ids(self) -> Counter[str]:
        """How many requests arrived for each `webhook-id`."""
        with self._lock:
            return Counter(r.headers.get("webhook-id", "") for r in self.received)

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
            self._drip(handler, reply)
            return
        if reply.behaviour == "drip_body":
            handler.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
            handler.wfile.flush()
            self._drip(handler, reply)
            handler.close_connection = True
            return
        if reply.behaviour == "endless":
            self._endless(handler)
            return
        if reply.delay and self._stop.wait(reply.delay):
            return
        handler.send_response(reply.status)
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(reply.body)))
        handler.end_headers()
        handler.wfile.write(reply.body)

    def _drip(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        while not self._stop.is_set():
            try:
                handler.wfile.write(b"X")
                handler.wfile.flush()
            except OSError:
                return
            time.sleep(reply.drip_interval)

    def _endless(self, handler: BaseHTTPRequestHandler) -> None:
        handler.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000000\r\n\r\n")
        chunk = b"x" * 65536
        while not self._stop.is_set():
            try:
                handler.wfile.write(chunk)
            except OSError:  # the client stopped reading and closed
                handler.close_connection = True
                return
            with self._lock:
                self.body_bytes_sent += len(chunk)

    def close(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class HeldTick:
    """A tick in a thread whose webhook request to `/old` the server holds until `finish()`:
    a firing in flight, claimed and not yet written back."""

    def __init__(self, server, status: int) -> None:
        self.server = server
        self.released = threading.Event()
        self.outcomes: list = []
        self.error: BaseException | None = None

        def hold(request: Received) -> Reply:
            if request.path == "/old":
                self.released.wait(30)
            return Reply(status=status)

        server.responder = hold
        self.thread = threading.Thread(target=self.run)
        self.thread.start()
        server.wait_for(1)  # the firing is in flight: claimed, and its request held

    def run(self) -> None:
        try:
            from notifications.api import run_tick

            run_tick(on_outcome=self.outcomes.append)
        except BaseException as exc:  # reported by finish()
            self.error = exc
        finally:
            from django.db import connection

            connection.close()  # this thread's own connection

    def finish(self) -> None:
        self.released.set()
        self.thread.join(60)
        assert not self.thread.is_alive() and self.error is None, self.error
        assert len(self.outcomes) == 1  # the tick did its write-back, which the fence emptied
