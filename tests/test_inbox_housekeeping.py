"""The inbox's messages over time: retention by the tick's housekeeping, `erase()`, the
admin's read-only list, and the check of NOTIFICATIONS_INBOX_RETENTION_DAYS."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from notifications.api import erase, run_tick
from notifications.channels.checks import check_each_channel
from notifications.models import InboxMessage
from notifications.services.erasure import describe, person

pytestmark = pytest.mark.django_db


def message(recipient="user:1", age_days=0.0, **fields):
    return InboxMessage.objects.create(
        recipient=recipient,
        title=fields.pop("title", "Hello"),
        notification_id=1,
        firing_id=uuid.uuid4(),
        created_at=timezone.now() - timedelta(days=age_days),
        **fields,
    )


def test_the_tick_deletes_messages_past_retention_read_or_not():
    old_unread = message(age_days=91)
    old_read = message(age_days=95, read_at=timezone.now(), seen_at=timezone.now())
    kept = message(age_days=89)
    run_tick()
    assert list(InboxMessage.objects.all()) == [kept]
    assert not InboxMessage.objects.filter(pk__in=[old_unread.pk, old_read.pk]).exists()


@override_settings(NOTIFICATIONS_INBOX_RETENTION_DAYS=7)
def test_retention_follows_the_setting():
    message(age_days=8)
    kept = message(age_days=6)
    run_tick()
    assert list(InboxMessage.objects.all()) == [kept]


@override_settings(NOTIFICATIONS_INBOX_RETENTION_DAYS="forever")
def test_an_unusable_retention_is_a_warning_and_the_default_applies():
    assert [m.id for m in check_each_channel() if m.id == "notifications.W050"] == ["notifications.W050"]
    message(age_days=91)
    kept = message(age_days=30)
    run_tick()
    assert list(InboxMessage.objects.all()) == [kept]


def test_the_default_retention_raises_no_warning():
    assert not [m for m in check_each_channel() if m.id == "notifications.W050"]


def test_erase_deletes_the_persons_messages_and_counts_them():
    message()
    message(archived_at=timezone.now())
    other = message(recipient="user:2")
    assert describe(person(recipient="user:1"))["inbox_messages"] == 2  # the dry run says so first
    counts = erase(recipient="user:1")
    assert counts["inbox_messages"] == 2
    assert list(InboxMessage.objects.all()) == [other]


def test_the_admin_lists_messages_by_recipient_category_and_state(admin_client):
    now = timezone.now()
    message(title="unseen one", category="news")
    message(title="read one", seen_at=now, read_at=now)
    message(title="archived one", seen_at=now, read_at=now, archived_at=now)
    message(recipient="user:2", title="someone else's")
    url = "/admin/notifications/inboxmessage/"

    page = admin_client.get(url, {"q": "user:1"}).content.decode()
    assert "unseen one" in page and "read one" in page and "someone else" not in page
    page = admin_client.get(url, {"state": "read"}).content.decode()
    assert "read one" in page and "unseen one" not in page and "archived one" not in page
    page = admin_client.get(url, {"state": "archived"}).content.decode()
    assert "archived one" in page and "read one</" not in page
    page = admin_client.get(url, {"category": "news"}).content.decode()
    assert "unseen one" in page and "read one" not in page


def test_the_admin_changes_nothing(admin_client):
    found = message()
    assert admin_client.get("/admin/notifications/inboxmessage/add/").status_code == 403
    response = admin_client.post(f"/admin/notifications/inboxmessage/{found.pk}/change/", {"title": "changed"})
    assert response.status_code == 403
    assert admin_client.get(f"/admin/notifications/inboxmessage/{found.pk}/delete/").status_code == 403
    found.refresh_from_db()
    assert found.title == "Hello"
