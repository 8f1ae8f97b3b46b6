"""Targets: where a row's channels deliver, the unit of flow control. The one definition.

A webhook's target is its URL's host, lowercased, with `:port` when the port is not the
scheme's default (`hooks.example.com`, `127.0.0.1:8081`): one receiver however its URLs
spell it (a trailing dot dropped and a Unicode name in its ASCII form, as the request
goes out: `bücher.example.` is `xn--bcher-kva.example`). Email's is the word `email`.
A row with both channels has two targets: it is held while either is, and takes a slot
of each rate limit. The dispatcher, the circuit breaker and the rate limits all read a
row's targets from here, so a row is queued, capped, held and limited under the same
names.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from notifications.models import Notification

EMAIL = "email"

# Ports a target leaves out, by scheme.
DEFAULT_PORTS = {"http": 80, "https": 443}


def host_target(url: str) -> str:
    """The target of a webhook URL; "" for one that cannot be parsed (the channel refuses it)."""
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


def channel_target(row: Notification, channel: str) -> str:
    """The target of one of `row`'s channels."""
    if channel == "webhook":
        return host_target(row.webhook_url) if row.webhook_url else ""
    return EMAIL


def targets_of(row: Notification) -> list[str]:
    """The targets of the channels the row's current firing still owes, in channel order."""
    targets = [channel_target(row, channel) for channel in row.owed_channels]
    return list(dict.fromkeys(t for t in targets if t))


def target_of(row: Notification) -> str:
    """The one target a row waits on in the dispatcher: its webhook's host while the firing
    still owes the webhook (one slow host must not hold every worker), else `email`."""
    owed = row.owed_channels
    if "webhook" in owed:
        return channel_target(row, "webhook")
    return EMAIL if EMAIL in owed else ""
