"""Web origins as a browser sends them in `Origin`: the inbox's allowed cross-origin front ends."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit


def origin_problem(value: Any) -> str | None:
    """Why `value` is not an `https://` origin exactly as a browser spells it in `Origin`
    (scheme and host in lower case, no default port, no path), or None.

    A browser compares `Origin` byte for byte, so an entry spelt otherwise would never
    match: it is reported rather than silently allowing nothing.
    """
    if not isinstance(value, str):
        return f"is a {type(value).__name__}, not a string"
    if value == "*":
        return "is a wildcard: credentials are allowed only for listed origins"
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return "is not a URL"
    if parts.scheme != "https":
        return "is not an https:// origin"
    if not parts.hostname or parts.username is not None or parts.password is not None:
        return "has no host, or has a user name"
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    expected = f"https://{host}" + (f":{port}" if port not in (None, 443) else "")
    if value != expected:
        return f"is not spelt as a browser sends it ({expected!r}: no path, no trailing slash, lower case)"
    return None
