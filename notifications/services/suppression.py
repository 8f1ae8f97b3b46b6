"""The suppression list: addresses email is no longer sent to.

Rows of `notifications.models.Suppression` are written in one place,
`notifications.store.suppress`: by the tick's write-back, for the addresses a send was
refused for good (its worker threads touch no database), and by this module's receiver
of django-anymail's `tracking` signal. They are read once per claimed batch, by the email
channel (`Suppression.objects.among`). An operator lifts a suppression by deleting its row (admin: Suppressions).

Each lift is remembered (`SuppressionLift`, written by `record_lifts` on every delete of a
row, however it is deleted): providers replay tracking webhooks (retries, a "resend
events" button), and an event from before the lift must not suppress the address again.
The tick's SMTP refusals are fresh by definition and always suppress.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models.signals import post_delete
from django.utils import timezone

from notifications import store
from notifications.models import Suppression, SuppressionLift
from notifications.models.addresses import storable

logger = logging.getLogger("notifications")

# Tracking events of django-anymail that suppress their recipient: the provider will not
# deliver there (bounced, rejected), or the recipient asked not to get mail (complained:
# marked as spam; unsubscribed).
SUPPRESSING_EVENTS = frozenset({"bounced", "complained", "rejected", "unsubscribed"})
DISPATCH_UID = "notifications.services.suppression.on_tracking"
LIFT_DISPATCH_UID = "notifications.services.suppression.on_suppression_deleted"


def tracking_reason(esp_name: str, event: Any) -> str:
    """`Resend: bounced (mailbox does not exist)`: the provider, the event, its reason."""
    detail = getattr(event, "reject_reason", None) or getattr(event, "description", None) or ""
    detail = " ".join(str(detail).split())
    return f"{esp_name}: {event.event_type}" + (f" ({detail})" if detail else "")


def on_tracking(sender: Any, event: Any, esp_name: str, **kwargs: Any) -> None:
    """django-anymail's `tracking` signal: bounced, complained, rejected and unsubscribed
    events suppress their recipient."""
    recipient = getattr(event, "recipient", None)
    if getattr(event, "event_type", None) not in SUPPRESSING_EVENTS or not isinstance(recipient, str) or not recipient:
        return
    # An event without a time (or without its time zone) cannot be told from a fresh one: it
    # suppresses, as a bounce the operator lifts again beats mail sent on to a dead mailbox.
    happened = getattr(event, "timestamp", None)
    if isinstance(happened, datetime) and timezone.is_aware(happened):
        lifted = lifted_at(recipient)
        if lifted is not None and happened <= lifted:
            logger.info(
                "%s: %s event of %s ignored: its address's suppression was lifted after it, at %s (a replay)",
                esp_name,
                event.event_type,
                happened.isoformat(),
                lifted.isoformat(),
            )
            return
    store.suppress([(recipient, tracking_reason(esp_name, event))])


def lifted_at(address: str) -> datetime | None:
    """When the suppression of `address` was last lifted; None if it never was."""
    key = storable(address)
    if key is None:
        return None
    return SuppressionLift.objects.filter(address=key).values_list("lifted_at", flat=True).first()


def record_lifts(addresses: Iterable[str], now: datetime | None = None, using: str = "default") -> None:
    """Remember that the suppressions of `addresses` were lifted (`now`): a tracking event from
    before then no longer suppresses them. A later lift of an address moves its time."""
    when = now or timezone.now()
    lifts = {key: SuppressionLift(address=key, lifted_at=when) for a in addresses if (key := storable(a))}
    if not lifts:
        return
    # MariaDB/MySQL take no conflict target: their upsert fires on any unique key.
    with_target = connections[using].features.supports_update_conflicts_with_target
    SuppressionLift.objects.using(using).bulk_create(
        lifts.values(),
        update_conflicts=True,
        unique_fields=["address"] if with_target else None,
        update_fields=["lifted_at"],
    )


def on_suppression_deleted(sender: Any, instance: Suppression, using: str, **kwargs: Any) -> None:
    """`post_delete` of a `Suppression`: the admin's delete page and its "delete selected",
    host code's queryset delete. Runs in the delete's transaction: no lift without the delete."""
    record_lifts([instance.address], using=using)


def connect_anymail() -> bool:
    """Connect `on_tracking` to django-anymail's `tracking` signal, when anymail is installed."""
    if importlib.util.find_spec("anymail") is None:
        return False
    from anymail import signals

    signals.tracking.connect(on_tracking, dispatch_uid=DISPATCH_UID)
    return True


def connect_lifts() -> None:
    """Record a lift whenever a `Suppression` row is deleted."""
    post_delete.connect(on_suppression_deleted, sender=Suppression, dispatch_uid=LIFT_DISPATCH_UID)
