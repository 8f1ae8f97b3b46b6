"""The admin pages of a row: the list's actions, the change page's address, and what a browser posts back."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from notifications.models import Notification

CHANGELIST = "/admin/notifications/notification/"


def add_form(**fields) -> dict:
    """What the add page posts for a one-shot email to ada@example.com, `fields` changed."""
    return {
        "channels": ["email"],
        "email_to": "ada@example.com",
        "subject": "Hi",
        "body": "Hello",
        "payload": "{}",
        "timezone": "UTC",
        "recurrence_rule": "",
        "next_fire_at_0": "",
        "next_fire_at_1": "",
        **fields,
    }


def staff(*codenames: str) -> Client:
    """A client logged in as a staff user holding just these permissions (e.g. view_notification)."""
    user = User.objects.create_user(f"staff-{'-'.join(codenames) or 'none'}", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def list_action(client: Client, action: str, rows, **extra):
    """Run the changelist's `action` on `rows`, as the action bar posts it; follow the redirect."""
    data = {"action": action, "_selected_action": [r.pk for r in rows], **extra}
    return client.post(CHANGELIST, data, follow=True)


def select_all(client: Client, action: str, address: str = CHANGELIST):
    """Run the list's `action` with "Select all" clicked: as the action bar posts it, the boxes
    of the page (all ticked) and `select_across`, to the list's own address (its filters)."""
    boxes = [field["value"] for field in inputs(client.get(address)) if field.get("name") == "_selected_action"]
    return client.post(address, {"action": action, "select_across": "1", "index": "0", "_selected_action": boxes})


def answer_yes(client: Client, page):
    """Submit a confirmation page's form as a browser does: its hidden fields, to the page's
    own address (the form has no `action`); follow the redirect."""
    data: dict[str, list[str]] = {}
    for field in inputs(page):
        if field.get("type") == "hidden":
            data.setdefault(field["name"], []).append(field.get("value") or "")
    return client.post(page.wsgi_request.get_full_path(), data, follow=True)


class _Inputs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "input":
            self.found.append(dict(attrs))


def inputs(response) -> list[dict]:
    """The `<input>` elements of a page, each as its attributes."""
    parser = _Inputs()
    parser.feed(response.content.decode())
    return parser.found


def visible_text(response) -> str:
    """A page's text as an operator reads it: tags dropped, white space collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", response.content.decode()).split())


def texts(response) -> list[str]:
    """The messages a response shows the operator."""
    return [str(m) for m in get_messages(response.wsgi_request)] or [
        str(m) for m in response.context.get("messages", [])
    ]


def change_url(row: Notification) -> str:
    return reverse("admin:notifications_notification_change", args=[row.pk])


def change_form(row: Notification, **changes: str | list[str]) -> dict:
    """What the change page posts for `row` left as it is, plus `changes`.

    As a browser sends it: the due time as shown (in the current time zone; blank for a
    parked row), the secret box empty (the page never shows the stored secret), and the
    hidden `initial-*` values of the fields with callable defaults: what the row held
    when the page was loaded, against which Django tells what was edited; and the row's
    `version` (its `updated_at` then), which refuses an edit of a row changed since.
    """
    due = timezone.localtime(row.next_fire_at) if row.next_fire_at else None
    payload = json.dumps(row.payload)
    return {
        "channels": row.channel_list,
        "email_to": row.email_to,
        "subject": row.subject,
        "body": row.body,
        "webhook_url": row.webhook_url,
        "webhook_secret": "",
        "payload": payload,
        "initial-payload": payload,
        "from_email": row.from_email,
        "headers": json.dumps(row.headers),
        "initial-headers": json.dumps(row.headers),
        "mailer": row.mailer,
        "priority": row.priority,
        "recurrence_rule": row.recurrence_rule,
        "timezone": row.timezone,
        "initial-timezone": row.timezone,
        "next_fire_at_0": due.strftime("%Y-%m-%d") if due else "",
        "next_fire_at_1": due.strftime("%H:%M:%S") if due else "",
        "version": row.updated_at.isoformat(),
        "attempts-TOTAL_FORMS": "0",
        "attempts-INITIAL_FORMS": "0",
        "attempts-MIN_NUM_FORMS": "0",
        "attempts-MAX_NUM_FORMS": "0",
        **changes,
    }
