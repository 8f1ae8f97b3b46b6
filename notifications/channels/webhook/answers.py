"""What the app asks of the webhook channel about a row, outside a send (`WebhookAnswers`):
its rules on save, its target, its holds and its lines in the admin. Holds no connection
and starts no thread; `WebhookChannel` adds the sending."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy as _

from notifications.channels.base import ChannelAnswers, SettingHold
from notifications.channels.webhook import checks, display, holds, row_errors
from notifications.rules import hosts

if TYPE_CHECKING:
    from django.core.checks import CheckMessage

    from notifications.conf import TickSettings
    from notifications.models import Notification

EVENT_TYPE = "notification.fired"


class WebhookAnswers(ChannelAnswers):
    name = "webhook"
    label = _("Webhook")
    # Its targets are many independent receivers, one of which may hang: a row owing a
    # webhook queues under the webhook's host (`notifications.flow.targets.dispatch_target`).
    dispatch_rank = 1
    admin_fieldset = _("Webhook")
    headline_is_generic = True  # every webhook is a notification.fired

    @classmethod
    def check(cls, name: str, options: dict[str, Any]) -> list[CheckMessage]:
        """The site's signing keys and the networks webhooks may reach."""
        return checks.check_secrets() + checks.check_networks()

    def headline(self, row: Notification) -> str:
        return EVENT_TYPE

    def target(self, row: Notification) -> str:
        """The URL's host, lowercased, with `:port` when not the scheme's default."""
        return hosts.host_target(row.webhook_url) if row.webhook_url else ""

    def row_errors(self, row: Notification) -> dict[str, list[str]]:
        return row_errors.row_errors(row, needed=True)

    def unnamed_errors(self, row: Notification) -> dict[str, list[str]]:
        return row_errors.row_errors(row, needed=False)

    def policy_errors(self, row: Notification) -> dict[str, list[str]]:
        return row_errors.policy_errors(row)

    def destination(self, row: Notification) -> str:
        return display.webhook_target(row.webhook_url) if row.webhook_url else "?"

    def destination_parts(self, row: Notification) -> tuple[str, str]:
        return display.webhook_parts(row.webhook_url) if row.webhook_url else ("", "?")

    def held(self, row: Notification, settings: TickSettings | None = None) -> str | None:
        """A row signed with the site's secret while NOTIFICATIONS_WEBHOOK_SECRET has no
        usable key (E010, W010). A list's rows carry `signs_itself` instead of the secret."""
        problem = holds.signing_problem(settings.webhook_secrets if settings else None, read=settings is None)
        own = getattr(row, "signs_itself", None)
        return problem if holds.unsigned_webhook(row, problem, own_secret=own) else None

    def setting_holds(self) -> list[SettingHold]:
        """While NOTIFICATIONS_WEBHOOK_SECRET has no usable key: the rows that would be signed
        with it wait (`holds.unsigned_rows`)."""
        problem = holds.signing_problem()
        if problem is None:
            return []
        hold = SettingHold(
            problem,
            holds.unsigned_rows(),
            headline=f"Webhooks are held: {problem.removeprefix(f'{holds.CHANNEL}: ')}",
            remedy=(
                "for a key to sign with (no retry is spent): set NOTIFICATIONS_WEBHOOK_SECRET to a key "
                "(manage.py check says how) and the next tick sends them."
            ),
        )
        return [hold]
