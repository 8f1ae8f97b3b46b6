"""The `inbox` channel: its rules on save, its message (rendered as email renders a row),
and exactly one message per delivered firing, committed with the row's outcome."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings
from django.utils import timezone

from notifications import services
from notifications.api import run_tick, schedule, set_preference
from notifications.channels import Firing, registry
from notifications.channels.inbox.channel import InboxChannel
from notifications.checks.site_channels import check_channels
from notifications.models import InboxMessage, Notification
from notifications.models.states import State
from notifications.outcomes import Kind, Outcome
from notifications.store import writeback
from notifications.testing import capture_notifications

pytestmark = pytest.mark.django_db

URL = "https://hooks.example.com/inbox"


def inbox_row(**fields):
    fields.setdefault("channels", ["inbox"])
    fields.setdefault("recipient", "user:7")
    fields.setdefault("subject", "Order {{ order }} shipped")
    fields.setdefault("body", "Hello {{ name }}")
    fields.setdefault("payload", {"order": 42, "name": "Ada"})
    return schedule(**fields)


# --- rules on save ---------------------------------------------------------------------------


def test_inbox_is_a_built_in_channel_a_site_channel_may_not_be_named():
    assert registry.is_built_in("inbox")
    assert str(registry.label(registry.entries()["inbox"])) == "In-app"
    with override_settings(NOTIFICATIONS_CHANNELS={"inbox": {"BACKEND": "x.Y"}}):
        assert [m.id for m in check_channels()] == ["notifications.E032"]


def test_a_row_naming_inbox_needs_a_recipient():
    with pytest.raises(ValidationError) as caught:
        inbox_row(recipient="")
    assert "recipient" in caught.value.message_dict


@pytest.mark.parametrize(
    "entry",
    [
        {"url": "javascript:alert(1)"},
        {"url": "//evil.example.com/x"},
        {"url": "/\\evil.example.com"},
        {"url": "orders/42"},
        {"url": "https://"},
        {"url": 42},
        {"data": [1, 2]},
        {"colour": "red"},
        "/orders/42",
    ],
)
def test_a_bad_inbox_entry_is_refused_on_channel_data(entry):
    with pytest.raises(ValidationError) as caught:
        inbox_row(channel_data={"inbox": entry})
    assert list(caught.value.message_dict) == ["channel_data"]


def test_a_template_error_is_said_once_when_email_and_inbox_render_it():
    with pytest.raises(ValidationError) as caught:
        inbox_row(channels=["email", "inbox"], email_to="ada@example.com", subject="{% bad %}")
    messages = caught.value.message_dict["subject"]
    assert len(messages) == len(set(messages)) >= 1


# --- the message -----------------------------------------------------------------------------


def test_a_delivered_firing_leaves_one_rendered_message():
    row = inbox_row(
        category="",
        channel_data={"inbox": {"url": "/orders/42", "data": {"order": 42}}},
    )
    assert run_tick().counts()["succeeded"] == 1
    (message,) = InboxMessage.objects.all()
    assert (message.recipient, message.title, message.body) == ("user:7", "Order 42 shipped", "Hello Ada")
    assert message.url == "/orders/42" and message.data == {"order": 42}
    assert message.firing_id == row.firing_id and message.notification_id == row.pk
    assert message.seen_at is message.read_at is message.archived_at is None
    assert not Notification.objects.exists()


def test_the_message_is_rendered_from_the_sites_templates_in_the_rows_language(tmp_path, settings):
    (tmp_path / "orders").mkdir()
    (tmp_path / "orders" / "subject.txt").write_text(
        "{% load i18n %}{% get_current_language as L %}[{{ L }}] #{{ order }}\n"
    )
    (tmp_path / "orders" / "body.txt").write_text("Bonjour {{ name }}")
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [str(tmp_path)]}]
    inbox_row(template="orders", subject="", body="", language="fr")
    run_tick()
    message = InboxMessage.objects.get()
    assert (message.title, message.body) == ("[fr] #42", "Bonjour Ada")


def test_a_digest_is_one_message_with_items_and_count():
    t0 = timezone.now()
    for n in range(3):
        inbox_row(
            subject="{{ count }} new comments",
            body="{% for item in items %}#{{ item.n }} {% endfor %}",
            payload={"n": n},
            digest_key="comments",
            digest_window=600,
            fire_at=t0,
        )
    run_tick(now=t0)
    run_tick(now=t0 + timedelta(seconds=600))
    (message,) = InboxMessage.objects.all()
    assert (message.title, message.body) == ("3 new comments", "#0 #1 #2 ")
    assert not Notification.objects.exists()


@override_settings(NOTIFICATIONS_CATEGORIES={"news": {"label": "News"}}, NOTIFICATIONS_PUBLIC_URL="https://example.com")
def test_a_recipient_who_turned_inbox_off_gets_no_message_but_email_still_goes():
    set_preference("user:7", "news", False, channel="inbox")
    inbox_row(channels=["email", "inbox"], email_to="ada@example.com", category="news")
    with capture_notifications() as captured:
        captured.tick()
        assert len(captured.emails) == 1
    assert not InboxMessage.objects.exists()
    run_tick()
    assert not InboxMessage.objects.exists()


def test_quiet_hours_hold_the_message_until_they_end():
    t0 = timezone.now().replace(hour=23, minute=0, second=0, microsecond=0)
    inbox_row(quiet_hours="22:00-07:00", timezone="UTC", fire_at=t0)
    run_tick(now=t0)
    assert not InboxMessage.objects.exists()
    run_tick(now=t0 + timedelta(hours=8, minutes=1))
    assert InboxMessage.objects.count() == 1


def test_an_expired_firing_leaves_no_message():
    t0 = timezone.now()
    inbox_row(fire_at=t0, expires_at=t0 + timedelta(minutes=1))
    run_tick(now=t0 + timedelta(minutes=5))
    assert not InboxMessage.objects.exists()
    assert Notification.objects.get().state(t0 + timedelta(minutes=5)) == State.EXPIRED


# --- exactly once ----------------------------------------------------------------------------


def test_resends_of_another_channel_of_the_firing_add_no_second_message():
    t0 = timezone.now()
    row = inbox_row(channels=["inbox", "webhook"], webhook_url=URL, fire_at=t0)
    with capture_notifications() as captured:
        captured.respond(503)
        assert captured.tick(now=t0).counts()["partial"] == 1
        assert InboxMessage.objects.count() == 1
        services.requeue(Notification.objects.filter(pk=row.pk))
        later = timezone.now()
        assert captured.tick(now=later).counts()["retried"] == 1  # the webhook alone, retried
        captured.respond(200)
        assert captured.tick(now=later + timedelta(minutes=30)).counts()["succeeded"] == 1
        assert len(captured.webhooks) == 3
    assert not Notification.objects.filter(pk=row.pk).exists()
    assert InboxMessage.objects.count() == 1


def test_a_partial_rows_requeue_adds_no_second_message():
    t0 = timezone.now()
    row = inbox_row(channels=["inbox", "webhook"], webhook_url=URL, fire_at=t0)
    with capture_notifications() as captured:
        captured.respond(410)
        assert captured.tick(now=t0).counts()["partial"] == 1
        captured.respond(200)
        services.requeue(Notification.objects.filter(pk=row.pk))
        captured.tick()
        assert len(captured.webhooks) == 2
    assert InboxMessage.objects.count() == 1


def test_a_firing_written_back_twice_inserts_one_message():
    """The write-back run again for the same firing (a tick whose lease passed to another,
    or the retry after an error at COMMIT) finds the message there and adds none."""
    row = inbox_row()
    sender = InboxChannel.open("inbox", {})
    firing = Firing(row, str(row.firing_id), timezone.now(), ["inbox"])
    for _ in range(2):
        result = sender.send(firing)
        assert result.ok
        writeback.insert_delivered(result.inserts)
    assert InboxMessage.objects.count() == 1


def test_each_firing_of_a_recurring_row_is_a_message_of_its_own():
    t0 = timezone.now().replace(second=0, microsecond=0)
    inbox_row(recurrence_rule="*/5 * * * *", timezone="UTC", fire_at=t0)
    run_tick(now=t0)
    run_tick(now=t0 + timedelta(minutes=5))
    assert InboxMessage.objects.count() == 2
    assert len(set(InboxMessage.objects.values_list("firing_id", flat=True))) == 2


def test_a_row_erased_in_flight_leaves_no_message():
    from notifications.channels import Firing
    from notifications.channels.inbox.channel import InboxChannel

    row = inbox_row()
    firing = Firing(row, str(row.firing_id), timezone.now(), ["inbox"])
    result = InboxChannel.open("inbox", {}).send(firing)
    Notification.objects.filter(pk=row.pk).delete()
    writeback.save_outcomes([(uuid.uuid4(), [Outcome(row, Kind.SUCCEEDED, delete=True, results=[result])])], [])
    assert not InboxMessage.objects.exists()
