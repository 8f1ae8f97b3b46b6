"""Erasing one person out of a row they share with others (issue 40, item 3): the others
still get it, without a trace of the person; a row sent to nobody else goes whole; a firing
in flight writes nothing of them back; the dry run names the counts the run names."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from notifications.api import erase, run_tick, schedule, set_preference
from notifications.models import DeliveryAttempt, Notification, Suppression, ThrottleWindow, attachments
from notifications.models.attachments import Attachment
from tests.support.servers import HeldTick

pytestmark = pytest.mark.django_db
NOW = timezone.now().replace(microsecond=0)
# Ada's one mailbox, spelt as people type it: case, a display name, her domain in Unicode and in punycode.
ADA = "ada@exämple.com"
ADA_SPELLINGS = ("Ada Lovelace <ADA@EXÄMPLE.com>", "ada@xn--exmple-cua.com", "Ada <Ada@Exämple.com>")
# None of these may be left where the others' mail is. Not a bare "ada@": the Message-ID
# is "<notification-N.<firing uuid>@host>", and a uuid may end in the hex digits "ada".
TRACES = ("ada@ex", "ada@xn--", "exämple", "exmple", "lovelace")


def email(**fields):
    fields.setdefault("fire_at", NOW)
    return schedule(channels=["email"], subject="Hi", body="Hello", **fields)


def counts_of(line: str) -> list[tuple[str, int]]:
    """`would erase: notifications=1 ...` as (name, number) pairs, in order."""
    _, _, pairs = line.partition(": ")
    return [(name, int(number)) for name, number in (pair.split("=") for pair in pairs.split())]


def test_a_shared_row_keeps_going_to_the_others_without_a_trace_of_the_person(mailoutbox):
    shared = email(
        email_to=[ADA_SPELLINGS[0], "bob@example.com"],
        email_cc=[ADA_SPELLINGS[1], "cy@example.com"],
        reply_to=[ADA_SPELLINGS[2]],
        headers={"X-Requested-By": ADA, "X-Campaign": "spring"},
    )

    counts = erase(address="ADA@Exämple.com")

    row = Notification.objects.get(pk=shared.pk)
    row.full_clean()  # still a valid row
    assert (row.email_to, row.email_cc, row.reply_to) == (["bob@example.com"], ["cy@example.com"], [])
    assert row.headers == {"X-Campaign": "spring"}
    assert (counts["notifications"], counts["notifications_changed"]) == (0, 1)

    report = run_tick()

    assert report.counts()["succeeded"] == 1
    (message,) = mailoutbox
    assert (message.to, message.cc, message.bcc, message.reply_to) == (["bob@example.com"], ["cy@example.com"], [], [])
    sent = message.message().as_string()
    found = [trace for trace in TRACES if trace in sent.lower()]
    assert not found, f"{found} in the message sent:\n{sent}"
    (record,) = DeliveryAttempt.objects.all()
    assert record.sent_to == "bob@example.com, cy@example.com"


def test_a_row_sent_to_the_person_alone_goes_whole_with_its_attachments(django_capture_on_commit_callbacks, mailoutbox):
    alone = email(
        email_to=ADA_SPELLINGS[0],
        email_cc=[ADA_SPELLINGS[1]],
        attachments=[Attachment("a.txt", b"hers", "text/plain")],
    )
    (item,) = attachments.stored(alone.attachments)
    copied = email(email_to=[ADA_SPELLINGS[2]], email_bcc=["bob@example.com"])  # only a blind copy is left

    with django_capture_on_commit_callbacks(execute=True):
        counts = erase(address=ADA)

    assert not Notification.objects.filter(pk=alone.pk).exists()
    assert not attachments.storage().exists(item["file"])
    # To empty, Bcc left: sent as it is, the blind copy still blind (nobody moved into To).
    left = Notification.objects.get(pk=copied.pk)
    left.full_clean()
    assert (left.email_to, left.email_bcc) == ([], ["bob@example.com"])
    assert (counts["notifications"], counts["notifications_changed"]) == (1, 1)
    run_tick()
    (message,) = mailoutbox
    assert (message.to, message.bcc) == ([], ["bob@example.com"])


def test_an_error_and_a_greylisted_firing_that_name_the_person_no_longer_do():
    """A retrying firing that still owes Ada and Bob (the server deferred them), its error
    naming her: it owes Bob alone, and the error no longer names her."""
    row = email(email_to=[ADA_SPELLINGS[1], "bob@example.com", "cy@example.com"])
    row.owe_recipients([ADA, "bob@example.com"])
    row.last_error = "email: deferred <ADA@xn--exmple-cua.com>, bob@example.com: 451 try later"
    Notification.objects.filter(pk=row.pk).update(pending_recipients=row.pending_recipients, last_error=row.last_error)

    erase(address=ADA)

    row.refresh_from_db()
    assert row.owed_recipients == {"bob@example.com"}
    assert row.last_error == "email: deferred <<erased>>, bob@example.com: 451 try later"


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS=["127.0.0.0/8"], NOTIFICATIONS_CHANNEL_TIMEOUT=30)
def test_a_shared_row_in_flight_is_taken_back_then_sent_to_the_others(webhook_server, mailoutbox):
    """The tick sends the row (its webhook held by the receiver) while Ada is erased: the
    firing's write-back writes nothing over the changed row and records nothing (the record
    would name her); once the firing's lease is over, the row goes to Bob alone."""
    row = schedule(
        channels=["email", "webhook"],
        email_to=[ADA, "bob@example.com"],
        subject="Hi",
        body="Hello",
        webhook_url=webhook_server.url("/old"),
        fire_at=NOW,
    )
    tick = HeldTick(webhook_server, 200)  # claimed; its email went, its webhook waits

    try:
        counts = erase(address=ADA)
    finally:
        tick.finish()

    left = Notification.objects.get(pk=row.pk)  # not deleted by the firing's success
    assert counts["notifications_changed"] == 1
    assert left.email_to == ["bob@example.com"]
    assert left.last_fired_at is None and left.next_fire_at == row.next_fire_at  # nothing written back
    assert not DeliveryAttempt.objects.filter(notification_id=row.pk).exists()
    assert not any(ADA in a.sent_to for a in DeliveryAttempt.objects.all())
    assert left.claim_token is None and left.claimed_until is not None  # no tick takes it before the lease ends
    mailoutbox.clear()  # the send taken back went out before the erasure
    Notification.objects.filter(pk=row.pk).update(claimed_until=timezone.now() - timezone.timedelta(seconds=1))

    run_tick()  # the lease is over: the row goes to Bob alone

    (message,) = mailoutbox
    assert message.to == ["bob@example.com"]
    assert not Notification.objects.filter(pk=row.pk).exists()
    assert {a.sent_to for a in DeliveryAttempt.objects.filter(channel="email")} == {"bob@example.com"}


def test_the_dry_run_names_the_counts_of_the_run_with_the_same_numbers():
    with override_settings(
        NOTIFICATIONS_CATEGORIES={"news": {"label": "News", "default": "on", "throttle": "3/d"}},
        NOTIFICATIONS_PUBLIC_URL="https://example.com",
    ):
        email(recipient="user:1", email_to=ADA, category="news")
        email(email_to=ADA, fire_at=NOW + timezone.timedelta(days=1))  # sent to her alone
        email(email_to=[ADA, "bob@example.com"], fire_at=NOW + timezone.timedelta(days=1))  # shared
        run_tick()  # user:1's row is sent: a delivery record, a throttle window
        email(recipient="user:1", email_to=ADA, category="news", fire_at=NOW + timezone.timedelta(days=1))
        set_preference("user:1", "news", False)
        Suppression.objects.create(address="ada@xn--exmple-cua.com", reason="550")
    assert ThrottleWindow.objects.exists() and DeliveryAttempt.objects.exists()
    args = ["notifications_erase", "--recipient", "user:1", "--address", ADA, "--drop-suppression"]
    dry, run = StringIO(), StringIO()

    call_command(*args, "--dry-run", stdout=dry)
    call_command(*args, stdout=run)

    (dry_line,), (run_line,) = dry.getvalue().splitlines(), run.getvalue().splitlines()
    assert dry_line.startswith("would erase: ") and run_line.startswith("erased: ")
    assert (
        counts_of(dry_line)
        == counts_of(run_line)
        == [
            ("notifications", 2),
            ("notifications_changed", 1),
            ("delivery_attempts", 1),
            ("preferences", 1),
            ("inbox_messages", 0),
            ("throttles", 1),
            ("suppressions", 1),
            ("admin_history", 0),
        ]
    )


def test_the_admin_shows_the_shared_rows_that_change_and_keeps_them_for_the_others(admin_client):
    row = email(email_to=[ADA_SPELLINGS[0], "bob@example.com"])
    url = reverse("admin:notifications_notification_changelist")
    data = {"action": "erase_recipients", "_selected_action": [row.pk]}

    page = admin_client.post(url, data)

    assert page.status_code == 200
    changed = page.context["people"][0]["counts"]
    assert (changed["notifications"], changed["notifications_changed"]) == (0, 1)
    assert "shared notifications changed" in page.content.decode()
    done = admin_client.post(url, {**data, "post": "yes"}, follow=True)
    assert "Erased 1 person: 1 notifications changed." in done.content.decode()
    assert Notification.objects.get(pk=row.pk).email_to == ["bob@example.com"]


def test_the_record_of_a_delivered_mail_to_her_unicode_domain_goes_with_the_punycode_key(mailoutbox):
    """Issue 45 #10: the erase key is punycode, the delivery record names the domain as typed."""
    email(email_to=["Ada <ada@exämple.com>"])
    email(email_to=["bob@example.com"])
    run_tick()  # delivered and deleted: the records are what is left of her
    assert len(mailoutbox) == 2 and not Notification.objects.exists()
    assert DeliveryAttempt.objects.filter(sent_to__contains="exämple").exists()

    counts = erase(address="ADA@xn--exmple-cua.com")

    assert counts["delivery_attempts"] == 1
    assert [a.sent_to for a in DeliveryAttempt.objects.all()] == ["bob@example.com"]
