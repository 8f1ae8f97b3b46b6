"""What the app asks of the email channel about a row, outside a send (`EmailAnswers`): its
rules on save, its holds, whose preferences count and its line in the admin. Holds no
connection and starts no thread; `EmailChannel` adds the sending."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from notifications.channels.base import ChannelAnswers, SettingHold
from notifications.channels.email import checks, holds, mailers, row_errors
from notifications.conf import categories, public_url
from notifications.content.links import unbuildable
from notifications.models import addresses, attachments, states

if TYPE_CHECKING:
    from django.core.checks import CheckMessage

    from notifications.conf import TickSettings
    from notifications.models import Notification


def all_addresses(row: Notification) -> list[str]:
    """To, Cc and Bcc of `row`, as stored."""
    return [a for value in (row.email_to, row.email_cc, row.email_bcc) for a in addresses.as_list(value)]


class EmailAnswers(ChannelAnswers):
    name = "email"
    label = _("Email")
    tracks_recipients = True
    takes_attachments = True
    bounds_body = True
    admin_fieldset = _("Email")

    @classmethod
    def check(cls, name: str, options: dict[str, Any]) -> list[CheckMessage]:
        """The mailer the tick sends through, its timeout and the attachments' storage."""
        return checks.check_mailer() + checks.check_email() + checks.check_attachment_storage()

    def row_errors(self, row: Notification) -> dict[str, list[str]]:
        return row_errors.row_errors(row)

    def policy_errors(self, row: Notification) -> dict[str, list[str]]:
        """A `mailer` that names no mailer of the site (checked whatever the row's channels:
        the field is there to be used)."""
        trouble = mailers.problem(row.mailer) if row.mailer else None
        return {"mailer": [f"{trouble[:1].upper()}{trouble[1:]}."]} if trouble else {}

    def destination(self, row: Notification) -> str:
        """The first recipient (`ada@example.com +2`); `?` when the row has none."""
        return addresses.compact(row.email_to) or "?"

    def held(self, row: Notification, settings: TickSettings | None = None) -> str | None:
        """Email that would go through the queue itself, or an alias that names no mailer
        (W022, W027); attachments the tick cannot read where the site keeps them (W024, W028);
        mail of a category that must carry an unsubscribe link while NOTIFICATIONS_PUBLIC_URL
        builds none (W041): sent without it, it would break RFC 8058's promise."""
        trouble = mailers.problem(row.mailer or "") or holds.attachments_held(row)
        if trouble is not None:
            return trouble
        problem = unbuildable(row.category)
        return f"email: {problem} (notifications.W041)" if problem else None

    def setting_holds(self) -> list[SettingHold]:
        """While the attachments' storage is unknown or relative, email with attachments waits;
        while NOTIFICATIONS_PUBLIC_URL builds no links, the mail of categories that are not
        required waits (`held`)."""
        found = []
        problem = attachments.storage_problem()
        if problem is not None:
            found.append(
                SettingHold(
                    f"{self.name}: {problem}",
                    holds.rows_with_attachments(),
                    headline=f"Email with attachments is held: {problem}",
                    remedy=(
                        "for a storage every process reads alike (no retry is spent): fix the setting "
                        "(manage.py check says how) and the next tick sends them."
                    ),
                )
            )
        problem = public_url().problem
        waiting = [key for key, category in categories().items() if not category.required]
        if problem and waiting:
            found.append(
                SettingHold(
                    f"email: {problem} (notifications.W041)",
                    Q(
                        states.sends_on(self.name),
                        category__in=waiting,
                        next_fire_at__isnull=False,
                        paused_at__isnull=True,
                    ),
                    headline=f"Email with unsubscribe links is held: {problem}",
                    remedy="for the links it must carry (no retry is spent): set NOTIFICATIONS_PUBLIC_URL to the "
                    "site's https origin (manage.py check says how) and the next tick sends them.",
                )
            )
        return found

    def recipient_keys(self, row: Notification) -> list[str]:
        """The row's `recipient`; without one, each address (as `addresses.bare` spells it)."""
        if row.recipient:
            return [row.recipient]
        return list(dict.fromkeys(addresses.bare(a) for a in all_addresses(row)))
