"""More odd input, each a ValidationError naming the field, never a 500, a raw database
error or a hung worker.

- A lone surrogate (`\\ud800`) in `from_email`, in `headers`, in an attachment's name or in
  a queued message's HTML part reached the database (UnicodeEncodeError on SQLite, a
  DataError on PostgreSQL): only the fields of `TEXT_FIELDS`, the addresses and the
  payload were checked.
- An integer past 1e308 in `max_delay`, `max_retries` or `backoff` raised OverflowError
  (`math.isfinite`), in `schedule()` and as a 500 in the admin; `float("inf")` in
  `max_delay` or `max_retries` did so in Django's IntegerField. The admin's `headers` and
  `backoff` boxes gave a 500 for an integer of 5,000 digits, as the payload's once did.

An RRULE whose BYSETPOS no period can hold is in tests/test_rule_bounds.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.mail import EmailMultiAlternatives
from django.test.utils import override_settings
from django.utils import timezone

from notifications.api import Attachment, schedule
from notifications.models import Notification
from tests.support.admin_forms import change_form, change_url

pytestmark = pytest.mark.django_db

SURROGATE = "\ud800"
EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "s", "body": "b"}
HUGE = 10**400


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("from_email", f"Ada {SURROGATE} <ada@example.com>"),
        ("headers", {"X-Note": f"v{SURROGATE}"}),
        ("headers", {f"X-{SURROGATE}": "v"}),
        ("attachments", [Attachment(f"a{SURROGATE}.txt", b"x", "text/plain")]),
    ],
    ids=["from_email", "header value", "header name", "attachment name"],
)
def test_schedule_names_the_field_holding_a_surrogate(field, value):
    with pytest.raises(ValidationError) as refused:
        schedule(**EMAIL, **{field: value})
    assert list(refused.value.message_dict) == [field]
    assert not Notification.objects.exists()


@override_settings(
    EMAIL_BACKEND="notifications.mail.QueuedEmailBackend",
    NOTIFICATIONS_EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend",
)
@pytest.mark.parametrize("bad", ["\x00", SURROGATE], ids=["nul", "surrogate"])
def test_the_queued_backend_refuses_an_html_part_no_database_stores(bad):
    message = EmailMultiAlternatives("s", "b", "f@example.com", ["ada@example.com"])
    message.attach_alternative(f"<p>{bad}</p>", "text/html")
    with pytest.raises(ValidationError) as refused:
        message.send()
    assert list(refused.value.message_dict) == ["message"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_delay", HUGE),
        ("max_retries", HUGE),
        ("backoff", [60, HUGE]),
        ("max_delay", float("inf")),
        ("max_retries", float("inf")),
        ("max_delay", float("nan")),
    ],
    ids=["max_delay 1e400", "max_retries 1e400", "backoff 1e400", "max_delay inf", "max_retries inf", "max_delay nan"],
)
def test_schedule_names_a_number_too_big_for_its_field(field, value):
    with pytest.raises(ValidationError) as refused:
        schedule(**EMAIL, **{field: value})
    assert list(refused.value.message_dict) == [field]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_delay", "9" * 400),
        ("max_retries", "9" * 400),
        ("backoff", "[1" + "0" * 400 + "]"),
        ("backoff", "[" + "9" * 5000 + "]"),
        ("headers", '{"X-Note": ' + "9" * 5000 + "}"),
        ("headers", '{"X-Note": "v\\ud800"}'),
        ("headers", '{"X-\\ud800": "v"}'),
    ],
    ids=[
        "max_delay",
        "max_retries",
        "backoff 1e400",
        "backoff digits",
        "headers digits",
        "header value",
        "header name",
    ],
)
def test_the_admin_change_form_refuses_it_on_its_field(admin_client, field, value):
    row = schedule(**EMAIL, fire_at=timezone.now() + timedelta(days=1))

    response = admin_client.post(change_url(row), change_form(row, **{field: value}))

    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == [field]
    assert Notification.objects.get(pk=row.pk).updated_at == row.updated_at
