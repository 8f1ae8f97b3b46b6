"""Escalation (SPEC v5 "Escalation"): the row fields `escalate_after`, `escalate_to` and
`escalate_unless`, validated on every path that saves a row."""

from __future__ import annotations

import io
import json
import re
import threading
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import connection as db_connection
from django.test import override_settings
from django.utils import timezone

from notifications import inbox
from notifications.api import run_tick, schedule, set_preference
from notifications.channels import ChannelResult, ErrorClass
from notifications.channels.inbox.channel import InboxChannel
from notifications.models import DeliveryAttempt, InboxMessage, Notification
from notifications.models.states import State
from notifications.store import claims
from notifications.testing import capture_notifications

URL = "https://hooks.example.com/escalate"

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


# --- the escalation through real ticks --------------------------------------------------------

AFTER = 3600


@pytest.fixture
def clock(time_machine):
    """The time the rows are saved and the first tick runs; tests move it on."""
    time_machine.move_to(timezone.now().replace(microsecond=0), tick=False)
    return time_machine


def tick_at(clock, at):
    clock.move_to(at, tick=False)
    return run_tick()


def log_of(row):
    return list(DeliveryAttempt.objects.filter(notification_id=row.pk).order_by("attempted_at", "id"))


def test_an_unread_message_escalates_once_at_the_deadline(clock, mailoutbox):
    t0 = timezone.now()
    row = escalating()
    tick_at(clock, t0)
    (message,) = InboxMessage.objects.all()
    assert not mailoutbox
    waiting = Notification.objects.get(pk=row.pk)
    assert waiting.state(t0) == State.ESCALATION
    assert waiting.next_fire_at == t0 + timedelta(seconds=AFTER)
    assert waiting.firing_id != message.firing_id  # the escalation is a firing of its own
    tick_at(clock, t0 + timedelta(seconds=AFTER - 1))
    assert not mailoutbox
    tick_at(clock, t0 + timedelta(seconds=AFTER))
    assert [m.to for m in mailoutbox] == [["ada@example.com"]]
    assert not Notification.objects.filter(pk=row.pk).exists()
    tick_at(clock, t0 + timedelta(seconds=2 * AFTER))
    assert len(mailoutbox) == 1 and InboxMessage.objects.count() == 1
    assert [(a.channel, a.outcome) for a in log_of(row)] == [("inbox", "ok"), ("email", "ok")]


@pytest.mark.parametrize(
    ("unless", "state"), [("read", "read"), ("read", "archived"), ("seen", "seen"), ("seen", "read")]
)
def test_a_message_marked_in_time_cancels_the_escalation(clock, mailoutbox, unless, state):
    t0 = timezone.now()
    row = escalating(escalate_unless=unless)
    tick_at(clock, t0)
    (message,) = InboxMessage.objects.all()
    clock.move_to(t0 + timedelta(seconds=AFTER - 1), tick=False)
    assert inbox.mark("user:7", [message.pk], state) == 1
    tick_at(clock, t0 + timedelta(seconds=AFTER))
    tick_at(clock, t0 + timedelta(seconds=2 * AFTER))
    assert not mailoutbox
    assert not Notification.objects.filter(pk=row.pk).exists()
    assert [(a.channel, a.outcome, a.summary) for a in log_of(row)][1:] == [
        ("email", "cancelled", f"cancelled: {unless}")
    ]


def test_a_seen_message_does_not_cancel_an_escalation_unless_read(clock, mailoutbox):
    t0 = timezone.now()
    escalating()
    tick_at(clock, t0)
    inbox.mark("user:7", "all", "seen")
    tick_at(clock, t0 + timedelta(seconds=AFTER))
    assert len(mailoutbox) == 1


@override_settings(NOTIFICATIONS_CATEGORIES={"news": {"label": "News"}}, NOTIFICATIONS_PUBLIC_URL="https://example.com")
def test_the_inbox_skipped_by_a_preference_escalates_at_the_deadline(clock, mailoutbox):
    set_preference("user:7", "news", False, channel="inbox")
    t0 = timezone.now()
    row = escalating(category="news")
    tick_at(clock, t0)
    assert not InboxMessage.objects.exists() and not mailoutbox
    assert Notification.objects.get(pk=row.pk).next_fire_at == t0 + timedelta(seconds=AFTER)
    tick_at(clock, t0 + timedelta(seconds=AFTER))
    assert len(mailoutbox) == 1
    assert not Notification.objects.filter(pk=row.pk).exists()


def test_the_escalation_channel_retries_and_dead_letters_on_its_own(clock):
    t0 = timezone.now()
    row = escalating(escalate_to=["webhook"], webhook_url=URL, max_retries=2, backoff=[60])
    with capture_notifications() as captured:
        captured.respond(503)
        captured.tick(now=t0)
        assert InboxMessage.objects.count() == 1 and not captured.webhooks
        deadline = t0 + timedelta(seconds=AFTER)
        clock.move_to(deadline, tick=False)
        assert captured.tick(now=deadline).counts()["retried"] == 1
        waiting = Notification.objects.get(pk=row.pk)
        assert waiting.next_fire_at == deadline + timedelta(seconds=60) and waiting.error_count == 1
        clock.move_to(deadline + timedelta(seconds=60), tick=False)
        assert captured.tick(now=deadline + timedelta(seconds=60)).counts()["dead_lettered"] == 1
        assert len(captured.webhooks) == 2
        assert len({w.headers["webhook-id"] for w in captured.webhooks}) == 1  # one firing, retried
    dead = Notification.objects.get(pk=row.pk)
    assert dead.state(deadline + timedelta(seconds=61)) == State.DEAD
    assert InboxMessage.objects.count() == 1  # the inbox is not sent again


def test_a_dead_lettered_inbox_firing_escalates_at_the_deadline(clock, mailoutbox, monkeypatch):
    def refuse(self, firing):
        return ChannelResult(self.name, "inbox: refused", ErrorClass.PERMANENT)

    monkeypatch.setattr(InboxChannel, "deliver", refuse)
    t0 = timezone.now()
    row = escalating()
    assert run_tick().counts()["dead_lettered"] == 1
    assert not InboxMessage.objects.exists() and not mailoutbox
    assert Notification.objects.get(pk=row.pk).state(t0) == State.ESCALATION
    tick_at(clock, t0 + timedelta(seconds=AFTER))
    assert len(mailoutbox) == 1
    assert not Notification.objects.filter(pk=row.pk).exists()


def test_an_invalid_row_is_dead_lettered_without_escalating(clock, mailoutbox):
    t0 = timezone.now()
    row = escalating()
    Notification.objects.filter(pk=row.pk).update(escalate_to=["nowhere"])  # around validation
    tick_at(clock, t0)
    tick_at(clock, t0 + timedelta(seconds=AFTER))
    assert not mailoutbox
    assert Notification.objects.get(pk=row.pk).state(t0 + timedelta(seconds=AFTER)) == State.DEAD


def test_a_digest_row_cannot_escalate():
    assert refused_on(digest_key="orders", digest_window=60) == ["escalate_after"]


def test_an_escalation_to_email_needs_an_address():
    assert refused_on(email_to=[]) == ["email_to"]


# --- the admin and the status -----------------------------------------------------------------


def test_the_admin_lists_a_waiting_escalation_with_its_deadline(clock, admin_client):
    t0 = timezone.now()
    row = escalating()
    other = escalating(key="not-yet", fire_at=t0 + timedelta(days=1))
    tick_at(clock, t0)
    html = admin_client.get("/admin/notifications/notification/", {"state": "escalation"}).content.decode()
    assert f'value="{row.pk}"' in html and f'value="{other.pk}"' not in html
    deadline = (t0 + timedelta(seconds=AFTER)).isoformat()
    assert re.search(rf'escalates</span> <time class="nq-moment" datetime="{re.escape(deadline)}"[^>]*>in 1 h<', html)
    assert 'href="?state=escalation"' in admin_client.get("/admin/notifications/notification/").content.decode()


def test_notifications_status_counts_escalations(clock):
    t0 = timezone.now()
    escalating()
    tick_at(clock, t0)
    out = io.StringIO()
    call_command("notifications_status", "--json", stdout=out)
    assert json.loads(out.getvalue())["counts"]["escalation"] == 1


# --- marks racing the claim -------------------------------------------------------------------

RACING = 12


def mark_in_another_connection(pks):
    """Mark the messages of rows `pks` read in a thread of its own (its own connection),
    committed when it returns."""

    def work():
        try:
            for message in InboxMessage.objects.filter(notification_id__in=pks):
                inbox.mark(message.recipient, [message.pk], "read")
        finally:
            db_connection.close()

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()


@pytest.mark.django_db(transaction=True)
def test_marks_committed_before_the_claim_win_and_marks_after_it_do_not(clock, mailoutbox, monkeypatch):
    t0 = timezone.now()
    rows = [escalating(recipient=f"user:{n}", email_to=f"u{n}@example.com").pk for n in range(RACING)]
    tick_at(clock, t0)
    assert InboxMessage.objects.count() == RACING
    early, at_claim, late = rows[:4], rows[4:8], rows[8:]
    mark_in_another_connection(early)  # read well before the deadline
    real_mark = claims.mark

    def racing_mark(*args, **kwargs):
        # Past the cancelled rows' settling, just before the claim: a mark committed now wins.
        mark_in_another_connection(at_claim)
        claimed = real_mark(*args, **kwargs)
        mark_in_another_connection(late)  # committed just after the claim: too late
        return claimed

    monkeypatch.setattr(claims, "mark", racing_mark)
    tick_at(clock, t0 + timedelta(seconds=AFTER))
    monkeypatch.setattr(claims, "mark", real_mark)
    tick_at(clock, t0 + timedelta(seconds=AFTER + 60))

    escalated = sorted(address for message in mailoutbox for address in message.to)
    assert escalated == sorted(f"u{rows.index(pk)}@example.com" for pk in late)  # each once
    assert not Notification.objects.filter(pk__in=rows).exists()
    cancelled = DeliveryAttempt.objects.filter(outcome="cancelled", summary="cancelled: read")
    assert sorted(cancelled.values_list("notification_id", flat=True)) == sorted(early + at_claim)
    read_in_time = set(
        InboxMessage.objects.filter(notification_id__in=early + at_claim, read_at__isnull=False).values_list(
            "notification_id", flat=True
        )
    )
    sent = set(DeliveryAttempt.objects.filter(channel="email", outcome="ok").values_list("notification_id", flat=True))
    assert read_in_time == set(early + at_claim) and not read_in_time & sent
