"""HTTP plumbing on requests: a *total* deadline per request, and the address guard.

Apprise's channels send through it (and `new_session()` for code outside a tick); the
webhook channel sends through libcurl (`curl`) unless requests' sending is replaced
(`requests_replaced()`: a host project's tests mock it), and then through the adapter here.

requests' `timeout` bounds each socket operation, so a server that drips one byte a
second never trips it. Here every socket a request uses is handed to a watchdog
thread that shuts it down when the request's deadline passes, which wakes the
blocked read at once. Sockets are caught where urllib3 creates them (`_new_conn`)
or reuses them (`request`), so pooled keep-alive connections are covered too.

`_new_conn` is also where the address guard sits: the host is resolved once (bounded
by the deadline), refused if any address is refused, and the socket is connected to a
validated address itself. The connection object keeps the hostname, so the Host
header, TLS SNI and certificate verification still use the name in the URL. The ranges
opened by NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS come with the deadline (the channel
passes its tick's parsed networks), so they are not read again per connection.

One `DeadlineAdapter` serves every worker thread of a tick (`new_adapter`): requests'
adapter and urllib3's pools are thread-safe, and the channel sends prepared requests
straight through `send()`, without a `Session` (no cookies carried between receivers, no
environment proxies, no redirects, and no per-request merging of session settings).
Each host's pool keeps at most as many connections as the tick lets one target have
sends in flight, so a burst to one receiver opens no more connections than that.

Overriding `_new_conn` relies on a private urllib3 API: see `notifications.compat`.
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import itertools
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from urllib3 import BaseHTTPResponse
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import ConnectionPool, HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError

from notifications import compat
from notifications.channels.http import guard
from notifications.rules.network import IPNetwork

# Seconds a lookup or connect may take outside any deadline: only direct use of the
# adapter does that (a tick always sends under `deadline()`).
NO_DEADLINE_TIMEOUT = 30.0
# The shortest wait handed to sockets and requests once the deadline is spent: a socket
# takes 0 as "non-blocking" and urllib3 refuses a timeout of 0, so the call gets this
# sliver and fails as a timeout (the watchdog ends the request anyway).
MIN_WAIT = 0.001
# Seconds close() waits for the watchdog thread to end; it ends at once unless the
# interpreter is shutting down, and as a daemon it never holds the process anyway.
WATCHDOG_JOIN_TIMEOUT = 5.0
# `new_session()` is for one thread sending one request at a time: a few idle keep-alive
# connections per host (and pools for a few hosts) are all it can reuse.
POOLED_HOSTS = 4
CONNECTIONS_PER_HOST = 4
# Origins (a URL up to its path, as spelled) whose pool key an adapter remembers; past
# that it starts over (a tick sends to few origins, a long-lived Session maybe to many).
POOL_KEYS = 1024


class Watchdog:
    """One thread that shuts down sockets whose deadline has passed, started by the first
    socket it watches: a channel built but never sending (a tick with nothing for it)
    starts no thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Deadline, socket.socket]] = []
        self._order = itertools.count()
        self._closed = False
        self._thread: threading.Thread | None = None

    def watch(self, deadline: Deadline, sock: socket.socket) -> None:
        with self._cond:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="notifications-watchdog", daemon=True)
                self._thread.start()
            heapq.heappush(self._heap, (deadline.expires, next(self._order), deadline, sock))
            if self._heap[0][2] is deadline:  # only an earlier wake-up needs the thread (saves a switch per request)
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=WATCHDOG_JOIN_TIMEOUT)

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
    """The moment one request must be over by; `expired` once the watchdog acted.

    `allowed` are the networks the request may reach although the guard refuses them by
    default (None: read NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS when connecting).
    """

    # The watchdog keeps every deadline until it passes, finished or not (a burst: thousands).
    __slots__ = ("allowed", "expired", "expires", "finished", "watchdog")

    def __init__(self, seconds: float, watchdog: Watchdog, allowed: Sequence[IPNetwork] | None = None) -> None:
        self.expires = time.monotonic() + seconds
        self.watchdog = watchdog
        self.allowed = allowed
        self.expired = False
        self.finished = False

    def remaining(self) -> float:
        return max(self.expires - time.monotonic(), MIN_WAIT)

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


# The deadline of the send running in this context: a context variable, not a thread's
# own, so it holds in the threads a library starts for the send in a copy of its context
# (Apprise runs each service so), where a send left behind by `notify(timeout=...)`
# would otherwise go on unwatched after the row was recorded as timed out.
_current: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar("notifications_deadline", default=None)


class DeadlinePassed(ConnectTimeoutError):
    """A connection asked for once its send's deadline had passed: never made."""


def _watch_current(sock: socket.socket | None) -> None:
    deadline = _current.get()
    if deadline is not None and sock is not None:
        deadline.watch(sock)


def _refuse_after_deadline(conn: object) -> None:
    """A send abandoned at its deadline (it went on in a thread of its own) makes no new
    request: the row is recorded as timed out and will be sent again."""
    deadline = _current.get()
    if deadline is not None and (deadline.finished or deadline.expires <= time.monotonic()):
        raise DeadlinePassed(conn, "The send's deadline has passed.")


def _time_left(fallback: float | None) -> float:
    """Seconds this thread's deadline leaves (or `fallback` outside one)."""
    deadline = _current.get()
    limits = [t for t in (fallback, deadline.remaining() if deadline else None) if isinstance(t, (int, float))]
    return min(limits) if limits else NO_DEADLINE_TIMEOUT


def _allowed_networks() -> Sequence[IPNetwork] | None:
    """The allowed networks this thread's deadline carries (None: the guard reads the setting)."""
    deadline = _current.get()
    return deadline.allowed if deadline is not None else None


@contextmanager
def deadline(seconds: float, watchdog: Watchdog, allowed: Sequence[IPNetwork] | None = None) -> Iterator[Deadline]:
    """Every socket this thread's requests touch inside the block dies at the deadline.

    Connections made inside the block may reach the `allowed` networks (default:
    NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS, read at connect time).
    """
    limit = Deadline(seconds, watchdog, allowed)
    token = _current.set(limit)
    try:
        yield limit
    finally:
        limit.finish()
        _current.reset(token)


class DeadlineConnectionMixin(compat.SocketFactory):
    """Connects only to guard-approved addresses; hands each socket to the thread's deadline."""

    sock: socket.socket | None
    host: str
    port: int
    timeout: float | None
    source_address: tuple[str, int] | None
    socket_options: list[tuple[int, int, int | bytes]] | None

    def open_socket(self) -> socket.socket:
        """Resolve once, refuse blocked addresses, connect to a validated address.

        Replaces urllib3's own connect step, which resolves and connects in one call and
        so leaves no place to check the address between the two. Raises
        `guard.BlockedAddress` before any socket exists when the target is refused, and
        `DeadlinePassed` once the send's deadline is over.
        """
        _refuse_after_deadline(self)
        try:
            infos = guard.checked_addresses(
                compat.dns_host(self), self.port, _time_left(self.timeout), allowed=_allowed_networks()
            )
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
        _refuse_after_deadline(self)
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
    """An HTTPAdapter whose connections obey `deadline()`.

    Two of requests' subclassing hooks are trimmed to what a webhook uses (each send
    runs them; a burst sends thousands): without a proxy the request line is the path
    alone, found without looking for a proxy twice; and the response skips the cookie
    jar and the text encoding (cookies are never sent back, the body is read as bytes).
    """

    pool_classes = {"http": DeadlineHTTPConnectionPool, "https": DeadlineHTTPSConnectionPool}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pool_keys: dict[str, tuple[Any, dict[str, Any]]] = {}

    def get_connection_with_tls_context(
        self,
        request: requests.PreparedRequest,
        verify: bool | str | None,
        proxies: Mapping[str, str] | None = None,
        cert: str | tuple[str, str] | None = None,
    ) -> ConnectionPool:
        """The pool for the request's origin, its key worked out once per origin.

        requests parses the URL and urllib3 normalizes the pool's key on every send
        (about 10 us of a send's 250); the origin (the URL up to its path) decides both,
        so the key is remembered by it. The pool itself is still looked up by its key
        each time: the pool manager's least-recently-used order and eviction are untouched.
        """
        origin = _origin(request.url)
        if proxies or verify is not True or cert is not None or origin is None:
            return super().get_connection_with_tls_context(request, verify, proxies, cert)
        known = self._pool_keys.get(origin)
        if known is None:
            first = super().get_connection_with_tls_context(request, verify, proxies, cert)  # raises for a bad URL
            if len(self._pool_keys) >= POOL_KEYS:
                self._pool_keys.clear()
            host_params, pool_kwargs = self.build_connection_pool_key_attributes(request, verify, cert)
            self._pool_keys[origin] = compat.pool_key(self.poolmanager, host_params, pool_kwargs)
            return first
        key, context = known
        # A copy: a pool made from it (its first use, or after eviction) consumes the arguments.
        pool: ConnectionPool = self.poolmanager.connection_from_pool_key(key, request_context=dict(context))
        return pool

    def init_poolmanager(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        super().init_poolmanager(*args, **kwargs)
        compat.set_pool_classes(self.poolmanager, self.pool_classes)

    def request_url(self, request: requests.PreparedRequest, proxies: Mapping[str, str] | None) -> str:
        if proxies:
            return super().request_url(request, proxies)
        return request.path_url

    def build_response(self, req: requests.PreparedRequest, resp: BaseHTTPResponse) -> requests.Response:
        response = requests.Response()
        response.status_code = resp.status
        response.headers = CaseInsensitiveDict(resp.headers)
        response.raw = resp
        response.reason = resp.reason or ""
        response.url = req.url or ""
        response.request = req
        response.connection = self
        return response


def _origin(url: str | None) -> str | None:
    """`url` up to its path ("https://host:8443"), which alone decides its pool."""
    if not url:
        return None
    scheme, slashes, rest = url.partition("://")
    return None if not slashes else f"{scheme}://{rest.split('/', 1)[0]}"


def new_adapter(hosts: int, per_host: int) -> HTTPAdapter:
    """The adapter every worker thread of one tick sends through.

    Pools for up to `hosts` hosts (the least recently used pool is closed past that),
    each keeping up to `per_host` keep-alive connections: as many as one target may have
    sends in flight, so no request waits for a connection and no receiver sees more.
    No retries: a failed send is the tick's to classify and retry later.
    """
    return DeadlineAdapter(pool_connections=hosts, pool_maxsize=per_host, max_retries=0)


# requests' own sending, as imported: a test library that mocks requests (`responses`)
# replaces it for the duration of a test.
_REQUESTS_SEND = HTTPAdapter.send


def requests_replaced() -> bool:
    """Whether requests' sending is replaced now (a host project's tests mock it)."""
    return HTTPAdapter.send is not _REQUESTS_SEND


def new_session() -> requests.Session:
    """A requests Session over the same guarded, deadline-bound connections, for code that
    sends outside a tick: no proxies, no netrc (and pass `allow_redirects=False`).

    A tick does not use it: the webhook channel sends prepared requests through
    `new_adapter()` directly.
    """
    session = requests.Session()
    session.trust_env = False  # environment proxies and .netrc are ignored
    adapter = new_adapter(hosts=POOLED_HOSTS, per_host=CONNECTIONS_PER_HOST)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
