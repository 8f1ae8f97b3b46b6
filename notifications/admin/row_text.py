"""What a row is, for the list and its change page: its subject (or event), its queued
message's HTML alternative, and the fieldsets of the channels it does not use folded away."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext

from notifications.admin import display, subjects
from notifications.channels import registry
from notifications.content.queued import restore
from notifications.models import Notification

# The preview's own policy: nothing of the message runs, and nothing is fetched (a remote
# image would tell its sender the operator opened it).
PREVIEW_POLICY = (
    '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
    "style-src 'unsafe-inline'; img-src data:\">"
)


def subject_or_event(row: Notification) -> SafeString | None:
    """What the row is, in a line cut to the column (the whole on hover): its channels'
    own headline (an email's subject, rendered as it goes out: `subjects`), else the site's
    template files it names, else the host's key for it, else a channel's generic one (the
    event a webhook sends). The list reads a payload only to render a subject."""
    specific, generic = "", ""
    for name in row.channel_list:
        channel = registry.channel(name)
        line = channel.headline(row) if channel is not None else ""
        if line and channel is not None and channel.headline_is_generic:
            generic = generic or line
        elif line:
            specific = specific or line
    if specific and specific == row.subject:
        return subjects.line(row)
    if not specific and row.template:
        return display.clip(subjects.files_label(row))
    text = specific or row.key or generic
    return display.clip(" ".join(text.split())) if text else None


def html_alternative(row: Notification) -> str | None:
    """The first `text/html` alternative of a message queued by QueuedEmailBackend, or None."""
    extras = row.message if isinstance(row.message, dict) else None
    for alternative in (extras or {}).get("alternatives") or []:
        if isinstance(alternative, dict) and str(alternative.get("mimetype", "")).startswith("text/html"):
            content = restore(alternative.get("content"))
            if isinstance(content, bytes):
                content = content.decode("utf-8", "replace")
            return str(content)
    return None


def html_preview(html: str) -> SafeString:
    """The HTML in a sandboxed frame (no script, no form, no request of its own)."""
    return format_html(
        '<iframe class="nq-html-preview" sandbox="" referrerpolicy="no-referrer" title="{}" srcdoc="{}"></iframe>',
        gettext("The message's HTML alternative, as sent"),
        PREVIEW_POLICY + html,
    )


def fold_other_channels(fieldsets: Iterable[tuple[Any, dict[str, Any]]], channels: list[str]) -> list[Any]:
    """`fieldsets` with those of the channels the row does not use folded (Django's
    `collapse`): out of the way, still there to add a channel."""
    owners = {}  # a channel's fieldset heading -> the channel (`Channel.admin_fieldset`)
    for channel_name in registry.names():
        channel = registry.channel(channel_name)
        if channel is not None and channel.admin_fieldset:
            owners[str(channel.admin_fieldset)] = channel_name
    folded = []
    for name, options in fieldsets:
        owner = owners.get(str(name))
        if owner is not None and owner not in channels:
            options = {**options, "classes": [*options.get("classes", ()), "collapse"]}
        folded.append((name, options))
    return folded
