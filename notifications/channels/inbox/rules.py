"""What the inbox channel asks of a row (`InboxRules`), and the message it makes of one."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db.models import OuterRef, Q, Subquery
from django.db.models.lookups import IsNull
from django.utils.translation import gettext_lazy as _

from notifications.channels.base import ChannelAnswers
from notifications.channels.inbox import checks
from notifications.content import email as email_content
from notifications.content.templating import template_errors
from notifications.models import InboxMessage
from notifications.models.inbox import MAX_TITLE_CHARS, MAX_URL_CHARS
from notifications.models.validation import Errors, body_errors
from notifications.rules.inbox_links import is_message_link

if TYPE_CHECKING:
    from django.core.checks import CheckMessage

    from notifications.models import Notification

NAME = "inbox"
ENTRY_KEYS = {"url", "data"}


def entry_errors(entry: Any) -> list[str]:
    """`channel_data["inbox"]`: an object with an optional `url` (http(s):// or a path
    starting with a single /) and an optional `data` (a JSON object)."""
    if not isinstance(entry, Mapping):
        return ['inbox: give an object, e.g. {"url": "/orders/42", "data": {...}}.']
    unknown = sorted(set(entry) - ENTRY_KEYS, key=str)
    if unknown:
        return [f"inbox: unknown key(s) {', '.join(map(repr, unknown))}: only 'url' and 'data'."]
    errors = []
    url = entry.get("url", "")
    if url != "" and not _is_link(url):
        errors.append("inbox: 'url' must be an http(s):// URL or a path starting with a single '/'.")
    if "data" in entry and not isinstance(entry["data"], Mapping):
        errors.append("inbox: 'data' must be a JSON object.")
    return errors


def _is_link(url: Any) -> bool:
    # The one rule of where a message may link: the inbox page asks it again when it shows one.
    return is_message_link(url) and len(url) <= MAX_URL_CHARS


def row_errors(row: Notification) -> Errors:
    """A recipient, a valid entry, and a message that renders: subject and body templates
    (or `template=`, a prefix of the site's files) and a language the site has."""
    errors: Errors = {"recipient": [] if row.recipient else ["The inbox channel needs a recipient."]}
    data = row.channel_data if isinstance(row.channel_data, dict) else {}
    if NAME in data:
        errors["channel_data"] = entry_errors(data[NAME])
    if row.language:
        errors["language"] = email_content.language_errors(row.language)
    if row.template:
        errors["template"] = email_content.template_field_errors(row.template)
    else:
        errors["subject"] = template_errors(row.subject or "")
        errors["body"] = body_errors(row.body or "") or template_errors(row.body or "")
    if isinstance(row.escalate_to, list) and NAME in row.escalate_to:
        errors["escalate_to"] = [
            "The escalation goes out when the inbox message is unread: escalate to another channel."
        ]
    return errors


def escalates(row: Notification) -> bool:
    return row.escalate_after is not None or bool(row.escalate_to)


def unnamed_errors(row: Notification) -> Errors:
    """An escalation waits on the inbox message: a row that escalates names the inbox."""
    if escalates(row):
        return {"channels": ["An escalation needs 'inbox' among the channels: it waits for the inbox message."]}
    return {}


class InboxRules(ChannelAnswers):
    name = NAME
    label = _("In-app")
    admin_fieldset = None

    def row_errors(self, row: Notification) -> dict[str, list[str]]:
        return row_errors(row)

    def unnamed_errors(self, row: Notification) -> dict[str, list[str]]:
        return unnamed_errors(row)

    @classmethod
    def check(cls, name: str, options: dict[str, Any]) -> list[CheckMessage]:
        """How long messages are kept (W050)."""
        return checks.check_retention()

    def escalation_cancelled(self) -> Q:
        """Rows whose inbox message of the firing escalated on (`escalation_of`) reached
        `escalate_unless`: read (archived implies read), or seen (read implies seen)."""
        # A scalar subquery (one probe of the unique (row, firing) index per row), not EXISTS:
        # PostgreSQL may run an EXISTS under OR as a hashed subplan, reading every read
        # message of the table on each claim once enough escalations are due (bench/escalation_claim.py).
        of_firing = InboxMessage.objects.filter(
            notification_id=OuterRef("pk"), firing_id=OuterRef("escalation_of")
        ).order_by()  # unique per (row, firing): no sort in each probe
        read = IsNull(Subquery(of_firing.values("read_at")[:1]), False)
        seen = IsNull(Subquery(of_firing.values("seen_at")[:1]), False)
        return Q(read, escalate_unless="read") | Q(seen, escalate_unless="seen")

    def destination(self, row: Notification) -> str:
        return row.recipient or "?"


def message(row: Notification, firing_id: str, created_at: datetime) -> InboxMessage:
    """The message of one firing of `row` (a digest's first row: one message for all),
    rendered as its email would be; unsaved. Raises TemplateRenderError."""
    content = email_content.render_content(row)
    entry = row.channel_data.get(NAME) if isinstance(row.channel_data, dict) else None
    entry = entry if isinstance(entry, Mapping) else {}
    url = entry.get("url", "")
    data = entry.get("data", {})
    return InboxMessage(
        recipient=row.recipient,
        category=row.category or "",
        title=_storable(content.subject)[:MAX_TITLE_CHARS],
        body=_storable(content.body),
        url=url if _is_link(url) else "",
        data=dict(data) if isinstance(data, Mapping) else {},
        created_at=created_at,
        notification_id=row.pk,
        firing_id=uuid.UUID(str(firing_id)),
    )


def _storable(text: str) -> str:
    """Text every database stores: no NUL, no lone surrogate."""
    return text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
