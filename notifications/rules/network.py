"""Which addresses a webhook may never reach: the address policy of the guard. Pure.

Refused: loopback, private, link-local, shared (CGNAT), multicast, broadcast,
unspecified, reserved, documentation and benchmarking addresses, IPv6 forms that carry
a refused IPv4 address (v4-mapped, NAT64, 6to4, Teredo), and the clouds' metadata
endpoints (`CLOUD_METADATA`) unless listed exactly. `allowed` networks open ranges on
purpose. Name resolution and the connection itself are `notifications.channels.http.guard`.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


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

# Cloud instance-metadata and host-service endpoints: they hand out credentials, user
# data or a channel to the host agent. Most sit in ranges refused above anyway; this
# table names them, refuses the ones that do not (Azure's 168.63.129.16 is a public
# address), and holds them shut against broad allowed ranges (see `refusal`).
CLOUD_METADATA = _nets(
    *(
        (cidr, "a cloud metadata address")
        for cidr in (
            "169.254.169.254/32",  # AWS, GCP, Azure, Oracle, DigitalOcean, Hetzner, OpenStack, Linode, ...
            "169.254.170.2/32",  # AWS ECS task metadata and credentials
            "169.254.170.23/32",  # AWS EKS Pod Identity credentials
            "169.254.0.23/32",  # Tencent Cloud (metadata.tencentyun.com)
            "169.254.42.42/32",  # Scaleway
            "100.100.100.200/32",  # Alibaba Cloud
            "168.63.129.16/32",  # Azure host agent (WireServer): a public address
            "192.0.0.192/32",  # Oracle Cloud Classic
            "fd00:ec2::/32",  # AWS IPv6 services: IMDS fd00:ec2::254, Pod Identity fd00:ec2::23
            "fd20:ce::254/128",  # GCP IPv6
            "fd00:c1::a9fe:a9fe/128",  # Oracle Cloud IPv6
            "fd00:42::42/128",  # Scaleway IPv6
            "fd00:a9fe:a9fe::1/128",  # Linode (Akamai) IPv6
            "fd00:100::100:200/128",  # Alibaba Cloud IPv6
            "fe80::a9fe:a9fe/128",  # OpenStack IPv6
        )
    )
)
GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
NAT64 = ipaddress.ip_network("64:ff9b::/96")


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


def _inside(net: IPNetwork, entry: IPNetwork) -> bool:
    """`net` lies wholly within `entry`."""
    return net.version == entry.version and net.prefixlen >= entry.prefixlen and net.network_address in entry


def _unlisted_metadata(address: IPAddress, allowed: Sequence[IPNetwork]) -> str | None:
    """Why `address` is refused as a metadata endpoint (or carries one), unless listed exactly.

    Only an allowed range *inside* the metadata entry opens it ("169.254.169.254/32"):
    a broad range opened for a lab network (169.254.0.0/16, fd00::/8, 0.0.0.0/0) must not
    hand instance credentials to whoever types a webhook URL.
    """
    if address.version == 6 and (embedding := embedded_ipv4(address)) is not None:
        form, inner = embedding
        for v4 in inner:
            reason = _unlisted_metadata(v4, allowed)
            if reason:
                return f"{reason} inside {form}"
    for entry, label in CLOUD_METADATA:
        if address in entry and not any(address in net and _inside(net, entry) for net in allowed):
            return label
    return None


def refusal(address: str | IPAddress, allowed: Sequence[IPNetwork]) -> str | None:
    """Why a connection to `address` is refused (e.g. "a loopback address"), or None.

    `allowed`: the networks opened on purpose. IPv6 forms that embed
    IPv4 are judged by what they embed: ::ffff:127.0.0.1 is loopback. Cloud metadata
    addresses are opened only by an allowed range within their own entry.
    """
    if isinstance(address, str):
        address = ipaddress.ip_address(address)
    if address.version == 6 and address.scope_id:
        address = ipaddress.IPv6Address(str(address).split("%", 1)[0])
    metadata = _unlisted_metadata(address, allowed)
    if metadata:
        return metadata
    if any(address in network for network in allowed):
        return None
    if address.version == 6:
        embedding = embedded_ipv4(address)
        if embedding is not None:
            form, inner = embedding
            for v4 in inner:
                reason = refusal(v4, allowed)
                if reason:
                    return f"{reason} inside {form}"
            return None
    return _classify(address)


def bare_host(host: str) -> str:
    """`host` without the brackets of an IPv6 literal."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def literal_address(host: str) -> IPAddress | None:
    """The address `host` spells, if it is an IP literal in any form the resolver accepts.

    Decimal (2130706433), octal (0177.0.0.1), hex and short (127.1) IPv4 spellings and
    bracketed IPv6 all count: they are parsed by getaddrinfo with AI_NUMERICHOST, which
    never touches the network.
    """
    host = bare_host(host)
    if "%" in host:  # an IPv6 zone (fe80::1%eth0, or %25 in a URL): the zone does not matter here
        host = host.split("%", 1)[0]
    try:
        infos = socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError, ValueError):
        return None
    return ipaddress.ip_address(infos[0][4][0]) if infos else None


def literal_refusal(host: str, allowed: Sequence[IPNetwork]) -> tuple[IPAddress, str] | None:
    """For a literal host that is refused: the address and why. None for names and allowed literals."""
    address = literal_address(host)
    if address is None:
        return None
    reason = refusal(address, allowed)
    return (address, reason) if reason else None
