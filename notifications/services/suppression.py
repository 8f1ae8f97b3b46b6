"""The suppression list: addresses email is no longer sent to.

Rows of `notifications.models.Suppression` are written in one place,
`notifications.services.suppress`: by the tick's write-back, for the addresses a send was
refused for good (its worker threads touch no database), and by this module's receiver
of django-anymail's `tracking` signal. They are read once per claimed batch, by the email
channel (`Suppression.objects.among`). An operator lifts a suppression by deleting its row (admin: Suppressions).
"""

from __future__ import annotations

import importlib.util
from typing import Any

# Tracking events of django-anymail that suppress their recipient: the provider will not
# deliver there (bounced, rejected), or the recipient asked not to get mail (complained:
# marked as spam; unsubscribed).
SUPPRESSING_EVENTS = frozenset({"bounced", "complained", "rejected", "unsubscribed"})
DISPATCH_UID = "notifications.services.suppression.on_tracking"


def tracking_reason(esp_name: str, event: Any) -> str:
    """`Resend: bounced (mailbox does not exist)`: the provider, the event, its reason."""
    detail = getattr(event, "reject_reason", None) or getattr(event, "description", None) or ""
    detail = " ".join(str(detail).split())
    return f"{esp_name}: {event.event_type}" + (f" ({detail})" if detail else "")


def on_tracking(sender: Any, event: Any, esp_name: str, **kwargs: Any) -> None:
    """django-anymail's `tracking` signal: bounced, complained, rejected and unsubscribed
    events suppress their recipient."""
    from notifications import services

    recipient = getattr(event, "recipient", None)
    if getattr(event, "event_type", None) not in SUPPRESSING_EVENTS or not isinstance(recipient, str) or not recipient:
        return
    services.suppress([(recipient, tracking_reason(esp_name, event))])


def connect_anymail() -> bool:
    """Connect `on_tracking` to django-anymail's `tracking` signal, when anymail is installed."""
    if importlib.util.find_spec("anymail") is None:
        return False
    from anymail import signals

    signals.tracking.connect(on_tracking, dispatch_uid=DISPATCH_UID)
    return True
