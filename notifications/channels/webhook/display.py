"""How the admin shows a webhook's destination: host and path, never credentials,
query string or a token in the path."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from notifications.rules.hosts import DEFAULT_PORTS

# A path segment this long holding letters and digits, or any segment longer than
# TOKEN_LENGTH, is shown as `…`: webhook URLs often carry their token in the path
# (`/services/T0/B0/<token>`, `/api/webhooks/<id>/<token>`).
MIXED_TOKEN_LENGTH = 16
TOKEN_LENGTH = 32
MASK = "…"
_HAS_LETTER = re.compile(r"[A-Za-z]")
_HAS_DIGIT = re.compile(r"\d")


def webhook_target(url: str) -> str:
    """`hooks.example.com/hooks/invoices`: host (`:port` unless the scheme's default) and
    path of a webhook URL; never its credentials or query string. `?` when unreadable."""
    host, path = webhook_parts(url)
    return host + path


def webhook_parts(url: str) -> tuple[str, str]:
    """`webhook_target` in two: (`hooks.example.com`, `/hooks/invoices`); (`?`, ``) when unreadable."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "?", ""
    if not host:
        return "?", ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal
    if port is not None and port != DEFAULT_PORTS.get(parts.scheme.lower()):
        host = f"{host}:{port}"
    return host, "/".join(_mask(segment) for segment in parts.path.split("/"))


def _mask(segment: str) -> str:
    if len(segment) > TOKEN_LENGTH:
        return MASK
    if len(segment) >= MIXED_TOKEN_LENGTH and _HAS_LETTER.search(segment) and _HAS_DIGIT.search(segment):
        return MASK
    return segment
