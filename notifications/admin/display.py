"""How the admin shows times, targets and long text: one format each, for every page.

- A moment is relative (`12 s ago`, `in 4 min`) with the exact timestamp, seconds
  included, on hover: `moment()` for Python display methods, the `moment` template
  filter (`notifications_admin`) for templates.
- A webhook target is its host and path (`hooks.example.com/hooks/invoices`), never the
  query string or credentials; long token-like path segments are masked.
- Long text is clipped by the stylesheet (`nq-clip`) with the whole text on hover; on a
  phone (no hover) it wraps whole instead, an address or host only between its parts
  (`breakable`).

Empty values are None: the admin then shows its one empty-value marker.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, tzinfo

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext, gettext_noop

from notifications.channels.webhook.display import webhook_parts as webhook_parts  # where the admin found them
from notifications.channels.webhook.display import webhook_target as webhook_target

# How a webhook's destination is shown belongs to its channel (host and path, tokens masked).


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


# Where an address or a host may wrap in a narrow column: after its "@" and after each "."
# (`grace@` / `example.com`), never inside a name.
_BREAKS = re.compile(r"(?<=[@.])")
_WBR = mark_safe("<wbr>")  # a literal tag: a line-break opportunity, nothing shown


def breakable(text: str) -> SafeString:
    """`text` escaped, with a line-break opportunity after each "@" and ".": where a column
    is too narrow for it (a phone), `grace@example.com` wraps as `grace@` / `example.com`."""
    return format_html_join(_WBR, "{}", ((part,) for part in _BREAKS.split(text) if part))


def target(channel: str, host: str, path: str) -> SafeString:
    """A destination for a narrow column: the host whole, then as much of the path as
    fits, cut at its start (`127.0.0.1:8081…/broken`), so rows to one host stay apart."""
    return format_html(
        '<span class="nq-clip nq-target" title="{}: {}"><span class="nq-host">{}</span>'
        '<span class="nq-path"><bdi dir="ltr">{}</bdi></span></span>',
        channel,
        host + path,
        breakable(host),
        path,
    )
