"""How the admin shows times, targets and long text: one format each, for every page.

- A moment is relative (`12 s ago`, `in 4 min`) with the exact timestamp, seconds
  included, on hover: `moment()` for Python display methods, the `moment` template
  filter (`notifications_admin`) for templates.
- A webhook target is its host and path (`hooks.example.com/hooks/invoices`), never the
  query string or credentials; long token-like path segments are masked.
- Long text is clipped by the stylesheet (`nq-clip`) with the whole text on hover.

Empty values are None: the admin then shows its one empty-value marker.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, tzinfo
from urllib.parse import urlsplit

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext, gettext_noop

# A path segment this long holding letters and digits, or any segment longer than
# TOKEN_LENGTH, is shown as `…`: webhook URLs often carry their token in the path
# (`/services/T0/B0/<token>`, `/api/webhooks/<id>/<token>`).
MIXED_TOKEN_LENGTH = 16
TOKEN_LENGTH = 32
MASK = "…"
_HAS_LETTER = re.compile(r"[A-Za-z]")
_HAS_DIGIT = re.compile(r"\d")


class Styles:
    """The `Media` of every list and page of the app: the badges, and the column widths
    that make the lists fit 1366 px with the sidebar open."""

    css = {"all": ["notifications/admin.css"]}


def duration(delta: timedelta, units: int = 2) -> str:
    """A span in its largest `units` units, rounded down: `12 s`, `4 min 10 s`, `3 h 5 min`,
    `2 d 4 h` (with `units=1`: `4 min`, `3 h`)."""
    seconds = int(abs(delta.total_seconds()))
    first = next(i for i, (size, _) in enumerate(_UNITS) if seconds >= size or size == 1)
    shown: list[str] = []
    for size, unit in _UNITS[first : first + units]:
        amount, seconds = divmod(seconds, size)
        shown.append(gettext(unit) % {"n": amount} if amount or not shown else "")
    return " ".join(part for part in shown if part)


# Seconds per unit, largest first, and how each reads.
_UNITS = (
    (86400, gettext_noop("%(n)d d")),
    (3600, gettext_noop("%(n)d h")),
    (60, gettext_noop("%(n)d min")),
    (1, gettext_noop("%(n)d s")),
)


def relative(moment: datetime, now: datetime | None = None) -> str:
    """`12 s ago`, `in 4 min`, `3 h ago` (the largest unit, rounded down: the exact time is
    on hover), or `now` within a second."""
    delta = moment - (now or timezone.now())
    if abs(delta) < timedelta(seconds=1):
        return gettext("now")
    if delta > timedelta(0):
        return gettext("in %(time)s") % {"time": duration(delta, units=1)}
    return gettext("%(time)s ago") % {"time": duration(delta, units=1)}


def exact(moment: datetime, zone: tzinfo | None = None) -> str:
    """`2026-03-29 09:00:00 CEST (+0200)`, or `2026-12-01 13:15:42 UTC`: in `zone`, else
    the current time zone (the site's TIME_ZONE unless one is activated)."""
    local = timezone.localtime(moment, zone)
    name = local.tzname() or ""
    text = f"{local:%Y-%m-%d %H:%M:%S} {name}"
    if not local.utcoffset() or name.startswith(("+", "-")):  # UTC, or a zone named by its offset (-03)
        return text
    return f"{text} ({local:%z})"


def moment(value: datetime | None, now: datetime | None = None) -> SafeString | None:
    """`<time>` showing `value` relative to now, its exact timestamp on hover; None for none."""
    if value is None:
        return None
    return format_html(
        '<time class="nq-moment" datetime="{}" title="{}">{}</time>',
        value.isoformat(),
        exact(value),
        relative(value, now),
    )


def clip(text: str, hover: str | None = None) -> SafeString:
    """`text` on one line, cut to the column's width by the stylesheet; the whole on hover."""
    return format_html('<span class="nq-clip" title="{}">{}</span>', text if hover is None else hover, text)


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
    if port is not None and port != {"http": 80, "https": 443}.get(parts.scheme.lower()):
        host = f"{host}:{port}"
    return host, "/".join(_mask(segment) for segment in parts.path.split("/"))


def target(channel: str, url: str) -> SafeString:
    """A webhook target for a narrow column: the host whole, then as much of the path as
    fits, cut at its start (`127.0.0.1:8081…/broken`), so rows to one host stay apart."""
    host, path = webhook_parts(url)
    return format_html(
        '<span class="nq-clip nq-target" title="{}: {}"><span class="nq-host">{}</span>'
        '<span class="nq-path"><bdi dir="ltr">{}</bdi></span></span>',
        channel,
        host + path,
        host,
        path,
    )


def _mask(segment: str) -> str:
    if len(segment) > TOKEN_LENGTH:
        return MASK
    if len(segment) >= MIXED_TOKEN_LENGTH and _HAS_LETTER.search(segment) and _HAS_DIGIT.search(segment):
        return MASK
    return segment
