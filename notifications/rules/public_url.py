"""NOTIFICATIONS_PUBLIC_URL: the origin unsubscribe and preference links are built on (pure).

A cron tick has no request to read the host from, so the site names its public origin.
RFC 8058 wants an `https` link, and mail clients ignore one that is not, so an `http://`
origin builds no links, with one exception for a developer's laptop: while `DEBUG` is on,
`http://localhost` and `http://127.0.0.1` (any port) are accepted, so the one-click POST
can be tried against `runserver`.

`read` is the one definition of "links can be built": the system check (W041, W043), the
links themselves and the email channel's hold all ask it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

DEVELOPMENT_HOSTS = ("localhost", "127.0.0.1")
EXAMPLE = "https://example.com"


@dataclass(frozen=True)
class PublicUrl:
    """What the setting allows: `origin`, the links' base ("" when none can be built), or
    `problem`, why not; `development` for an http loopback origin accepted while DEBUG is on."""

    origin: str = ""
    problem: str = ""
    development: bool = False


def read(value: Any, *, debug: bool) -> PublicUrl:
    """The public origin in `value` (the setting), with DEBUG as the site has it."""
    if value is None or value == "":
        return PublicUrl(problem="NOTIFICATIONS_PUBLIC_URL is not set")
    if not isinstance(value, str):
        return PublicUrl(problem=f"NOTIFICATIONS_PUBLIC_URL must be a string, not {type(value).__name__}")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is no number
    except ValueError:
        parts = None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username
        or parts.password
    ):
        return PublicUrl(
            problem=f"NOTIFICATIONS_PUBLIC_URL is not an origin such as {EXAMPLE} (no path, query or credentials)"
        )
    origin = f"{parts.scheme}://{parts.netloc}"
    if parts.scheme == "https":
        return PublicUrl(origin=origin)
    if parts.hostname in DEVELOPMENT_HOSTS and debug:
        return PublicUrl(origin=origin, development=True)
    if parts.hostname in DEVELOPMENT_HOSTS:
        return PublicUrl(problem=f"NOTIFICATIONS_PUBLIC_URL is {origin}, accepted only while DEBUG is on")
    return PublicUrl(problem="NOTIFICATIONS_PUBLIC_URL is http://, and mail clients ignore a link that is not https")
