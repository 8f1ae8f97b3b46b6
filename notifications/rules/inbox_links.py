"""Where an inbox message may link: an `http(s)://` URL, or a path on the site itself."""

from __future__ import annotations

from urllib.parse import urlsplit


def is_message_link(value: object) -> bool:
    """An `http://` or `https://` URL with a host, or a path starting with a single `/`.

    `//host` (another site, scheme-relative), a path with a backslash (browsers read `/\\host`
    as `//host`), `javascript:` and every other scheme, and anything with a control
    character or a space are not links.
    """
    if (
        not isinstance(value, str)
        or not value
        or any(char <= " " or char == "\x7f" or char.isspace() for char in value)
    ):
        return False
    if value.startswith("/"):
        return "\\" not in value and not value.startswith("//")  # `//host` and `/\host` leave the site
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)
