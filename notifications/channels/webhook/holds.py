"""A webhook held for the site's signing secret: while NOTIFICATIONS_WEBHOOK_SECRET has no
usable key, rows whose webhook would be signed with it wait (no retry spent) instead of
failing, and the first tick after the fix sends them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import Q

from notifications.conf import app_settings, parse_secrets
from notifications.models import states
from notifications.rules.secrets import site_secret_problem

if TYPE_CHECKING:
    from notifications.models import Notification

CHANNEL = "webhook"


def signing_problem(secrets: tuple[str, ...] | None = None, *, read: bool = True) -> str | None:
    """Why the site cannot sign webhooks (`secrets` as a tick's snapshot has them, else the
    setting read now), or None."""
    if read and secrets is None:
        secrets = parse_secrets(app_settings.WEBHOOK_SECRET)
    return site_secret_problem(secrets)


def unsigned_webhook(row: Notification, problem: str | None, *, own_secret: bool | None = None) -> bool:
    """Whether `row` owes a webhook signed with the site's secret while `problem` (from
    `secrets.site_secret_problem`) says the site has none it can sign with. `own_secret`
    says whether the row has a secret of its own, for a row read without it."""
    if problem is None or (bool(row.webhook_secret) if own_secret is None else own_secret):
        return False
    return CHANNEL in row.owed_channels


def unsigned_rows() -> Q:
    """Rows that will send a webhook signed with the site's secret: going to fire, not
    paused, with the webhook channel and no secret of their own."""
    return Q(states.sends_on(CHANNEL), webhook_secret="", next_fire_at__isnull=False, paused_at__isnull=True)
