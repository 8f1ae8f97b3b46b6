"""Erasure: `erase()`, `manage.py notifications_erase`, the admin's action; a firing in
flight writes nothing back afterwards; the suppression list keeps the address."""

from __future__ import annotations

import threading
from io import StringIO

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from notifications.api import erase, run_tick, schedule, set_preference
from notifications.models import (
    DeliveryAttempt,
    Notification,
    Preference,
    Suppression,
    SuppressionLift,
    ThrottleWindow,
    attachments,
)
from notifications.models.attachments import Attachment

CATEGORIES = {"news": {"label": "Product news", "default": "on", "throttle": "3/d"}}
NOW = timezone.now().replace(microsecond=0)


def tick_in_background(reports: list) -> threading.Thread:
    """A tick at NOW on a thread of its own (its report appended to `reports`), started."""

    def ticking():
        try:
            reports.append(run_tick(now=NOW))
        finally:
            connection.close()  # this thread's own connection

    tick = threading.Thread(target=ticking)
    tick.start()
    return tick


pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("categories")]


@pytest.fixture
def categories():
    with override_settings(NOTIFICATIONS_CATEGORIES=CATEGORIES, NOTIFICATIONS_PUBLIC_URL="https://example.com"):
        yield


def email(**fields):
    fields.setdefault("email_to", "ada@example.com")
    fields.setdefault("fire_at", NOW)
    return schedule(channels=["email"], subject="Hi", body="Hello", **fields)


def test_erase_deletes_rows_attachments_history_and_preferences_and_returns_counts(
    django_capture_on_commit_callbacks,
):
    later = NOW + timezone.timedelta(days=1)
    attached = email(recipient="user:1", fire_at=later, attachments=[Attachment("a.txt", b"secret", "text/plain")])
    by_address = email(email_cc=["Ada <ADA@example.com>"], email_to="bob@example.com", fire_at=later)
    other = email(recipient="user:2", email_to="cy@example.com", fire_at=later)
    sent = email(recipient="user:1", category="news", recurrence_rule="0 9 * * *")
    Notification.objects.filter(pk=sent.pk).update(next_fire_at=NOW)
    run_tick(now=NOW)  # the recurring row fires: its history is the person's too
    set_preference("user:1", "news", False)
    set_preference("ada@example.com", "news", False)
    set_preference("user:2", "news", False)
    (item,) = attachments.stored(attached.attachments)
    storage = attachments.storage()
    assert storage.exists(item["file"])

    with django_capture_on_commit_callbacks(execute=True):
        counts = erase(recipient="user:1", address="ada@example.com")

    assert counts["notifications"] == 2  # user:1's two rows
    assert counts["notifications_changed"] == 1  # the one copying ada keeps going to bob
    assert counts["delivery_attempts"] == 1  # the recurring row's
    assert counts["preferences"] == 2
    assert set(Notification.objects.values_list("pk", flat=True)) == {other.pk, by_address.pk}
    assert Notification.objects.get(pk=by_address.pk).email_cc == []
    assert list(Preference.objects.values_list("recipient", flat=True)) == ["user:2"]
    assert not DeliveryAttempt.objects.filter(notification_id=sent.pk).exists()
    assert not ThrottleWindow.objects.filter(key__endswith=" user:1").exists()
    assert not storage.exists(item["file"])  # the attachment went with its row


def test_erase_by_address_finds_rows_that_send_to_it():
    row = email(email_to=["bob@example.com"], email_bcc=["Ada@Example.com"])
    alone = email(email_to="Ada <ADA@example.com>")
    keep = email(email_to="bob@example.com")

    counts = erase(address="ada@example.com")

    assert (counts["notifications"], counts["notifications_changed"]) == (1, 1)
    assert not Notification.objects.filter(pk=alone.pk).exists()
    assert Notification.objects.get(pk=row.pk).email_bcc == []  # bob still gets his
    assert Notification.objects.filter(pk=keep.pk).exists()


def test_the_suppression_list_keeps_the_address_unless_told_otherwise():
    Suppression.objects.create(address="ada@example.com", reason="550")
    erase(address="ada@example.com")
    assert Suppression.objects.filter(address="ada@example.com").exists()

    counts = erase(address="ada@example.com", keep_suppression=False)
    assert counts["suppressions"] == 1
    assert not Suppression.objects.exists()
    assert not SuppressionLift.objects.filter(address="ada@example.com").exists()


def test_nobody_named_is_a_validation_error():
    with pytest.raises(ValidationError):
        erase()
    with pytest.raises(ValidationError) as caught:
        erase(address="not an address")
    assert "address" in caught.value.message_dict


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS=["127.0.0.0/8"])
def test_a_firing_in_flight_writes_nothing_back_after_the_erase(webhook_server):
    from tests.support.servers import Reply

    row = schedule(
        channels=["webhook"], webhook_url=webhook_server.url(), recipient="user:1", recurrence_rule="0 9 * * *"
    )
    Notification.objects.filter(pk=row.pk).update(next_fire_at=NOW)
    erased = threading.Event()

    def hold(request):
        assert erased.wait(30)
        return Reply()

    webhook_server.responder = hold

    tick = tick_in_background([])
    webhook_server.wait_for(1)
    counts = erase(recipient="user:1")
    erased.set()
    tick.join(60)

    assert counts["notifications"] == 1
    assert not Notification.objects.filter(pk=row.pk).exists()  # not written back over


def test_the_command_erases_and_says_what_went():
    email(recipient="user:1")
    out = StringIO()
    call_command("notifications_erase", "--recipient", "user:1", "--dry-run", stdout=out)
    assert "would erase: notifications=1" in out.getvalue()
    assert Notification.objects.exists()

    call_command("notifications_erase", "--recipient", "user:1", stdout=out)
    assert "erased: notifications=1" in out.getvalue()
    assert not Notification.objects.exists()
    with pytest.raises(CommandError):
        call_command("notifications_erase")


# --- the admin -------------------------------------------------------------------------------------


@pytest.fixture
def staff(django_user_model):
    def make(*perms):
        user = django_user_model.objects.create_user("op", password="pw", is_staff=True)
        user.user_permissions.set(Permission.objects.filter(codename__in=perms))
        return user

    return make


def test_the_admin_erases_after_a_confirmation_naming_what_goes(client, staff):
    email(recipient="user:1")
    set_preference("user:1", "news", False)
    pref = Preference.objects.get()
    client.force_login(staff("view_preference", "delete_preference", "view_notification", "delete_notification"))
    url = reverse("admin:notifications_preference_changelist")
    data = {"action": "erase_recipients", "_selected_action": [pref.pk]}

    page = client.post(url, data)

    assert page.status_code == 200
    assert b"user:1" in page.content and b"Yes, erase them" in page.content
    assert Notification.objects.exists()  # nothing yet

    done = client.post(url, {**data, "post": "yes"}, follow=True)
    assert b"Erased 1 person" in done.content
    assert not Notification.objects.exists() and not Preference.objects.exists()


def test_view_only_staff_cannot_erase(client, staff):
    row = email(recipient="user:1")
    client.force_login(staff("view_preference", "view_notification"))
    url = reverse("admin:notifications_notification_changelist")

    listing = client.get(url)
    assert b"erase_recipients" not in listing.content
    client.post(url, {"action": "erase_recipients", "_selected_action": [row.pk], "post": "yes"})
    assert Notification.objects.filter(pk=row.pk).exists()


def test_the_admin_lists_preferences_searchable_and_rows_filter_by_category(admin_client):
    set_preference("user:1", "news", False)
    set_preference("user:2", "news", False)
    email(recipient="user:1", category="news")
    plain = email(recipient="user:3")

    found = admin_client.get(reverse("admin:notifications_preference_changelist"), {"q": "user:1"})
    assert b"user:1" in found.content and b"user:2" not in found.content
    rows = admin_client.get(reverse("admin:notifications_notification_changelist"), {"category": "news"})
    assert f"/{plain.pk}/change/".encode() not in rows.content
    change = admin_client.get(reverse("admin:notifications_notification_change", args=[plain.pk]))
    assert b'name="recipient"' in change.content and b'name="category"' in change.content


def test_erasing_a_recipient_takes_the_history_of_rows_already_delivered_and_deleted():
    """A delivered one-shot row is deleted, its delivery record stays (the sent log): erasing
    the person by their id, or by their address, takes that record too."""
    schedule(channels=["email"], email_to="ada@example.com", subject="Hi", body="b", recipient="user:7")
    schedule(channels=["email"], email_to="bob@example.com", subject="Hi", body="b")
    run_tick()
    assert not Notification.objects.exists()
    assert DeliveryAttempt.objects.filter(recipient="user:7").count() == 1

    assert erase(recipient="user:7")["delivery_attempts"] == 1
    assert erase(address="bob@example.com")["delivery_attempts"] == 1
    assert not DeliveryAttempt.objects.exists()


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_CHANNELS={"sms": {"BACKEND": "tests.support.site_channels.HangingChannel"}})
def test_a_send_in_flight_leaves_no_delivery_record_of_the_erased_person():
    """A tick claims the row and sends it (the channel blocks until released); the person
    is erased meanwhile; then the send returns and the tick writes back: nothing of the
    person is left, not even the record of that send."""
    from tests.support import site_channels

    site_channels.RELEASE.clear()
    site_channels.STARTED.clear()
    row = schedule(channels=["sms"], channel_data={"sms": {"to": "+15551234567"}}, recipient="user:1", fire_at=NOW)
    other = schedule(channels=["email"], email_to="bob@example.com", subject="Hi", body="Hello", fire_at=NOW)
    reports = []
    tick = tick_in_background(reports)
    try:
        assert site_channels.STARTED.wait(30)  # the row is claimed and being sent
        counts = erase(recipient="user:1")
    finally:
        site_channels.RELEASE.set()
        tick.join(60)

    assert counts["notifications"] == 1
    assert reports and reports[0].counts()["succeeded"] == 2
    assert not Notification.objects.filter(pk=row.pk).exists()
    assert not DeliveryAttempt.objects.filter(recipient="user:1").exists()
    assert not DeliveryAttempt.objects.filter(notification_id=row.pk).exists()
    assert DeliveryAttempt.objects.filter(notification_id=other.pk, outcome="ok").exists()  # others' records stay


@pytest.mark.django_db(transaction=True)
def test_a_550_arriving_after_the_erase_does_not_suppress_the_address_again(smtp):
    """The tick is at the mail server's RCPT for Ada when she is erased with her suppression
    entry; the server then refuses her for good: the write-back of a row that is gone
    suppresses nothing, so her address is not stored again."""
    import asyncio

    reached, erased = threading.Event(), threading.Event()

    async def refuse_after_the_erase(server, session, envelope, address, rcpt_options):
        reached.set()
        await asyncio.to_thread(erased.wait, 30)
        return "550 5.1.1 No such user here"

    smtp.controller.handler.handle_RCPT = refuse_after_the_erase
    email(email_to="ada@example.com")
    reports = []
    tick = tick_in_background(reports)
    try:
        assert reached.wait(30)
        counts = erase(address="ada@example.com", keep_suppression=False)
    finally:
        erased.set()
        tick.join(60)

    assert counts["notifications"] == 1
    assert reports and reports[0].claimed == 1
    assert not Suppression.objects.exists()
    assert not DeliveryAttempt.objects.exists()


def test_erase_reads_only_the_rows_the_index_says_name_the_address(monkeypatch):
    from notifications.services import erasure

    later = NOW + timezone.timedelta(days=1)
    for n in range(30):
        email(email_to=f"reader{n}@example.com", fire_at=later)
    shared = email(email_to="bob@example.com", email_cc=["Ada <ADA@Example.com>"], fire_at=later)
    read = []
    names_them = erasure._names_them
    monkeypatch.setattr(erasure, "_names_them", lambda values, key: read.append(values) or names_them(values, key))

    counts = erase(address="ada@example.com")

    assert counts["notifications_changed"] == 1
    assert len(read) == 1  # the index passed over the 30 others
    assert Notification.objects.get(pk=shared.pk).email_cc == []
