"""Misbehaving HTTP endpoints on loopback, written on raw sockets for exact control.

Each server counts the connections it accepts and the bytes it manages to send, so a
test can prove that a refused address saw no connection and that a huge body was
never read to the end.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import threading
from collections.abc import Callable

FIFTY_MB = 50 * 1024 * 1024


def read_request(conn: socket.socket) -> bytes:
    """Read one request (head and Content-Length body); b"" if the client went away."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


class HostileServer:
    """A TCP server on 127.0.0.1 whose `behaviour` decides how it treats each request.

    behaviours: "ok" (200), "silent" (accepts, never answers), "drip" (sends one byte
    of the response head every `interval` seconds, forever), "huge" (a `status`
    response with a 50 MB body), "redirect" (302 to `location`), "reset" (TCP RST
    after reading the request).
    """

    def __init__(
        self,
        behaviour: str = "ok",
        *,
        interval: float = 0.5,
        status: int = 200,
        location: str = "",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.behaviour = behaviour
        self.interval = interval
        self.status = status
        self.location = location
        self.tls = tls
        self.connections = 0
        self.requests: list[bytes] = []
        self.bytes_sent = 0
        self.handled = 0  # connections the server is done with (answered, given up or cut off)
        self.server_names: list[str | None] = []
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        if tls is not None:
            tls.sni_callback = self._record_sni
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def url(self, host: str = "127.0.0.1", path: str = "/hook") -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{host}:{self.port}{path}"

    def _record_sni(self, sslobj, server_name, context) -> None:
        self.server_names.append(server_name)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._conns.append(conn)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(30)
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
                with self._lock:
                    self._conns.append(conn)
            request = read_request(conn)
            if not request:
                return
            with self._lock:
                self.requests.append(request)
            self.handlers[self.behaviour](self, conn)
        except OSError:
            pass  # the client gave up, which is the point of most of these servers
        finally:
            with contextlib.suppress(OSError):
                conn.close()
            with self._done:
                self.handled += 1
                self._done.notify_all()

    def wait_handled(self, count: int, timeout: float = 30) -> None:
        """Block until the server is done with `count` connections: nothing more leaves it on them."""
        with self._done:
            if not self._done.wait_for(lambda: self.handled >= count, timeout):
                raise AssertionError(f"expected {count} connections over within {timeout}s, got {self.handled}")

    def _send(self, conn: socket.socket, data: bytes) -> None:
        conn.sendall(data)
        with self._lock:
            self.bytes_sent += len(data)

    def _ok(self, conn: socket.socket) -> None:
        self._send(conn, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    def _silent(self, conn: socket.socket) -> None:
        self._stop.wait(60)

    def _drip(self, conn: socket.socket) -> None:
        self._send(conn, b"HTTP/1.1 200 OK\r\nX-Drip: ")
        while not self._stop.wait(self.interval):
            self._send(conn, b"x")

    def _huge(self, conn: socket.socket) -> None:
        head = f"HTTP/1.1 {self.status} Whatever\r\nContent-Length: {FIFTY_MB}\r\n\r\n".encode()
        self._send(conn, head)
        chunk = b"\0" * 65536
        for _ in range(FIFTY_MB // len(chunk)):
            if self._stop.is_set():
                return
            self._send(conn, chunk)

    def _redirect(self, conn: socket.socket) -> None:
        self._send(
            conn,
            f"HTTP/1.1 302 Found\r\nLocation: {self.location}\r\nContent-Length: 0\r\n\r\n".encode(),
        )

    def _reset(self, conn: socket.socket) -> None:
        # SO_LINGER with a zero timeout turns close() into a TCP RST.
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    handlers: dict[str, Callable[[HostileServer, socket.socket], None]] = {
        "ok": _ok,
        "silent": _silent,
        "drip": _drip,
        "huge": _huge,
        "redirect": _redirect,
        "reset": _reset,
    }

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self.sock.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.close()
        self.thread.join(timeout=5)
