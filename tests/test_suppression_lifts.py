"""A lifted suppression stays lifted when the provider replays an old event.

An operator lifts a suppression by deleting its row (admin: Suppressions). Providers
replay tracking webhooks (retries, a "resend events" button), so a `bounced` event that
happened before the lift must not suppress the address again; one that happened after it
does. However the row is deleted (the admin's delete page, its "delete selected" action,
host code's queryset delete), the lift is remembered.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from anymail.signals import AnymailTrackingEvent, tracking
from django.urls import reverse
from django.utils import timezone

from notifications import store
from notifications.models import Suppression, SuppressionLift

pytestmark = pytest.mark.django_db

BOUNCED_AT = timezone.now().replace(microsecond=0) - timedelta(hours=1)


def bounce(recipient: str = "gone@example.com", at=BOUNCED_AT) -> None:
    event = AnymailTrackingEvent(event_type="bounced", recipient=recipient, timestamp=at, reject_reason="bounced")
    tracking.send(sender=object, event=event, esp_name="Resend")


def suppressed() -> list[str]:
    return list(Suppression.objects.values_list("address", flat=True))


def test_a_replayed_event_does_not_undo_a_lift_in_the_admin(admin_client, caplog):
    bounce()
    (entry,) = Suppression.objects.all()

    response = admin_client.post(reverse("admin:notifications_suppression_delete", args=[entry.pk]), {"post": "yes"})
    assert response.status_code == 302
    assert suppressed() == []

    with caplog.at_level(logging.INFO, logger="notifications"):
        bounce()  # the same event, replayed
    assert suppressed() == []
    (line,) = [r.getMessage() for r in caplog.records if r.name == "notifications"]
    assert "ignored" in line
    assert "gone@example.com" not in line

    bounce(at=timezone.now() + timedelta(seconds=1))  # a new bounce, after the lift
    assert suppressed() == ["gone@example.com"]
    # The lift is kept: a still older replay changes nothing either way.
    assert SuppressionLift.objects.filter(address="gone@example.com").exists()


def test_the_admins_bulk_delete_records_the_lifts(admin_client):
    bounce("one@example.com")
    bounce("two@example.com")
    bounce("kept@example.com")
    lifted = Suppression.objects.exclude(address="kept@example.com")

    response = admin_client.post(
        reverse("admin:notifications_suppression_changelist"),
        {"action": "delete_selected", "_selected_action": [s.pk for s in lifted], "post": "yes"},
    )
    assert response.status_code == 302

    bounce("one@example.com")
    bounce("two@example.com")
    assert suppressed() == ["kept@example.com"]
    assert sorted(SuppressionLift.objects.values_list("address", flat=True)) == ["one@example.com", "two@example.com"]


def test_a_queryset_delete_records_the_lift_and_a_second_lift_moves_it(time_machine):
    time_machine.move_to(BOUNCED_AT + timedelta(minutes=1), tick=False)
    bounce("Gone@Example.com")
    Suppression.objects.filter(address="gone@example.com").delete()

    bounce(at=BOUNCED_AT)  # replayed: ignored
    assert suppressed() == []
    assert SuppressionLift.objects.get(address="gone@example.com").lifted_at == BOUNCED_AT + timedelta(minutes=1)

    bounce(at=BOUNCED_AT + timedelta(minutes=2))  # a new bounce after the lift
    time_machine.move_to(BOUNCED_AT + timedelta(minutes=3), tick=False)
    Suppression.objects.all().delete()
    (lift,) = SuppressionLift.objects.all()
    assert lift.lifted_at == BOUNCED_AT + timedelta(minutes=3)

    bounce(at=BOUNCED_AT + timedelta(minutes=2))  # the second bounce, replayed after the second lift
    assert suppressed() == []


def test_an_event_without_a_timestamp_still_suppresses():
    bounce()
    Suppression.objects.all().delete()

    bounce(at=None)

    assert suppressed() == ["gone@example.com"]


def test_an_smtp_refusal_after_a_lift_suppresses():
    bounce()
    Suppression.objects.all().delete()

    store.suppress([("gone@example.com", "SMTP 550 5.1.1")])

    assert suppressed() == ["gone@example.com"]
