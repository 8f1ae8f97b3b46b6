"""Where an inbox message may link: an `http(s)://` URL, or a path on the site itself."""

from __future__ import annotations

from urllib.parse import urlsplit


def is_message_link(value: object) -> bool:
    """An `http://` or `https://` URL with a host, or a path starting with a single `/`.

    `//host` (another site, scheme-relative), `/\\host` (which browsers read as `//host`),
    `javascript:` and every other scheme, and anything with a control character or a
    space are not links.
    """
    if not isinstance(value, str) or not value or any(char <= " " or char == "\x7f" for char in value):
        return False
    if value.startswith("/"):
        return not value.startswith(("//", "/\\"))
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)
