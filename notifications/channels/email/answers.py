"""What the app asks of the email channel about a row, outside a send (`EmailRules`): its
rules on save, its holds, whose preferences count and its line in the admin. Holds no
connection and starts no thread; `EmailChannel` adds the sending."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.utils.translation import gettext_lazy as _

from notifications import mailers
from notifications.channels.base import ChannelRules
from notifications.channels.email import rules
from notifications.models import addresses

if TYPE_CHECKING:
    from notifications.conf import TickSettings
    from notifications.models import Notification


def all_addresses(row: Notification) -> list[str]:
    """To, Cc and Bcc of `row`, as stored."""
    return [a for value in (row.email_to, row.email_cc, row.email_bcc) for a in addresses.as_list(value)]


class EmailRules(ChannelRules):
    name = "email"
    tracks_recipients = True
    takes_attachments = True
    bounds_body = True
    admin_fieldset = _("Email")

    def row_errors(self, row: Notification) -> dict[str, list[str]]:
        return rules.row_errors(row)

    def policy_errors(self, row: Notification) -> dict[str, list[str]]:
        """A `mailer` that names no mailer of the site (checked whatever the row's channels:
        the field is there to be used)."""
        trouble = mailers.problem(row.mailer) if row.mailer else None
        return {"mailer": [f"{trouble[:1].upper()}{trouble[1:]}."]} if trouble else {}

    def destination(self, row: Notification) -> str:
        """The first recipient (`ada@example.com +2`); `?` when the row has none."""
        return addresses.compact(row.email_to) or "?"

    def held(self, row: Notification, settings: TickSettings | None = None) -> str | None:
        """Email that would go through the queue itself, or an alias that names no mailer (E022)."""
        return mailers.problem(row.mailer or "")

    def recipient_keys(self, row: Notification) -> list[str]:
        """The row's `recipient`; without one, each address (as `addresses.bare` spells it)."""
        if row.recipient:
            return [row.recipient]
        return list(dict.fromkeys(addresses.bare(a) for a in all_addresses(row)))
