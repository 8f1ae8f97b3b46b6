"""`{% load notifications %}`: the signed-in user's inbox badge.

`{% inbox_badge %}` renders a link to the inbox with the request's recipient's unread
count (nothing without a recipient), kept fresh by `notifications/inbox-badge.js`, a
static script (no inline script: it works under CSP `script-src 'self'`). It needs the
`request` context processor. Each person's count is read for that person, never cached
under a key shared by everyone.
"""

from __future__ import annotations

from typing import Any

from django import template

from notifications import inbox
from notifications.conf import inbox_poll_seconds
from notifications.inbox.web.recipient import recipient_of

register = template.Library()


@register.inclusion_tag("notifications/inbox/badge.html", takes_context=True)
def inbox_badge(context: template.Context, poll_seconds: float | None = None) -> dict[str, Any]:
    """A link to the inbox with the unread count, for the request's recipient.
    `poll_seconds` overrides NOTIFICATIONS_INBOX_POLL_SECONDS for this badge (a positive number)."""
    request = context.get("request")
    recipient = recipient_of(request) if request is not None else None
    if recipient is None:
        return {"show": False}
    if not isinstance(poll_seconds, (int, float)) or isinstance(poll_seconds, bool) or not poll_seconds > 0:
        poll_seconds = inbox_poll_seconds()  # a bad value in a template must not break the page
    return {"show": True, "unread": inbox.counts(recipient)["unread"], "poll_seconds": f"{poll_seconds:g}"}
