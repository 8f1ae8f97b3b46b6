"""Odd input is a ValidationError naming the field, never a 500 or a raw database error.

A NUL (`\\u0000`) or an unpaired surrogate (`\\ud800`) in a key, a subject or a payload
reached PostgreSQL as a DataError (SQLite's driver raised UnicodeEncodeError for a
surrogate); a payload integer of 5,000 digits gave the admin's add form a 500.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from notifications.api import cancel, pause, resume, run_now, schedule
from notifications.models import Notification
from tests.support.admin_forms import add_form

pytestmark = pytest.mark.django_db

NUL, SURROGATE = "\x00", "\ud800"
EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "s", "body": "b"}


def fill(value, bad: str):
    """`value` with `bad` where it says {}: in a string, or in a payload's keys and values."""
    if isinstance(value, dict):
        return {fill(k, bad): fill(v, bad) for k, v in value.items()}
    return value.replace("{}", bad) if isinstance(value, str) else value


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("key", "invoice-{}"),
        ("subject", "Hello {}"),
        ("body", "Hello {}"),
        ("payload", {"name": "Ada {}"}),
        ("payload", {"{}": 1}),
    ],
)
def test_schedule_names_the_field(field, value, bad):
    value = fill(value, bad)
    with pytest.raises(ValidationError) as refused:
        schedule(**{**EMAIL, field: value})
    assert list(refused.value.message_dict) == [field]
    assert not Notification.objects.exists()


@pytest.mark.parametrize("action", [cancel, pause, resume, run_now])
@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
def test_lookups_by_a_key_no_row_can_hold_name_the_key(action, bad):
    schedule(**EMAIL, key="invoice-7")
    with pytest.raises(ValidationError) as refused:
        action(f"invoice-7{bad}")
    assert list(refused.value.message_dict) == ["key"]


@pytest.mark.parametrize(
    "payload",
    ['{"n": ' + "9" * 5000 + "}", '{"name": "Ada \\u0000"}', '{"name": "Ada \\ud800"}'],
    ids=["5000-digit integer", "nul", "surrogate"],
)
def test_the_admin_add_form_refuses_the_payload_on_its_field(admin_client, payload):
    response = admin_client.post(reverse("admin:notifications_notification_add"), add_form(payload=payload))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["payload"]
    assert not Notification.objects.exists()
