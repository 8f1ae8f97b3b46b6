"""The public signals of a tick's outcomes, sent once their batch is written back."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from notifications.models import Notification
from notifications.outcomes import Kind, Outcome

logger = logging.getLogger("notifications")


def announce(outcomes: Iterable[Outcome]) -> None:
    """Send the public signals for a batch that has been written back."""
    from notifications import signals

    by_kind = {
        Kind.SUCCEEDED: signals.notification_delivered,
        Kind.PARTIAL: signals.notification_partially_delivered,
        Kind.DEAD_LETTERED: signals.notification_dead_lettered,
        Kind.EXPIRED: signals.notification_expired,
    }
    for outcome in outcomes:
        signal = by_kind.get(outcome.kind)
        if signal is None or not signal.has_listeners(Notification):
            continue
        errors = {r.channel: r.error for r in outcome.results if r.error}
        sent = signal.send_robust(Notification, notification=outcome.row, results=outcome.results, errors=errors)
        for receiver, response in sent:
            if isinstance(response, Exception):
                logger.error("signal receiver %r failed: %r", receiver, response)
