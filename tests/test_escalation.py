"""Escalation (SPEC v5 "Escalation"): the row fields `escalate_after`, `escalate_to` and
`escalate_unless`, validated on every path that saves a row."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from notifications.api import schedule
from notifications.models import Notification

pytestmark = pytest.mark.django_db


def escalating(**fields):
    fields.setdefault("channels", ["inbox"])
    fields.setdefault("recipient", "user:7")
    fields.setdefault("subject", "Order {{ order }} shipped")
    fields.setdefault("body", "Hello {{ name }}")
    fields.setdefault("payload", {"order": 42, "name": "Ada"})
    fields.setdefault("email_to", "ada@example.com")
    fields.setdefault("escalate_after", 3600)
    fields.setdefault("escalate_to", ["email"])
    return schedule(**fields)


def refused_on(**fields) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        escalating(**fields)
    return sorted(caught.value.message_dict)


# --- validation -------------------------------------------------------------------------------


def test_schedule_keeps_the_escalation_fields():
    row = Notification.objects.get(pk=escalating(escalate_unless="seen").pk)
    assert (row.escalate_after, row.escalate_to, row.escalate_unless) == (3600, ["email"], "seen")


def test_escalate_unless_is_read_by_default():
    assert escalating().escalate_unless == "read"


def test_a_row_without_escalation_is_unchanged():
    row = schedule(channels=["email"], email_to="ada@example.com", subject="Hi", body="Hi")
    assert (row.escalate_after, row.escalate_to) == (None, [])


@pytest.mark.parametrize(
    ("fields", "at_fault"),
    [
        ({"escalate_after": None}, "escalate_after"),
        ({"escalate_to": []}, "escalate_to"),
        ({"escalate_after": 0}, "escalate_after"),
        ({"escalate_after": -5}, "escalate_after"),
        ({"escalate_to": "email"}, "escalate_to"),
        ({"escalate_to": ["sms"]}, "escalate_to"),
        ({"escalate_to": ["email", "email"]}, "escalate_to"),
        ({"escalate_to": ["inbox"]}, "escalate_to"),
        ({"escalate_unless": "archived"}, "escalate_unless"),
        ({"channels": ["email"]}, "channels"),
        ({"recurrence_rule": "FREQ=DAILY"}, "escalate_after"),
    ],
)
def test_a_bad_escalation_is_refused_on_the_field_at_fault(fields, at_fault):
    assert refused_on(**fields) == [at_fault]


def test_the_admin_form_refuses_an_escalation_without_the_inbox():
    row = Notification(
        channels=["email"],
        email_to="ada@example.com",
        subject="Hi",
        body="Hi",
        escalate_after=60,
        escalate_to=["email"],
    )
    with pytest.raises(ValidationError) as caught:
        row.full_clean()
    assert list(caught.value.message_dict) == ["channels"]
