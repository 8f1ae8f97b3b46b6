"""Every path the app owns refuses bad rows with a ValidationError naming the field.

The same table of bad inputs goes through `notifications.api.schedule()`, through
`Notification.full_clean()` (and `save()`), and through a ModelForm (what the admin uses).
"""

from __future__ import annotations

import json

import pytest
from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone

from notifications.api import schedule
from notifications.channels import ErrorClass, Firing
from notifications.channels.webhook.channel import MALFORMED_URL, WebhookChannel
from notifications.channels.webhook.row_errors import url_errors
from notifications.models import Notification

pytestmark = pytest.mark.django_db

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Hi", "body": "Hello"}
WEBHOOK = {"channels": ["webhook"], "webhook_url": "https://example.com/hook"}

# (case id, fields, the field the error must name)
FULL_WIDTH_HOST = "https://\uff48\uff4f\uff4f\uff4b\uff53.example.com/h"  # no IDNA label
BAD = [
    ("unknown channel", {**EMAIL, "channels": ["email", "sms"]}, "channels"),
    ("no channels", {**EMAIL, "channels": []}, "channels"),
    ("channels not a list", {**EMAIL, "channels": "email"}, "channels"),
    ("duplicate channel", {**EMAIL, "channels": ["email", "email"]}, "channels"),
    ("email without recipient", {**EMAIL, "email_to": ""}, "email_to"),
    ("malformed recipient", {**EMAIL, "email_to": "not an address"}, "email_to"),
    ("webhook without URL", {**WEBHOOK, "webhook_url": ""}, "webhook_url"),
    ("ftp URL", {**WEBHOOK, "webhook_url": "ftp://example.com/hook"}, "webhook_url"),
    ("file URL", {**WEBHOOK, "webhook_url": "file:///etc/passwd"}, "webhook_url"),
    ("javascript URL", {**WEBHOOK, "webhook_url": "javascript:alert(1)"}, "webhook_url"),
    ("credentials in URL", {**WEBHOOK, "webhook_url": "https://user:pw@example.com/"}, "webhook_url"),
    ("host no request can name", {**WEBHOOK, "webhook_url": FULL_WIDTH_HOST}, "webhook_url"),
    ("bad cron", {**EMAIL, "recurrence_rule": "61 * * * *"}, "recurrence_rule"),
    ("cron with 4 fields", {**EMAIL, "recurrence_rule": "0 9 * *"}, "recurrence_rule"),
    ("cron that never fires", {**EMAIL, "recurrence_rule": "0 0 31 2 *"}, "recurrence_rule"),
    ("bad RRULE", {**EMAIL, "recurrence_rule": "FREQ=SOMETIMES"}, "recurrence_rule"),
    ("RRULE out of range", {**EMAIL, "recurrence_rule": "FREQ=DAILY;BYHOUR=25"}, "recurrence_rule"),
    ("unknown zone", {**EMAIL, "timezone": "Mars/Olympus"}, "timezone"),
    ("payload a list", {**EMAIL, "payload": [1, 2]}, "payload"),
    ("payload a string", {**EMAIL, "payload": "hello"}, "payload"),
    ("payload a number", {**EMAIL, "payload": 3}, "payload"),
    ("secret without prefix", {**WEBHOOK, "webhook_secret": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, "webhook_secret"),
    ("secret not base64", {**WEBHOOK, "webhook_secret": "whsec_not*base64!"}, "webhook_secret"),
    ("secret too short", {**WEBHOOK, "webhook_secret": "whsec_c2hvcnQ="}, "webhook_secret"),
    ("subject template broken", {**EMAIL, "subject": "Hi {% if %}"}, "subject"),
    ("body template broken", {**EMAIL, "body": "{{ name|nosuchfilter }}"}, "body"),
]
IDS = [case[0] for case in BAD]


@pytest.mark.parametrize(("case", "fields", "field"), BAD, ids=IDS)
def test_schedule_refuses(case, fields, field):
    with pytest.raises(ValidationError) as info:
        schedule(**fields)
    assert field in info.value.error_dict, info.value.error_dict
    assert not Notification.objects.exists()


@pytest.mark.parametrize(("case", "fields", "field"), BAD, ids=IDS)
def test_full_clean_refuses(case, fields, field):
    row = Notification(**fields)
    with pytest.raises(ValidationError) as info:
        row.full_clean()
    assert field in info.value.error_dict, info.value.error_dict


@pytest.mark.parametrize(("case", "fields", "field"), BAD, ids=IDS)
def test_orm_save_refuses(case, fields, field):
    with pytest.raises(ValidationError) as info:
        Notification.objects.create(**fields)
    assert field in info.value.error_dict
    assert not Notification.objects.exists()


class NotificationForm(forms.ModelForm):
    class Meta:
        model = Notification
        fields = "__all__"


def form_data(fields: dict) -> dict:
    """What a browser would post: JSON fields as JSON text, everything else as strings."""
    data = {"timezone": "UTC", "payload": "{}", "headers": "{}", "priority": "normal"}
    for name, value in fields.items():
        data[name] = json.dumps(value) if name in ("channels", "payload") else value
    return data


@pytest.mark.parametrize(("case", "fields", "field"), BAD, ids=IDS)
def test_model_form_refuses(case, fields, field):
    form = NotificationForm(data=form_data(fields))
    assert not form.is_valid()
    assert field in form.errors, form.errors.as_data()


@pytest.mark.parametrize(
    "fields",
    [
        EMAIL,
        WEBHOOK,
        {**WEBHOOK, "webhook_secret": SECRET, "payload": {"order": 42}},
        {**EMAIL, **WEBHOOK, "channels": ["email", "webhook"]},
        {**EMAIL, "recurrence_rule": "0 9 * * 1-5", "timezone": "Europe/Berlin"},
        {**EMAIL, "recurrence_rule": "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0"},
        {**EMAIL, "subject": "Hi {{ name }}", "payload": {"name": "Ada"}},
        {**WEBHOOK, "webhook_url": "http://127.0.0.1:8080/hook"},
    ],
)
def test_good_rows_pass_every_path(fields):
    Notification(**fields).full_clean()
    form = NotificationForm(data=form_data(fields))
    assert form.is_valid(), form.errors.as_data()
    row = schedule(**fields)
    assert Notification.objects.get(pk=row.pk).channels == fields["channels"]


def test_messages_keep_what_the_user_typed():
    with pytest.raises(ValidationError) as info:
        schedule(**EMAIL, timezone="Mars/Olympus")
    assert info.value.message_dict["timezone"] == ["Unknown time zone 'Mars/Olympus'."]
    with pytest.raises(ValidationError) as info:
        schedule(**{**EMAIL, "channels": ["email", "sms"]})
    assert "'sms'" in info.value.message_dict["channels"][0]


def test_every_bad_field_is_named_at_once():
    with pytest.raises(ValidationError) as info:
        schedule(channels=["webhook"], webhook_url="ftp://x", payload=[], timezone="Nowhere/Land")
    assert set(info.value.error_dict) == {"webhook_url", "payload", "timezone"}


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/hook",
        "https:///no-host",
        "https://user:pw@example.com/hook",
        "https://example.com:99999/hook",
        FULL_WIDTH_HOST,
    ],
)
def test_the_webhook_channel_applies_the_same_url_rule_at_send_time(url):
    """A row stored around validation (raw SQL) fails as a malformed URL, with no request made."""
    assert url_errors(url)
    row = Notification(pk=1, channels=["webhook"], webhook_url=url, payload={})
    channel = WebhookChannel()
    try:
        result = channel.send(Firing(row, "firing", timezone.now(), ["webhook"]))
    finally:
        channel.close()
    assert (result.error, result.error_class) == (MALFORMED_URL, ErrorClass.PERMANENT)
