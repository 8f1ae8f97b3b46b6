"""What the admin and the status pages ask of a channel (`AdminView`): how a row of it
reads in a line. Never a secret."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from notifications.models import Notification


class AdminView:
    name: str = ""
    # The heading of the admin's fieldset of this channel's own row fields (`_("Email")`),
    # folded on the change page of a row that does not use the channel; None: no fieldset.
    admin_fieldset: Any = None
    # `headline` says what kind of message it sends, not what this one is (a webhook's
    # event type): the admin's list prefers the row's key to it.
    headline_is_generic: bool = False

    def headline(self, row: Notification) -> str:
        """What the row's message is, in a line, for the admin's list: its subject (the title
        a message of this channel carries); blank when it has none."""
        return str(row.subject or "")

    def destination(self, row: Notification) -> str:
        """One short line for the admin: where this channel sends `row` (never a secret)."""
        data = row.channel_data if isinstance(row.channel_data, dict) else {}
        entry = data.get(self.name)
        to = entry.get("to") if isinstance(entry, dict) else None
        if isinstance(to, str):
            return to
        return self.name

    def destination_parts(self, row: Notification) -> tuple[str, str]:
        """`destination` in two for a narrow column: what names it and is shown whole (a
        host), and what follows it, cut first (a path); ("", destination) when the line is
        not split."""
        return "", self.destination(row)
