"""Where a webhook may connect: public unicast addresses, plus ranges opened on purpose.

A queue that POSTs to URLs people type in must not become a probe of the private
network (SSRF). The policy here refuses loopback, private, link-local, shared (CGNAT),
multicast, broadcast, unspecified, reserved, documentation and benchmarking addresses,
and IPv6 forms that carry an IPv4 address inside (v4-mapped, NAT64, 6to4, Teredo) when
what they carry is refused. `NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS` opens chosen
ranges (development, tests, a known internal receiver).

The transport resolves a host once with `checked_addresses`, refuses it when *any*
address is refused, and then connects to those validated addresses only, so a name
cannot resolve to a public address for the check and a private one for the connect
(DNS rebinding).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from urllib3.util.connection import allowed_gai_family

from .conf import app_settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
AddrInfo = tuple[Any, ...]  # one getaddrinfo() entry: (family, type, proto, canonname, sockaddr)

# The resolver the guard uses for names (not for literals). Tests replace it to make a
# name resolve wherever they need; production uses the system's resolver.
getaddrinfo = socket.getaddrinfo


def _nets(*pairs: tuple[str, str]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(cidr), label) for cidr, label in pairs)


# Refused IPv4 ranges (IANA special-purpose registry), most specific label wins.
IPV4_REFUSED = _nets(
    ("0.0.0.0/8", "a 'this network' address"),
    ("0.0.0.0/32", "the unspecified address"),
    ("10.0.0.0/8", "a private address"),
    ("100.64.0.0/10", "a shared (carrier-grade NAT) address"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address"),
    ("172.16.0.0/12", "a private address"),
    ("192.0.0.0/24", "an IETF protocol assignment"),
    ("192.0.2.0/24", "a documentation address"),
    ("192.88.99.0/24", "a deprecated 6to4 relay address"),
    ("192.168.0.0/16", "a private address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),
    ("255.255.255.255/32", "the broadcast address"),
)

# Refused IPv6 ranges. Everything outside 2000::/3 (global unicast) is refused too.
IPV6_REFUSED = _nets(
    ("::/128", "the unspecified address"),
    ("::1/128", "a loopback address"),
    ("::/96", "a deprecated IPv4-compatible address"),
    ("64:ff9b:1::/48", "a local-use NAT64 address"),
    ("100::/64", "a discard-only address"),
    ("2001:2::/48", "a benchmarking address"),
    ("2001:10::/28", "a deprecated ORCHID address"),
    ("2001:20::/28", "an ORCHIDv2 address"),
    ("2001:db8::/32", "a documentation address"),
    ("3fff::/20", "a documentation address"),
    ("fc00::/7", "a private (unique local) address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a deprecated site-local address"),
    ("ff00::/8", "a multicast address"),
)
GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class BlockedAddress(Exception):
    """A webhook target is, or resolves to, a refused address. Holds no URL or secret."""

    def __init__(self, host: str, address: str, reason: str) -> None:
        super().__init__(f"blocked address: {host} is {address}, {reason}")
        self.host = host
        self.address = address
        self.reason = reason


class ResolutionTimeout(TimeoutError):
    """The name did not resolve within the time left in the channel's deadline."""


def allowed_networks() -> tuple[IPNetwork, ...]:
    """`NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS` as networks; bad entries are skipped.

    `manage.py check` reports bad entries (notifications.E011/E012); skipping them here
    only ever refuses more, never less.
    """
    configured = app_settings.WEBHOOK_ALLOWED_NETWORKS
    if isinstance(configured, str) or not isinstance(configured, Iterable):
        return ()
    networks = []
    for value in configured:
        try:
            networks.append(ipaddress.ip_network(value, strict=False))
        except (TypeError, ValueError):
            continue
    return tuple(networks)


def embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[str, list[ipaddress.IPv4Address]] | None:
    """The IPv4 address(es) an IPv6 form carries, named by the form; None for plain IPv6."""
    if address.ipv4_mapped is not None:
        return "an IPv4-mapped address", [address.ipv4_mapped]
    if address in NAT64:
        return "a NAT64 address", [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]
    if address.sixtofour is not None:
        return "a 6to4 address", [address.sixtofour]
    if address.teredo is not None:
        server, client = address.teredo
        return "a Teredo address", [server, client]
    return None


def _listed(address: IPAddress, table: Sequence[tuple[IPNetwork, str]]) -> str | None:
    matches = [(net.prefixlen, label) for net, label in table if address in net]
    return max(matches)[1] if matches else None


def _classify(address: IPAddress) -> str | None:
    """Why `address` (not an embedding form) is refused, or None if it is public unicast."""
    if address.version == 4:
        reason = _listed(address, IPV4_REFUSED)
    else:
        reason = _listed(address, IPV6_REFUSED)
        if reason is None and address not in GLOBAL_UNICAST_V6:
            reason = "a reserved address"
    if reason:
        return reason
    # The stdlib's registry as a second net: it catches ranges IANA adds later. Its
    # answers differ between Python versions, so the explicit tables above decide the
    # labels and it only ever adds refusals.
    if address.is_loopback or address.is_link_local or address.is_multicast or address.is_unspecified:
        return "a non-unicast or local address"
    if address.is_private or address.is_reserved or not address.is_global:
        return "not a globally routable address"
    return None


def refusal(address: str | IPAddress, allowed: Sequence[IPNetwork] | None = None) -> str | None:
    """Why a connection to `address` is refused (e.g. "a loopback address"), or None.

    `allowed` defaults to NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS. IPv6 forms that embed
    IPv4 are judged by what they embed: ::ffff:127.0.0.1 is loopback.
    """
    if isinstance(address, str):
        address = ipaddress.ip_address(address)
    if allowed is None:
        allowed = allowed_networks()
    if any(address in network for network in allowed):
        return None
    if address.version == 6:
        if address.scope_id:
            address = ipaddress.IPv6Address(str(address).split("%", 1)[0])
        embedding = embedded_ipv4(address)
        if embedding is not None:
            form, inner = embedding
            for v4 in inner:
                reason = refusal(v4, allowed)
                if reason:
                    return f"{reason} inside {form}"
            return None
    return _classify(address)


def _bare(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def literal_address(host: str) -> IPAddress | None:
    """The address `host` spells, if it is an IP literal in any form the resolver accepts.

    Decimal (2130706433), octal (0177.0.0.1), hex and short (127.1) IPv4 spellings and
    bracketed IPv6 all count: they are parsed by getaddrinfo with AI_NUMERICHOST, which
    never touches the network.
    """
    host = _bare(host)
    if "%" in host:  # an IPv6 zone (fe80::1%eth0, or %25 in a URL): the zone does not matter here
        host = host.split("%", 1)[0]
    try:
        infos = socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError, ValueError):
        return None
    return ipaddress.ip_address(infos[0][4][0]) if infos else None


def literal_refusal(host: str) -> tuple[IPAddress, str] | None:
    """For a literal host that is refused: the address and why. None for names and allowed literals."""
    address = literal_address(host)
    if address is None:
        return None
    reason = refusal(address)
    return (address, reason) if reason else None


# A hung resolver must not hold a tick: lookups run in daemon threads (they never block
# interpreter exit), at most this many at once, each waited for only as long as the
# channel's deadline allows.
MAX_CONCURRENT_LOOKUPS = 32
_lookup_slots = threading.BoundedSemaphore(MAX_CONCURRENT_LOOKUPS)


def resolve(host: str, port: int, timeout: float) -> list[AddrInfo]:
    """getaddrinfo() for a TCP connection, given up after `timeout` seconds.

    Literals are parsed in place; names are looked up in a helper thread because
    getaddrinfo has no timeout of its own. Raises socket.gaierror or ResolutionTimeout.
    """
    host = _bare(host)
    family = allowed_gai_family()
    try:
        return socket.getaddrinfo(host, port, family, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass  # a name, not a literal
    if not _lookup_slots.acquire(timeout=timeout):
        raise ResolutionTimeout(f"resolving {host} timed out")
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def lookup() -> None:
        try:
            outcome["infos"] = getaddrinfo(host, port, family, socket.SOCK_STREAM)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            outcome["error"] = exc
        finally:
            _lookup_slots.release()
            done.set()

    threading.Thread(target=lookup, name="notifications-resolve", daemon=True).start()
    if not done.wait(timeout):
        raise ResolutionTimeout(f"resolving {host} timed out")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["infos"]


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
            raise BlockedAddress(_bare(host), address, reason)
    return infos
