"""A URL's host as one receiver: the flow-control target of a webhook (pure).

`hooks.example.com`, `127.0.0.1:8081`: the host lowercased, without a trailing dot,
IDNA-encoded as the request goes out (`bücher.example.` is `xn--bcher-kva.example`),
with `:port` when the port is not the scheme's default.
"""

from __future__ import annotations

import functools
from urllib.parse import urlsplit

# Ports a target leaves out, by scheme.
DEFAULT_PORTS = {"http": 80, "https": 443}


@functools.lru_cache(maxsize=4096)
def host_target(url: str) -> str:
    """The target of a URL; "" for one that cannot be parsed (its channel refuses it).
    Remembered: the tick asks it of every row it claims, and rows repeat their URLs."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return ""
    host = f"[{host}]" if ":" in host else ascii_host(host)  # an IPv6 literal in brackets
    return host if port is None or port == DEFAULT_PORTS.get(parts.scheme.lower()) else f"{host}:{port}"


def ascii_host(host: str) -> str:
    """A host name as one receiver: lowercased, without a trailing dot, IDNA-encoded (a
    name IDNA cannot encode is kept lowercased; the channel refuses it)."""
    host = host.lower().rstrip(".") or host.lower()
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host
