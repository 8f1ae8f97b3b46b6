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
- An RRULE whose BYSETPOS no period can hold (`FREQ=MINUTELY;BYSECOND=0;BYSETPOS=2`, the
  second of one occurrence a minute) never fires: dateutil searched until year 9999 for
  it, hours of CPU in `schedule()`, the admin and the tick.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.core.mail import EmailMultiAlternatives
from django.test.utils import override_settings
from django.urls import reverse
from django.utils import timezone

from notifications.api import Attachment, run_tick, schedule
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


NEVER = [
    "FREQ=MINUTELY;BYSECOND=0;BYSETPOS=2",
    "FREQ=HOURLY;BYMINUTE=0;BYSETPOS=-2",
    "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSETPOS=2",
    "FREQ=WEEKLY;BYDAY=MO;BYSETPOS=2",
]
MESSAGE = "The RRULE never fires: no period has as many occurrences as its BYSETPOS asks for."


@pytest.mark.parametrize("rule", NEVER)
def test_schedule_refuses_a_bysetpos_no_period_holds_at_once(rule):
    started = time.monotonic()
    with pytest.raises(ValidationError) as refused:
        schedule(**EMAIL, recurrence_rule=rule)
    assert time.monotonic() - started < 2
    assert refused.value.message_dict["recurrence_rule"] == [MESSAGE]


@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=MINUTELY;BYSECOND=0,30;BYSETPOS=-2",
        "FREQ=DAILY;BYHOUR=9,17;BYMINUTE=0;BYSETPOS=2",
        "FREQ=WEEKLY;BYDAY=MO,FR;BYSETPOS=2",
        "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1",
    ],
)
def test_bysetpos_a_period_holds_still_schedules(rule):
    assert schedule(**EMAIL, recurrence_rule=rule).next_fire_at is not None


def test_the_admin_add_form_refuses_such_a_rule_at_once(admin_client):
    data = {
        **{k: v for k, v in EMAIL.items() if k != "channels"},
        "channels": ["email"],
        "payload": "{}",
        "timezone": "UTC",
        "recurrence_rule": NEVER[0],
        "next_fire_at_0": "",
        "next_fire_at_1": "",
    }
    started = time.monotonic()
    response = admin_client.post(reverse("admin:notifications_notification_add"), data)

    assert time.monotonic() - started < 5
    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == ["recurrence_rule"]


def test_the_tick_dead_letters_a_bulk_created_row_with_such_a_rule_and_sends_the_rest():
    now = timezone.now()
    (never,) = Notification.objects.bulk_create(
        [Notification(**EMAIL, recurrence_rule=NEVER[0], timezone="UTC", next_fire_at=now - timedelta(minutes=1))]
    )
    schedule(**{**EMAIL, "email_to": "bob@example.com"}, fire_at=now)

    started = time.monotonic()
    report = run_tick(now=now)

    assert time.monotonic() - started < 5
    assert (report.counts()["dead_lettered"], report.counts()["succeeded"]) == (1, 1)
    assert [m.to for m in mail.outbox] == [["bob@example.com"]]
    row = Notification.objects.get(pk=never.pk)
    assert row.dead_lettered_at is not None and row.next_fire_at is None
    assert row.last_error == f"invalid: recurrence_rule: {MESSAGE}"
