"""The webhook's HTTP client: libcurl (pycurl), every send in flight driven by one thread.

Why libcurl and not requests: a tick is CPU-bound at scale, and requests -> urllib3 ->
http.client builds, writes and parses every request in Python (about 0.35 ms of CPU a
send on the benchmark's machine, more than the rest of a delivery). libcurl does the
same work in C, and its total timeout (`TIMEOUT_MS`) bounds the whole send, so no
watchdog thread is needed: a server that drips a byte a second is cut at the deadline
like one that never answers. requests stays for Apprise and for
`transport.new_session()`; a host project that mocks requests (`responses`) in its tests
keeps getting its mock (the webhook channel sends through requests then).

Why one thread for every send (libcurl's multi interface, `_Loop`): a thread per send in
flight hands the GIL over twice a send, and at a tick's concurrency (hundreds of sends
waiting on receivers) that hand-over cost more CPU than the send itself. `begin` starts
a send and returns at once; the loop thread waits on every socket together (epoll,
with one `poll`) and calls the send's `done` with its answer. `post` is `begin` and
a wait, for callers that hold a thread anyway. Hand-written rather than an asyncio
client because the rest of a tick is threads: the loop is the glue libcurl documents
for its socket interface (`M_SOCKETFUNCTION`, `M_TIMERFUNCTION`), nothing more.

The address guard stays in Python, where it is one policy for both clients: `begin`
resolves a name through the guard (`guard.checked_addresses`, bounded by the send's
deadline, in the calling thread), refuses it if any address is refused, and pins the
name to those checked addresses for libcurl (`RESOLVE`), which never resolves a name on
its own. The checked addresses of a name serve its sends for `CHECKED_FOR` seconds. Every
socket libcurl opens is ours (`OPENSOCKETFUNCTION`) and is refused unless its address is
allowed: so the connected address is always a checked one (no DNS-rebinding window),
and the Host header, TLS SNI and certificate checks still use the name in the URL.

All sends share the loop's connection cache, sized by the tick, so keep-alive connections
serve whichever row goes next. No redirects are followed, no proxy or .netrc is read
from the environment, only http and https are spoken (HTTP/1.1), and certificates are
checked against the same CA bundle requests uses (certifi).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import http.client
import logging
import math
import select
import socket
import ssl
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import NamedTuple
from urllib.parse import urlsplit

import certifi
import pycurl

from notifications.channels.http import guard
from notifications.rules.network import IPNetwork

logger = logging.getLogger("notifications.webhook")

DEFAULT_PORTS = {"http": 80, "https": 443}
# Bytes of each handle's buffers (libcurl's smallest upload buffer is 16 KB).
RECEIVE_BUFFER = 4096
SEND_BUFFER = 16384
# Distinct URLs whose host and port are remembered (a burst sends many rows to few URLs).
URLS = 1024
# Seconds a name's checked addresses serve new connections before the guard resolves it
# again: one lookup per name and minute, not one per connection, as a resolver's cache would.
CHECKED_FOR = 60.0
# Seconds `post` waits past its deadline for the loop's answer before giving up on it.
POST_GRACE = 5.0

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
# What libcurl's socket callback asks to watch, as poll()'s events (`select.poll`: on Linux
# and macOS alike, and each call one C call, where `selectors` runs Python per socket).
_EVENTS = {
    pycurl.POLL_IN: select.POLLIN,
    pycurl.POLL_OUT: select.POLLOUT,
    pycurl.POLL_INOUT: select.POLLIN | select.POLLOUT,
}
# A socket whose peer hung up or failed is read by libcurl, which finds out why.
_READABLE = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR


class Answer(NamedTuple):
    """What a receiver answered: its status and, unless a 2xx, the seconds its Retry-After
    header asks to wait (None: none asked; libcurl reads both of the header's forms)."""

    status: int
    retry_after: float | None = None


# A send's end: the receiver's answer, or the exception the channel classifies.
Done = Callable[[Answer | BaseException], None]


class _Handle:
    """One libcurl easy handle and the send it is making (`done`, and why a socket was refused)."""

    def __init__(self, ca_file: str, body_limit: int, allowed: Sequence[IPNetwork]) -> None:
        self.allowed = allowed
        self.done: Done | None = None
        self.refused: BaseException | None = None
        self.opened: list[socket.socket] = []
        curl = self.curl = pycurl.Curl()
        curl.setopt(pycurl.NOSIGNAL, 1)  # timeouts without SIGALRM: the loop is not the main thread
        curl.setopt(pycurl.PROXY, "")  # no proxy, whatever the environment says
        curl.setopt(pycurl.PROTOCOLS, pycurl.PROTO_HTTP | pycurl.PROTO_HTTPS)
        curl.setopt(pycurl.FOLLOWLOCATION, 0)
        curl.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1)
        curl.setopt(pycurl.CAINFO, ca_file)
        # Small buffers: hundreds of handles, answers of a few hundred bytes (libcurl's
        # defaults, 16 KB in and 64 KB out, cost a tick of 256 sends in flight 25 MB more).
        curl.setopt(pycurl.BUFFERSIZE, RECEIVE_BUFFER)
        curl.setopt(pycurl.UPLOAD_BUFFERSIZE, SEND_BUFFER)
        curl.setopt(pycurl.MAXFILESIZE_LARGE, body_limit)  # past it libcurl stops reading; the connection goes
        curl.setopt(pycurl.OPENSOCKETFUNCTION, self.open_socket)
        # The body is dropped as it comes: `len` is a builtin, so no Python frame runs
        # per chunk (and no header callback at all: libcurl parses Retry-After itself).
        curl.setopt(pycurl.WRITEFUNCTION, len)

    def open_socket(self, purpose: int, address: tuple[int, int, int, tuple[object, ...]]) -> socket.socket | int:
        """A socket for libcurl to connect to `address`, if the guard allows that address
        (libcurl only knows the checked addresses a name is pinned to, and literals). Runs
        in the loop's thread: it only checks, it never waits."""
        family, socktype, protocol, sockaddr = address
        host = str(sockaddr[0])
        reason = guard.refusal(host, self.allowed)
        if reason:
            self.refused = guard.BlockedAddress(host, host, reason)
            return pycurl.SOCKET_BAD
        sys.audit("http.client.connect", self, host, sockaddr[1])
        sock = socket.socket(family, socktype, protocol)
        self.opened.append(sock)  # pycurl hands libcurl a duplicate: this one is closed after the send
        return sock

    def close(self) -> None:
        self.curl.close()


class _Loop:
    """The thread that drives every send in flight through one libcurl multi handle.

    Other threads hand it started handles (`add`); it adds them to the multi handle, waits
    on their sockets and libcurl's timer, and calls each handle's `done` when its send
    ends, then gives the handle back to `free`. Only this thread touches the multi handle.
    """

    def __init__(self, connections: int, free: Callable[[_Handle], None]) -> None:
        self.free = free
        self.multi = pycurl.CurlMulti()
        self.multi.setopt(pycurl.M_MAXCONNECTS, connections)  # libcurl's default keeps too few
        self.multi.setopt(pycurl.M_SOCKETFUNCTION, self._watch)
        self.multi.setopt(pycurl.M_TIMERFUNCTION, self._set_timer)
        self.poller = select.poll()
        self.wake_in, self.wake_out = socket.socketpair()
        self.wake_in.setblocking(False)
        self.wake_out.setblocking(False)
        self.poller.register(self.wake_in, select.POLLIN)
        self.incoming: deque[_Handle] = deque()
        self.woken = False  # a byte is on its way to wake_in: adders need not send another
        self.running: dict[pycurl.Curl, _Handle] = {}
        self.timer: float | None = None  # when libcurl wants to be called for its timeouts
        self.closing = False
        self.finished = False  # the thread has ended: nothing added is started any more
        self.thread = threading.Thread(target=self.run, name="notifications-webhooks", daemon=True)
        self.thread.start()

    def add(self, handle: _Handle) -> None:
        """Start `handle`'s send (thread-safe); raises ConnectionError once closed."""
        if self.closing:
            raise ConnectionError("the webhook client is closed")
        self.incoming.append(handle)
        if self.finished:  # the loop ended between the check above and the append
            self._refuse_incoming()
        else:
            self._wake()

    def close(self) -> None:
        """End the thread once the sends in flight have ended (each within its deadline)."""
        self.closing = True
        self._wake()

    def _wake(self) -> None:
        if not self.woken:
            self.woken = True
            # Full of wake-ups already, or closed with the loop (whose end refuses what is left).
            with contextlib.suppress(OSError):
                self.wake_out.send(b"\0")

    def run(self) -> None:
        try:
            while self.running or self.incoming or not self.closing:
                self._admit()
                self._wait()
                self._finish()
        except BaseException as exc:  # no send may wait for a loop that is gone
            logger.exception("the webhook client's loop failed")
            self.closing = True
            for handle in self.running.values():  # those not yet started: `_refuse_incoming`
                self._end(handle, ConnectionError(f"the webhook client failed: {type(exc).__name__}"))
        finally:
            self.finished = True  # before the last look at `incoming`: see `add`
            self._refuse_incoming()
            self.multi.close()
            self.wake_in.close()
            self.wake_out.close()

    def _refuse_incoming(self) -> None:
        while True:
            try:
                handle = self.incoming.popleft()
            except IndexError:
                return
            self._end(handle, ConnectionError("the webhook client is closed"))

    def _admit(self) -> None:
        # Cleared before the queue is read: a handle added after this sends a new byte.
        self.woken = False
        while self.incoming:
            handle = self.incoming.popleft()
            self.running[handle.curl] = handle
            self.multi.add_handle(handle.curl)  # libcurl sets a timer of 0: it starts below

    def _wait(self) -> None:
        timeout = None if self.timer is None else max(0, math.ceil((self.timer - time.monotonic()) * 1000))
        wake = self.wake_in.fileno()
        for fd, events in self.poller.poll(timeout):
            if fd == wake:
                with contextlib.suppress(BlockingIOError):
                    while self.wake_in.recv(4096):
                        pass
                continue
            action = (pycurl.CSELECT_IN if events & _READABLE else 0) | (
                pycurl.CSELECT_OUT if events & select.POLLOUT else 0
            )
            self.multi.socket_action(fd, action)
        if self.timer is not None and time.monotonic() >= self.timer:
            self.timer = None
            self.multi.socket_action(pycurl.SOCKET_TIMEOUT, 0)

    def _finish(self) -> None:
        while True:
            queued, succeeded, failed = self.multi.info_read()
            for curl in succeeded:
                handle = self.running.pop(curl)
                self.multi.remove_handle(curl)
                self._end(handle, _answer(curl))
            for curl, code, message in failed:
                handle = self.running.pop(curl)
                self.multi.remove_handle(curl)
                if code == pycurl.E_FILESIZE_EXCEEDED:  # the body limit: the status counts
                    self._end(handle, _answer(curl))
                else:
                    self._end(handle, _error(code, message, handle, curl))
            if not queued:
                return

    def _end(self, handle: _Handle, outcome: Answer | BaseException) -> None:
        done, handle.done = handle.done, None
        while handle.opened:
            handle.opened.pop().close()
        self.free(handle)
        if done is not None:
            try:
                done(outcome)
            except Exception:  # a caller's bug must not stop every other send
                logger.exception("a webhook send's completion failed")

    def _watch(self, what: int, fd: int, multi: object, data: object) -> None:
        """libcurl's socket callback: watch `fd` for what it asks, or no longer."""
        if what == pycurl.POLL_REMOVE:
            with contextlib.suppress(KeyError):  # never watched
                self.poller.unregister(fd)
        else:
            self.poller.register(fd, _EVENTS[what])  # again: changes what it is watched for

    def _set_timer(self, milliseconds: int) -> None:
        """libcurl's timer callback: call it back in `milliseconds` (-1: no timer)."""
        self.timer = None if milliseconds < 0 else time.monotonic() + milliseconds / 1000


def _answer(curl: pycurl.Curl) -> Answer:
    status = int(curl.getinfo(pycurl.RESPONSE_CODE))
    retry_after = None if 200 <= status < 300 else float(curl.getinfo(pycurl.RETRY_AFTER)) or None
    return Answer(status, retry_after)


class CurlClient:
    """POSTs under a total deadline, to addresses the guard allows; thread-safe.

    `allowed`: the networks the guard opens beyond the public ones (the tick's parsed
    NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS); `body_limit`: response body bytes read
    before the connection is dropped (the answer's status still counts); `connections`:
    the keep-alive connections kept open, busy or idle, to every host together (the
    least recently used idle one is closed past that). Its thread starts with the first send.
    """

    def __init__(
        self, *, allowed: Sequence[IPNetwork], body_limit: int, connections: int, ca_file: str | None = None
    ) -> None:
        self.allowed = allowed
        self.body_limit = body_limit
        self.connections = connections
        self.ca_file = ca_file or certifi.where()
        self._free: list[_Handle] = []
        self._checked: dict[tuple[str, int], tuple[float, str]] = {}  # (name, port) -> (until, RESOLVE entry)
        self._lock = threading.Lock()
        self._loop: _Loop | None = None
        self._closed = False

    def begin(self, url: str, data: bytes, headers: list[str], seconds: float, done: Done) -> None:
        """Start POSTing `data` to `url` (as `prepared_url` spells it: ASCII, http or https)
        within `seconds`, and return; `done` is called once, from the client's thread, with
        the `Answer` or the exception the channel classifies: `TimeoutError`,
        `ConnectionRefusedError`, `ConnectionResetError`, `ssl.SSLError`,
        `http.client.RemoteDisconnected`, `guard.BlockedAddress`, `ConnectionError`.
        Raises (in the calling thread, nothing started) what resolving the name raised:
        `guard.BlockedAddress`, `socket.gaierror`, `guard.ResolutionTimeout`."""
        host, port, named = _endpoint(url)
        pinned = self._pinned(host, port, seconds) if named else None
        loop = self._running_loop()
        handle = self._take()
        handle.done = done
        handle.refused = None
        curl = handle.curl
        if pinned is not None:
            curl.setopt(pycurl.RESOLVE, [pinned])
        curl.setopt(pycurl.URL, url)
        curl.setopt(pycurl.POSTFIELDS, data)
        curl.setopt(pycurl.HTTPHEADER, headers)
        curl.setopt(pycurl.TIMEOUT_MS, max(int(seconds * 1000), 1))
        try:
            loop.add(handle)
        except ConnectionError:
            handle.done = None
            self._give_back(handle)
            raise

    def post(self, url: str, data: bytes, headers: list[str], seconds: float) -> Answer:
        """`begin`, waiting for the answer in this thread: returns it or raises."""
        ended = threading.Event()
        outcome: list[Answer | BaseException] = []

        def done(answer: Answer | BaseException) -> None:
            outcome.append(answer)
            ended.set()

        self.begin(url, data, headers, seconds, done)
        if not ended.wait(seconds + POST_GRACE):
            raise TimeoutError("no answer from the webhook client")
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    def _pinned(self, host: str, port: int, seconds: float) -> str:
        """libcurl's RESOLVE entry for `host`: the addresses the guard checked, looked up
        again once CHECKED_FOR has passed. Raises what the guard raises."""
        now = time.monotonic()
        known = self._checked.get((host, port))
        if known is not None and known[0] > now:
            return known[1]
        infos = guard.checked_addresses(host, port, seconds, allowed=self.allowed)
        addresses = dict.fromkeys(info[4][0] for info in infos)  # in the resolver's order, once each
        entry = f"{host}:{port}:" + ",".join(f"[{a}]" if ":" in a else a for a in addresses)
        self._checked[(host, port)] = (now + CHECKED_FOR, entry)
        return entry

    def _running_loop(self) -> _Loop:
        loop = self._loop
        if loop is not None:
            return loop
        with self._lock:
            if self._closed:
                raise ConnectionError("the webhook client is closed")
            if self._loop is None:
                self._loop = _Loop(self.connections, self._give_back)
            return self._loop

    def _take(self) -> _Handle:
        try:
            return self._free.pop()
        except IndexError:
            return _Handle(self.ca_file, self.body_limit, self.allowed)

    def _give_back(self, handle: _Handle) -> None:
        if self._closed:  # a send that outlived its tick
            handle.close()
        else:
            self._free.append(handle)

    def close(self) -> None:
        """Close the idle handles; the sends in flight end within their deadlines, then the
        loop's thread and their handles go."""
        with self._lock:
            self._closed = True
            loop = self._loop
        if loop is not None:
            loop.close()
        while self._free:
            try:
                self._free.pop().close()
            except IndexError:
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


def _error(code: int, message: str, handle: _Handle, curl: pycurl.Curl) -> BaseException:
    """libcurl's error as the exception requests would have raised (or wrapped)."""
    if code == pycurl.E_COULDNT_CONNECT:
        if handle.refused is not None:
            return handle.refused  # the guard refused the address libcurl was to connect to
        if curl.getinfo(pycurl.OS_ERRNO) == errno.ECONNREFUSED:
            return ConnectionRefusedError(message)
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
