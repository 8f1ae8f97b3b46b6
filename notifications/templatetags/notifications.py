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
def inbox_badge(context: template.Context) -> dict[str, Any]:
    """A link to the inbox with the unread count, for the request's recipient."""
    request = context.get("request")
    recipient = recipient_of(request) if request is not None else None
    if recipient is None:
        return {"show": False}
    return {"show": True, "unread": inbox.counts(recipient)["unread"], "poll_seconds": f"{inbox_poll_seconds():g}"}
