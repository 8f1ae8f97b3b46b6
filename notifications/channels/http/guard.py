"""Where a webhook may connect: public unicast addresses, plus ranges opened on purpose.

A queue that POSTs to URLs people type in must not become a probe of the private
network (SSRF). The policy here refuses loopback, private, link-local, shared (CGNAT),
multicast, broadcast, unspecified, reserved, documentation and benchmarking addresses,
and IPv6 forms that carry an IPv4 address inside (v4-mapped, NAT64, 6to4, Teredo) when
what they carry is refused. It also refuses the clouds' well-known metadata and
host-service endpoints (`CLOUD_METADATA`), including Azure's public 168.63.129.16.
`NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS` opens chosen ranges (development, tests, a
known internal receiver); a metadata endpoint opens only when the allowed range lies
within its own entry (list "169.254.169.254/32" itself: 169.254.0.0/16 is not enough).

The transport resolves a host once with `checked_addresses`, refuses it when *any*
address is refused, and then connects to those validated addresses only, so a name
cannot resolve to a public address for the check and a private one for the connect
(DNS rebinding). Lookups are bounded by the caller's deadline and shared per name, so
a name whose resolver hangs costs nothing to rows for other names (see `resolve`).
"""

from __future__ import annotations

import copy
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

from notifications.compat import allowed_gai_family
from notifications.conf import app_settings, parse_networks
from notifications.exceptions import NotificationsError
from notifications.rules import network
from notifications.rules.network import IPAddress, IPNetwork, bare_host

AddrInfo = tuple[Any, ...]  # one getaddrinfo() entry: (family, type, proto, canonname, sockaddr)

# The resolver the guard uses for names (not for literals). Tests replace it to make a
# name resolve wherever they need; production uses the system's resolver.
getaddrinfo = socket.getaddrinfo


class BlockedAddress(NotificationsError):
    """A webhook target is, or resolves to, a refused address. Holds no URL or secret."""

    def __init__(self, host: str, address: str, reason: str) -> None:
        super().__init__(f"blocked address: {host} is {address}, {reason}")
        self.host = host
        self.address = address
        self.reason = reason


class ResolutionTimeout(NotificationsError, TimeoutError):
    """The name did not resolve within the time left in the channel's deadline."""


def allowed_networks() -> tuple[IPNetwork, ...]:
    """`NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS` as networks, parsed now; bad entries are skipped.

    The default of the functions below when no `allowed` is passed. A tick parses the
    setting once (`TickSettings.allowed_networks`) and passes it instead.
    """
    return parse_networks(app_settings.WEBHOOK_ALLOWED_NETWORKS)


def refusal(address: str | IPAddress, allowed: Sequence[IPNetwork] | None = None) -> str | None:
    """`network.refusal`, with NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS when no `allowed` is passed."""
    return network.refusal(address, allowed_networks() if allowed is None else allowed)


def literal_refusal(host: str, allowed: Sequence[IPNetwork] | None = None) -> tuple[IPAddress, str] | None:
    """`network.literal_refusal`, with NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS when no `allowed` is passed."""
    return network.literal_refusal(host, allowed_networks() if allowed is None else allowed)


# Name lookups. getaddrinfo() has no timeout of its own, so it runs in a daemon thread
# (never blocking interpreter exit) that the caller waits on for at most its own
# deadline. A hung lookup may outlive the row that asked by minutes, so what it holds
# must never be something another name waits for:
# - one lookup per name at a time (single flight): every row wanting a name shares the
#   lookup in flight, so a hung name holds one thread however many rows ask for it;
# - a caller only ever waits for its own name's lookup, and gives up at its deadline
#   while the lookup runs on; no shared pool of slots that hung lookups keep full.
# MAX_LOOKUP_THREADS bounds what a resolver that never returns can pile up: one thread
# per distinct hung name, at most this many. A system resolver gives up by itself
# (glibc: 5 s x 2 attempts per nameserver), and a tick starts at most CONCURRENCY new
# names per CHANNEL_TIMEOUT, so healthy names do not meet this cap in practice; past
# it a new name waits, within its deadline, for any lookup to end.
MAX_LOOKUP_THREADS = 256


class _Lookup:
    """One getaddrinfo() in flight for a name, shared by every caller that wants it."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.infos: list[AddrInfo] = []
        self.error: BaseException | None = None


_lookups: dict[tuple[str, int], _Lookup] = {}  # (name, family) -> the lookup in flight
_lookups_changed = threading.Condition()


def lookups_in_flight() -> list[str]:
    """The names being looked up now, one thread each (for tests and diagnostics)."""
    with _lookups_changed:
        return sorted(host for host, _family in _lookups)


def _run_lookup(key: tuple[str, int], lookup: _Lookup) -> None:
    host, family = key
    try:
        lookup.infos = getaddrinfo(host, None, family, socket.SOCK_STREAM)
    except BaseException as exc:  # noqa: BLE001 - handed to the waiting callers
        lookup.error = exc
    finally:
        with _lookups_changed:
            del _lookups[key]  # the next caller asks afresh: answers are never cached
            _lookups_changed.notify_all()
        lookup.done.set()


def _start_lookup(key: tuple[str, int], timeout: float) -> _Lookup | None:
    """The lookup in flight for `key`, started if needed; None if none could start in time."""
    with _lookups_changed:
        # Joining a lookup in flight never waits; a new name waits only at the cap.
        def room() -> bool:
            return key in _lookups or len(_lookups) < MAX_LOOKUP_THREADS

        if not _lookups_changed.wait_for(room, timeout):
            return None
        if key in _lookups:
            return _lookups[key]
        lookup = _lookups[key] = _Lookup()
    thread = threading.Thread(target=_run_lookup, args=(key, lookup), name="notifications-resolve", daemon=True)
    try:
        thread.start()
    except RuntimeError as exc:  # the OS refused a thread: fail this lookup and free its place
        with _lookups_changed:
            del _lookups[key]
            _lookups_changed.notify_all()
        lookup.error = exc
        lookup.done.set()
    return lookup


def _with_port(info: AddrInfo, port: int) -> AddrInfo:
    family, type_, proto, canonname, sockaddr = info
    return (family, type_, proto, canonname, (sockaddr[0], port, *sockaddr[2:]))


def resolve(host: str, port: int, timeout: float) -> list[AddrInfo]:
    """getaddrinfo() for a TCP connection, given up after `timeout` seconds.

    Literals are parsed in place and never reach the resolver. Names are looked up by
    name alone (the port is filled in afterwards), so callers on any port share one
    lookup. Raises socket.gaierror or ResolutionTimeout.
    """
    host = bare_host(host)
    family = allowed_gai_family()
    try:
        return socket.getaddrinfo(host, port, family, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass  # a name, not a literal
    deadline = time.monotonic() + timeout
    lookup = _start_lookup((host.lower(), family), timeout)  # DNS names are case-insensitive
    if lookup is None or not lookup.done.wait(max(0.0, deadline - time.monotonic())):
        raise ResolutionTimeout(f"resolving {host} timed out")
    if lookup.error is not None:
        raise copy.copy(lookup.error)  # each caller its own: raising one object in many threads tangles it
    return [_with_port(info, port) for info in lookup.infos]


def checked_addresses(
    host: str, port: int, timeout: float, allowed: Sequence[IPNetwork] | None = None
) -> list[AddrInfo]:
    """Resolve `host` once and return its addresses, all of them allowed.

    Raises BlockedAddress if any address is refused: a name that resolves to one
    public and one private address is refused, so a round-robin answer cannot smuggle
    a private target in. Connect only to what this returns.
    """
    infos = resolve(host, port, timeout)
    if not infos:
        raise socket.gaierror(socket.EAI_NONAME, "no addresses")
    if allowed is None:
        allowed = allowed_networks()
    for info in infos:
        address = info[4][0]
        reason = refusal(address, allowed)
        if reason:
            raise BlockedAddress(bare_host(host), address, reason)
    return infos
