"""HTTP plumbing for webhooks: a *total* deadline per request on top of requests.

requests' `timeout` bounds each socket operation, so a server that drips one byte a
second never trips it. Here every socket a request uses is handed to a watchdog
thread that shuts it down when the request's deadline passes, which wakes the
blocked read at once. Sockets are caught where urllib3 creates them (`_new_conn`)
or reuses them (`request`), so pooled keep-alive connections are covered too.

`_new_conn` is also where the address guard sits: the host is resolved once (bounded
by the deadline), refused if any address is refused, and the socket is connected to a
validated address itself. The connection object keeps the hostname, so the Host
header, TLS SNI and certificate verification still use the name in the URL.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError

from . import guard


class Watchdog:
    """One thread that shuts down sockets whose deadline has passed."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Deadline, socket.socket]] = []
        self._order = itertools.count()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="notifications-watchdog", daemon=True)
        self._thread.start()

    def watch(self, deadline: Deadline, sock: socket.socket) -> None:
        with self._cond:
            heapq.heappush(self._heap, (deadline.expires, next(self._order), deadline, sock))
            if self._heap[0][2] is deadline:  # only an earlier wake-up needs the thread (saves a switch per request)
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    _, _, deadline, sock = heapq.heappop(self._heap)
                    if not deadline.finished:
                        deadline.expired = True
                        _shutdown(sock)
                self._cond.wait(self._heap[0][0] - now if self._heap else None)


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


class Deadline:
    """The moment one request must be over by; `expired` once the watchdog acted."""

    def __init__(self, seconds: float, watchdog: Watchdog) -> None:
        self.seconds = seconds
        self.expires = time.monotonic() + seconds
        self.watchdog = watchdog
        self.expired = False
        self.finished = False

    def remaining(self) -> float:
        return max(self.expires - time.monotonic(), 0.001)

    def watch(self, sock: socket.socket) -> None:
        self.watchdog.watch(self, sock)

    def finish(self) -> bool:
        """End the request; True if the watchdog cut it short first.

        Taken under the watchdog's lock, so the answer is final: either the watchdog
        already shut the sockets (the response was truncated, whatever parsed), or it
        never will (a pooled connection is safe to reuse).
        """
        with self.watchdog._cond:
            self.finished = True
            return self.expired


_current = threading.local()


def _watch_current(sock: socket.socket | None) -> None:
    deadline: Deadline | None = getattr(_current, "deadline", None)
    if deadline is not None and sock is not None:
        deadline.watch(sock)


def _time_left(fallback: float | None) -> float:
    """Seconds this thread's deadline leaves (or `fallback` outside one)."""
    deadline: Deadline | None = getattr(_current, "deadline", None)
    limits = [t for t in (fallback, deadline.remaining() if deadline else None) if isinstance(t, (int, float))]
    return min(limits) if limits else 30.0


@contextmanager
def deadline(seconds: float, watchdog: Watchdog) -> Iterator[Deadline]:
    """Every socket this thread's requests touch inside the block dies at the deadline."""
    limit = Deadline(seconds, watchdog)
    _current.deadline = limit
    try:
        yield limit
    finally:
        limit.finish()
        _current.deadline = None


class DeadlineConnectionMixin:
    """Connects only to guard-approved addresses; hands each socket to the thread's deadline."""

    sock: socket.socket | None
    _dns_host: str
    host: str
    port: int
    timeout: float | None
    source_address: tuple[str, int] | None
    socket_options: list | None

    def _new_conn(self) -> socket.socket:
        """Resolve once, refuse blocked addresses, connect to a validated address.

        Replaces urllib3's `_new_conn`, which resolves and connects in one call and so
        leaves no place to check the address between the two. Raises
        `guard.BlockedAddress` before any socket exists when the target is refused.
        """
        try:
            infos = guard.checked_addresses(self._dns_host, self.port, _time_left(self.timeout))
        except guard.ResolutionTimeout as exc:
            raise ConnectTimeoutError(self, f"Resolving {self.host} timed out.") from exc
        except socket.gaierror as exc:
            raise NameResolutionError(self.host, self, exc) from exc  # type: ignore[arg-type]
        error: OSError | None = None
        for family, socktype, proto, _canonname, sockaddr in infos:
            sock = socket.socket(family, socktype, proto)
            try:
                for option in self.socket_options or ():
                    sock.setsockopt(*option)
                sock.settimeout(_time_left(self.timeout))
                if self.source_address:
                    sock.bind(self.source_address)
                sock.connect(sockaddr)
            except OSError as exc:
                sock.close()
                error = exc
                continue
            sys.audit("http.client.connect", self, self.host, self.port)
            _watch_current(sock)
            return sock
        if isinstance(error, TimeoutError):
            raise ConnectTimeoutError(self, f"Connection to {self.host} timed out.") from error
        raise NewConnectionError(self, f"Failed to establish a new connection: {error}") from error  # type: ignore[arg-type]

    def request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        _watch_current(self.sock)  # a reused keep-alive connection
        return super().request(*args, **kwargs)  # type: ignore[misc]


class DeadlineHTTPConnection(DeadlineConnectionMixin, HTTPConnection):
    pass


class DeadlineHTTPSConnection(DeadlineConnectionMixin, HTTPSConnection):
    pass


class DeadlineHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = DeadlineHTTPConnection


class DeadlineHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = DeadlineHTTPSConnection


class DeadlineAdapter(HTTPAdapter):
    """An HTTPAdapter whose connections obey `deadline()`."""

    pool_classes = {"http": DeadlineHTTPConnectionPool, "https": DeadlineHTTPSConnectionPool}

    def init_poolmanager(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(self.pool_classes)


def new_session() -> requests.Session:
    """A session for one worker thread of one tick: no proxies, no netrc, no redirects."""
    session = requests.Session()
    session.trust_env = False  # environment proxies and .netrc are ignored
    # Redirects are refused per request (allow_redirects=False). Not max_redirects=0:
    # requests still prepares the next hop of a 3xx and would raise TooManyRedirects,
    # hiding the status behind a generic error.
    adapter = DeadlineAdapter(pool_connections=4, pool_maxsize=4, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
