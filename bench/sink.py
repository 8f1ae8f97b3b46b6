"""The benchmark's webhook receiver: a minimal HTTP/1.1 server in its own process.

It has to be faster than anything it measures, so it is a bare asyncio protocol
(keep-alive, Content-Length bodies, no framework). What arrives is counted per path
and per `webhook-id`, so the benchmark can check for duplicates and losses.

A sink may listen on several ports (`Sink(ports=100)`: one receiver per port, so
distinct webhook targets) and answer every POST after a delay (`Sink(delay=0.1)`: a
receiver with real-world latency). It counts the connections open at once and the
requests being answered at once (their peaks are in /stats), so the benchmark can
check the per-target cap from the receiver's side.

Paths:
  POST /status/NNN/...   answer NNN (e.g. /status/503 for a failing endpoint)
  POST /hang/...         never answer (a stuck endpoint; the connection stays open)
  POST anything else     answer 200
  GET  /stats            JSON: received, unique ids, duplicates, per-path first/last arrival
  GET  /reset            forget everything counted so far

Run alone: `python bench/sink.py` prints the port it listens on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import socket
import time
from collections import Counter

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


def _response(status: int, body: bytes = b"", content_type: str = "text/plain") -> bytes:
    head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\nContent-Type: {content_type}\r\n\r\n"
    return head.encode() + body


class Stats:
    """What arrived: totals, ids seen, and per path group the first and last arrival."""

    def __init__(self) -> None:
        self.connections = 0  # open now (the GET asking for the stats is one of them)
        self.in_flight = 0  # requests received and not yet answered
        self.reset()

    def reset(self) -> None:
        """Forget what arrived; the peaks start again from what is open now."""
        self.received = 0
        self.ids: Counter[bytes] = Counter()
        self.paths: dict[str, list[float]] = {}  # group -> [count, first, last]
        self.connections_peak = self.connections
        self.in_flight_peak = self.in_flight

    def opened(self) -> None:
        self.connections += 1
        self.connections_peak = max(self.connections_peak, self.connections)

    def closed(self) -> None:
        self.connections -= 1

    def started(self) -> None:
        self.in_flight += 1
        self.in_flight_peak = max(self.in_flight_peak, self.in_flight)

    def answered(self) -> None:
        self.in_flight -= 1

    def record(self, path: bytes, msg_id: bytes | None) -> None:
        self.received += 1
        if msg_id is not None:
            self.ids[msg_id] += 1
        group = path.split(b"/")[1].decode() if path.count(b"/") >= 1 else ""
        now = time.time()
        entry = self.paths.get(group)
        if entry is None:
            self.paths[group] = [1, now, now]
        else:
            entry[0] += 1
            entry[2] = now

    def as_json(self) -> bytes:
        duplicates = sum(n - 1 for n in self.ids.values() if n > 1)
        return json.dumps(
            {
                "received": self.received,
                "unique": len(self.ids),
                "duplicates": duplicates,
                "paths": {k: {"count": v[0], "first": v[1], "last": v[2]} for k, v in self.paths.items()},
                "connections_peak": self.connections_peak,
                "in_flight_peak": self.in_flight_peak,
            }
        ).encode()


class SinkProtocol(asyncio.Protocol):
    """One connection: parse pipelined requests from the buffer, answer each."""

    def __init__(self, stats: Stats, delay: float) -> None:
        self.stats = stats
        self.delay = delay
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.hung = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.stats.opened()

    def connection_lost(self, exc: Exception | None) -> None:
        self.stats.closed()

    def data_received(self, data: bytes) -> None:
        if self.hung:
            return  # a stuck endpoint reads nothing more and answers nothing
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end]
            length = 0
            msg_id = None
            lines = head.split(b"\r\n")
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"webhook-id":
                    msg_id = value.strip()
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            method, path, _ = lines[0].split(b" ", 2)
            self.handle(method, path, msg_id)
            if self.hung:
                return

    def handle(self, method: bytes, path: bytes, msg_id: bytes | None) -> None:
        assert self.transport is not None
        if method == b"GET":
            if path.startswith(b"/reset"):
                self.stats.reset()
            self.transport.write(_response(200, self.stats.as_json(), "application/json"))
            return
        self.stats.record(path, msg_id)
        if path.startswith(b"/hang"):
            self.hung = True
            return
        answer = _response(int(path.split(b"/")[2])) if path.startswith(b"/status/") else OK
        if not self.delay:
            self.transport.write(answer)
            return
        # A receiver with latency: requests on one connection come one after another
        # (no client here pipelines), so answering later keeps them in order.
        self.stats.started()
        asyncio.get_running_loop().call_later(self.delay, self.answer_late, answer)

    def answer_late(self, answer: bytes) -> None:
        self.stats.answered()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(answer)


async def serve(socks: list[socket.socket], delay: float) -> None:
    stats = Stats()  # one for every port: the peaks are over the whole sink
    loop = asyncio.get_running_loop()
    servers = [await loop.create_server(lambda: SinkProtocol(stats, delay), sock=s, backlog=1024) for s in socks]
    await asyncio.gather(*(server.serve_forever() for server in servers))


def _run(socks: list[socket.socket], delay: float) -> None:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(socks, delay))


class Sink:
    """The sink in a child process; `url(path)` for targets, `stats()` and `reset()` to read it.

    `ports` receivers (one listening port each; `urls()` names one per port), each
    answering a POST after `delay` seconds.
    """

    def __init__(self, ports: int = 1, delay: float = 0.0) -> None:
        self.socks = []
        for _ in range(ports):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            sock.listen(1024)
            self.socks.append(sock)
        self.sock = self.socks[0]
        self.port = self.sock.getsockname()[1]
        ctx = multiprocessing.get_context("fork")
        self.process = ctx.Process(target=_run, args=(self.socks, delay), daemon=True, name="bench-sink")
        self.process.start()

    def url(self, path: str = "/ok") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def urls(self, path: str = "/ok") -> list[str]:
        """One URL per port: as many webhook targets as the sink has receivers."""
        return [f"http://127.0.0.1:{s.getsockname()[1]}{path}" for s in self.socks]

    def _get(self, path: str) -> dict:
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as conn:
            conn.sendall(f"GET {path} HTTP/1.1\r\nHost: sink\r\nContent-Length: 0\r\n\r\n".encode())
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
            while len(body) < length:
                body += conn.recv(65536)
        return json.loads(body)

    def stats(self) -> dict:
        return self._get("/stats")

    def reset(self) -> None:
        self._get("/reset")

    def close(self) -> None:
        self.process.terminate()
        self.process.join(5)
        for sock in self.socks:
            sock.close()


def _load(port: int, seconds: float, connections: int, depth: int, result: multiprocessing.Queue) -> None:
    """Pipelined keep-alive POSTs from one asyncio process; puts requests per second."""
    body = b'{"id":"msg_x","type":"notification.fired","payload":{"order":12345}}'
    request = (
        b"POST /ceiling HTTP/1.1\r\nHost: sink\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )

    async def client(deadline: float) -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        done = 0
        while time.monotonic() < deadline:
            writer.write(request * depth)
            await reader.readexactly(len(OK) * depth)
            done += depth
        writer.close()
        return done

    async def main() -> int:
        deadline = time.monotonic() + seconds
        return sum(await asyncio.gather(*(client(deadline) for _ in range(connections))))

    started = time.monotonic()
    total = asyncio.run(main())
    result.put(total / (time.monotonic() - started))


def ceiling(sink: Sink, seconds: float = 3.0, connections: int = 16, depth: int = 1) -> float:
    """The sink's own ceiling in requests per second, loaded from another process."""
    ctx = multiprocessing.get_context("fork")
    result: multiprocessing.Queue = ctx.Queue()
    process = ctx.Process(target=_load, args=(sink.port, seconds, connections, depth, result))
    process.start()
    rate = result.get(timeout=seconds + 30)
    process.join(10)
    sink.reset()
    return rate


if __name__ == "__main__":
    sink = Sink()
    print(f"sink listening on {sink.url('/')} (pid {sink.process.pid}); Ctrl-C stops it", flush=True)
    try:
        sink.process.join()
    except KeyboardInterrupt:
        sink.close()
    os._exit(0)
