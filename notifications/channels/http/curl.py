"""The webhook's HTTP client: libcurl (pycurl), each send one call into C.

Why libcurl and not requests: a tick is CPU-bound at scale, and requests -> urllib3 ->
http.client builds, writes and parses every request in Python (about 0.35 ms of CPU a
send on the benchmark's machine, more than the rest of a delivery). libcurl does the
same work in C with the GIL released, and its total timeout (`TIMEOUT_MS`) bounds the
whole send, so no watchdog thread is needed: a server that drips a byte a second is cut
at the deadline like one that never answers. requests stays for Apprise and for
`transport.new_session()`; a host project that mocks requests (`responses`) in its tests
keeps getting its mock (the webhook channel sends through requests then).

The address guard stays in Python, where it is one policy for both clients: libcurl is
told the name resolves to a placeholder that is never contacted (`PLACEHOLDER`), and
opening a connection is ours (`OPENSOCKETFUNCTION`): the guard resolves the name once
(`guard.checked_addresses`, bounded by the send's deadline), refuses it if any address
is refused, and connects to a validated address itself; libcurl is told the socket is
already connected. So libcurl never resolves a name nor connects anywhere on its own,
the connected address is the checked one (no DNS-rebinding window), and the Host
header, TLS SNI and certificate checks still use the name in the URL.

Handles are pooled, not per thread: a send takes a free handle (or makes one) and gives
it back, and all of them share one connection cache (`CurlShare`), so keep-alive
connections serve whichever worker sends next. No redirects are followed, no proxy or
.netrc is read from the environment, only http and https are spoken (HTTP/1.1), and
certificates are checked against the same CA bundle requests uses (certifi).
"""

from __future__ import annotations

import functools
import http.client
import queue
import socket
import ssl
import sys
import time
from collections.abc import Sequence
from typing import NamedTuple
from urllib.parse import urlsplit

import certifi
import pycurl

from notifications.channels.http import guard
from notifications.rules.network import IPNetwork

# Where libcurl believes every name resolves to (TEST-NET-1, never routed). It never
# connects there: the socket it gets is the one `_Handle.open_socket` connected.
PLACEHOLDER = "192.0.2.1"
# The shortest wait handed to a socket once the deadline is spent (0 would mean non-blocking).
MIN_WAIT = 0.001
# Hosts per handle whose placeholder is set: a tick sends to few; past it, start over.
PINNED_HOSTS = 1024
DEFAULT_PORTS = {"http": 80, "https": 443}
# Bytes of each handle's buffers (libcurl's smallest upload buffer is 16 KB).
RECEIVE_BUFFER = 4096
SEND_BUFFER = 16384
# Distinct URLs whose host and port are remembered (a burst sends many rows to few URLs).
URLS = 1024

# libcurl's errors, as the Python exceptions the webhook channel classifies (requests
# raises these, or wraps them): one vocabulary for both clients.
_TIMED_OUT = {pycurl.E_OPERATION_TIMEDOUT}
_TLS = {
    pycurl.E_SSL_CONNECT_ERROR,
    pycurl.E_PEER_FAILED_VERIFICATION,
    pycurl.E_SSL_CERTPROBLEM,
    pycurl.E_SSL_CIPHER,
    pycurl.E_SSL_CACERT_BADFILE,
    pycurl.E_SSL_ISSUER_ERROR,
    pycurl.E_SSL_PINNEDPUBKEYNOTMATCH,
    pycurl.E_SSL_INVALIDCERTSTATUS,
}
# 8 is CURLE_WEIRD_SERVER_REPLY (pycurl has no name for it): no HTTP answer.
_NOTHING = {pycurl.E_GOT_NOTHING, 8, pycurl.E_PARTIAL_FILE, pycurl.E_HTTP2}
_RESET = {pycurl.E_SEND_ERROR, pycurl.E_RECV_ERROR}


class Answer(NamedTuple):
    """What a receiver answered: its status and, unless a 2xx, the seconds its Retry-After
    header asks to wait (None: none asked; libcurl reads both of the header's forms)."""

    status: int
    retry_after: float | None = None


class _Send:
    """One send as the handle's callbacks see it."""

    __slots__ = ("allowed", "expires", "failure", "host", "opened", "port")

    def __init__(self, host: str, port: int, seconds: float, allowed: Sequence[IPNetwork]) -> None:
        self.host = host
        self.port = port
        self.expires = time.monotonic() + seconds
        self.allowed = allowed
        self.failure: BaseException | None = None  # why no connection could be made
        self.opened: list[socket.socket] = []  # sockets connected for libcurl (it holds copies)

    def time_left(self) -> float:
        return max(self.expires - time.monotonic(), MIN_WAIT)


class _Handle:
    """One libcurl easy handle and the callbacks of the send it is making."""

    def __init__(self, share: pycurl.CurlShare, ca_file: str, body_limit: int, connections: int) -> None:
        self.send: _Send | None = None
        self.pinned: set[tuple[str, int]] = set()
        curl = self.curl = pycurl.Curl()
        curl.setopt(pycurl.SHARE, share)
        curl.setopt(pycurl.NOSIGNAL, 1)  # timeouts without SIGALRM: handles run in threads
        curl.setopt(pycurl.PROXY, "")  # no proxy, whatever the environment says
        curl.setopt(pycurl.PROTOCOLS, pycurl.PROTO_HTTP | pycurl.PROTO_HTTPS)
        curl.setopt(pycurl.FOLLOWLOCATION, 0)
        curl.setopt(pycurl.MAXCONNECTS, connections)  # the shared cache's size (libcurl's default: 5)
        curl.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1)
        curl.setopt(pycurl.CAINFO, ca_file)
        # Small buffers: hundreds of handles, answers of a few hundred bytes (libcurl's
        # defaults, 16 KB in and 64 KB out, cost a tick of 256 workers 25 MB more).
        curl.setopt(pycurl.BUFFERSIZE, RECEIVE_BUFFER)
        curl.setopt(pycurl.UPLOAD_BUFFERSIZE, SEND_BUFFER)
        curl.setopt(pycurl.MAXFILESIZE_LARGE, body_limit)  # past it libcurl stops reading; the connection goes
        curl.setopt(pycurl.OPENSOCKETFUNCTION, self.open_socket)
        curl.setopt(pycurl.SOCKOPTFUNCTION, _already_connected)
        # The body is dropped as it comes: `len` is a builtin, so no Python frame runs
        # per chunk (and no header callback at all: libcurl parses Retry-After itself).
        curl.setopt(pycurl.WRITEFUNCTION, len)

    def open_socket(self, purpose: int, address: object) -> socket.socket | int:
        """A socket connected to an address the guard allows; libcurl's own `address` is
        the placeholder and is ignored. A refusal is kept for the send's error."""
        send = self.send
        assert send is not None
        try:
            infos = guard.checked_addresses(send.host, send.port, send.time_left(), allowed=send.allowed)
        except Exception as exc:  # noqa: BLE001 - refused, not found, timed out, a name IDNA refuses
            send.failure = exc
            return pycurl.SOCKET_BAD
        for family, socktype, proto, _canonname, sockaddr in infos:
            sock = socket.socket(family, socktype, proto)
            try:
                sock.settimeout(send.time_left())
                sock.connect(sockaddr)
            except OSError as exc:
                sock.close()
                send.failure = exc
                continue
            sys.audit("http.client.connect", self, send.host, send.port)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            send.opened.append(sock)  # pycurl hands libcurl a duplicate: this one is closed after the send
            return sock
        return pycurl.SOCKET_BAD

    def pin(self, host: str, port: int) -> None:
        """Tell libcurl `host` resolves to the placeholder (once per handle and host)."""
        if (host, port) in self.pinned:
            return
        if len(self.pinned) >= PINNED_HOSTS:
            self.pinned.clear()
            self.curl.setopt(pycurl.RESOLVE, [])
        self.curl.setopt(pycurl.RESOLVE, [f"{host}:{port}:{PLACEHOLDER}"])
        self.pinned.add((host, port))

    def close(self) -> None:
        self.curl.close()


def _already_connected(fd: int, purpose: int) -> int:
    return int(pycurl.SOCKOPT_ALREADY_CONNECTED)


class CurlClient:
    """POSTs under a total deadline, to addresses the guard allows; thread-safe.

    `allowed`: the networks the guard opens beyond the public ones (the tick's parsed
    NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS); `body_limit`: response body bytes read
    before the connection is dropped (the answer's status still counts); `connections`:
    the keep-alive connections kept open, busy or idle, to every host together (the
    least recently used idle one is closed past that).
    """

    def __init__(
        self, *, allowed: Sequence[IPNetwork], body_limit: int, connections: int, ca_file: str | None = None
    ) -> None:
        self.allowed = allowed
        self.body_limit = body_limit
        self.connections = connections
        self.ca_file = ca_file or certifi.where()
        self._share = pycurl.CurlShare()
        self._share.setopt(pycurl.SH_SHARE, pycurl.LOCK_DATA_CONNECT)
        self._free: queue.SimpleQueue[_Handle] = queue.SimpleQueue()
        self._closed = False

    def post(self, url: str, data: bytes, headers: list[str], seconds: float) -> Answer:
        """POST `data` to `url` (as `prepared_url` spells it: ASCII, http or https) within
        `seconds`. Raises what the channel classifies: `guard.BlockedAddress`,
        `TimeoutError`, `socket.gaierror`, `ConnectionRefusedError`, `ConnectionResetError`,
        `ssl.SSLError`, `http.client.RemoteDisconnected`, `ConnectionError`."""
        host, port, named = _endpoint(url)
        send = _Send(host, port, seconds, self.allowed)
        handle = self._take()
        try:
            handle.send = send
            curl = handle.curl
            if named:
                handle.pin(host, port)
            curl.setopt(pycurl.URL, url)
            curl.setopt(pycurl.POSTFIELDS, data)
            curl.setopt(pycurl.HTTPHEADER, headers)
            curl.setopt(pycurl.TIMEOUT_MS, max(int(seconds * 1000), 1))
            try:
                curl.perform()
            except pycurl.error as exc:
                if exc.args[0] != pycurl.E_FILESIZE_EXCEEDED:  # the body limit: the status counts
                    raise _error(exc, send) from exc
            status = int(curl.getinfo(pycurl.RESPONSE_CODE))
            retry_after = None if 200 <= status < 300 else float(curl.getinfo(pycurl.RETRY_AFTER)) or None
        finally:
            handle.send = None
            self._give_back(handle)
            for sock in send.opened:
                sock.close()
        return Answer(status, retry_after)

    def _take(self) -> _Handle:
        try:
            return self._free.get_nowait()
        except queue.Empty:
            return _Handle(self._share, self.ca_file, self.body_limit, self.connections)

    def _give_back(self, handle: _Handle) -> None:
        if self._closed:  # a send that outlived its tick
            handle.close()
        else:
            self._free.put(handle)

    def close(self) -> None:
        """Close the idle handles (and their connections); a send still running closes its
        own when it ends."""
        self._closed = True
        while True:
            try:
                self._free.get_nowait().close()
            except queue.Empty:
                return


@functools.lru_cache(maxsize=URLS)
def _endpoint(url: str) -> tuple[str, int, bool]:
    """The host and port `url` connects to, and whether the host is a name (not an address)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        return host, parts.port or DEFAULT_PORTS[parts.scheme], True
    return host, parts.port or DEFAULT_PORTS[parts.scheme], False


def _error(exc: pycurl.error, send: _Send) -> BaseException:
    """libcurl's error as the exception requests would have raised (or wrapped)."""
    args: tuple[object, ...] = exc.args  # (code, message)
    code, message = args[0], str(args[-1])
    if send.failure is not None and code == pycurl.E_COULDNT_CONNECT:
        return send.failure  # the guard's refusal, the lookup's or the connect's error
    if code in _TIMED_OUT:
        return TimeoutError(message)
    if code in _TLS:
        return ssl.SSLError(message)
    if code in _NOTHING:
        return http.client.RemoteDisconnected(message)
    if code in _RESET:
        return ConnectionResetError(message)
    if code == pycurl.E_COULDNT_RESOLVE_HOST:
        return socket.gaierror(socket.EAI_NONAME, message)
    return ConnectionError(message)
