"""Recipients: categories, preferences, and what the tick skips because of them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from notifications.api import preferences, run_tick, schedule, set_preference
from notifications.models import DeliveryAttempt, Notification, Preference, TickRun

CATEGORIES = {
    "billing": {"label": "Invoices", "default": "required"},
    "news": {"label": "Product news", "default": "on", "throttle": "3/d"},
    "tips": {"label": "Tips", "default": "off"},
}
NOW = timezone.now().replace(microsecond=0)
pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("categories"),
]


@pytest.fixture
def categories():
    with override_settings(NOTIFICATIONS_CATEGORIES=CATEGORIES, NOTIFICATIONS_PUBLIC_URL="https://example.com"):
        yield


def email(**fields):
    fields.setdefault("fire_at", NOW)
    return schedule(channels=["email"], email_to="ada@example.com", subject="Hi", body="Hello", **fields)


def outcomes(row):
    return list(DeliveryAttempt.objects.filter(notification_id=row.pk).values_list("channel", "outcome"))


# --- fields and validation -----------------------------------------------------------------------


def test_schedule_takes_recipient_and_category():
    row = email(recipient="user:42", category="news")
    row.refresh_from_db()
    assert (row.recipient, row.category) == ("user:42", "news")


def test_an_unknown_category_is_a_validation_error_on_category():
    with pytest.raises(ValidationError) as caught:
        email(category="nope")
    assert "category" in caught.value.message_dict


def test_a_recipient_longer_than_200_characters_is_refused():
    with pytest.raises(ValidationError) as caught:
        email(recipient="u" * 201)
    assert "recipient" in caught.value.message_dict


# --- preferences -------------------------------------------------------------------------------


def test_preferences_are_the_defaults_for_every_category_and_channel():
    assert preferences("user:1") == {
        "billing": {"email": True, "webhook": True, "inbox": True},
        "news": {"email": True, "webhook": True, "inbox": True},
        "tips": {"email": False, "webhook": False, "inbox": False},
    }


@override_settings(NOTIFICATIONS_CHANNELS={"sms": {"BACKEND": "x.Y"}})
def test_preferences_cover_the_sites_own_channels_and_a_channel_beats_every_channel():
    set_preference("user:1", "news", False)
    set_preference("user:1", "news", True, channel="sms")
    set_preference("user:1", "tips", True, channel="webhook")

    assert preferences("user:1")["news"] == {"email": False, "webhook": False, "inbox": False, "sms": True}
    assert preferences("user:1")["tips"] == {"email": False, "webhook": True, "inbox": False, "sms": False}
    assert preferences("user:2")["news"] == {"email": True, "webhook": True, "inbox": True, "sms": True}


def test_set_preference_saves_one_row_per_recipient_category_channel():
    set_preference("user:1", "news", False)
    set_preference("user:1", "news", True)
    assert Preference.objects.get().enabled is True


@pytest.mark.parametrize("category", ["billing", "nope"])
def test_a_required_or_unknown_category_cannot_be_set(category):
    with pytest.raises(ValidationError) as caught:
        set_preference("user:1", category, False)
    assert "category" in caught.value.message_dict
    assert not Preference.objects.exists()


# --- the tick ------------------------------------------------------------------------------------


def test_an_opted_out_channel_is_skipped_and_the_firing_settles_like_a_success():
    set_preference("user:1", "news", False, channel="email")
    row = email(recipient="user:1", category="news")

    report = run_tick(now=NOW)

    assert mail.outbox == []
    assert not Notification.objects.filter(pk=row.pk).exists()  # one-shot: settled
    assert outcomes(row) == [("email", "skipped")]
    assert report.counts()["skipped"] == 1
    assert report.counts()["succeeded"] == 0
    assert "skipped=1" in report.summary()
    assert TickRun.objects.get().skipped == 1


def test_a_recurring_skipped_row_moves_on_without_spending_a_retry():
    set_preference("user:1", "news", False)
    row = email(recipient="user:1", category="news", recurrence_rule="0 9 * * *")
    Notification.objects.filter(pk=row.pk).update(next_fire_at=NOW)

    run_tick(now=NOW)

    row.refresh_from_db()
    assert row.next_fire_at > NOW
    assert (row.error_count, row.last_error, row.dead_lettered_at) == (0, None, None)


def test_a_skipped_channel_beside_one_that_succeeded_is_no_failure(webhook_server):
    set_preference("user:1", "news", False, channel="email")
    with override_settings(NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS=["127.0.0.0/8"]):
        row = schedule(
            channels=["email", "webhook"],
            email_to="ada@example.com",
            subject="Hi",
            body="Hello",
            webhook_url=webhook_server.url(),
            recipient="user:1",
            category="news",
            fire_at=NOW,
        )
        report = run_tick(now=NOW)

    assert mail.outbox == []
    assert len(webhook_server.received) == 1
    assert report.counts()["succeeded"] == 1 and report.counts()["partial"] == 0
    assert sorted(outcomes(row)) == [("email", "skipped"), ("webhook", "ok")]
    assert not Notification.objects.filter(pk=row.pk).exists()


def test_off_by_default_is_sent_only_where_turned_on():
    set_preference("user:2", "tips", True)
    off = email(recipient="user:1", category="tips")
    on = email(recipient="user:2", category="tips", email_cc=["bob@example.com"])

    run_tick(now=NOW)

    assert outcomes(off) == [("email", "skipped")]
    assert outcomes(on) == [("email", "ok")]
    assert [m.to for m in mail.outbox] == [["ada@example.com"]]


def test_required_and_uncategorised_rows_are_never_skipped():
    set_preference("user:1", "news", False)
    Preference.objects.create(recipient="user:1", category="billing", enabled=False)  # by hand: still sent
    email(recipient="user:1", category="billing")
    email(recipient="user:1")

    report = run_tick(now=NOW)

    assert len(mail.outbox) == 2
    assert report.counts()["succeeded"] == 2


def test_an_opted_out_address_is_left_out_of_a_shared_message():
    set_preference("bob@example.com", "news", False)
    email(category="news", email_cc=["Bob <Bob@Example.com>", "cy@example.com"])

    run_tick(now=NOW)

    (sent,) = mail.outbox
    assert sent.to == ["ada@example.com"]
    assert sent.cc == ["cy@example.com"]


def test_when_every_address_opted_out_the_email_channel_is_skipped():
    set_preference("ada@example.com", "news", False)
    row = email(category="news")

    report = run_tick(now=NOW)

    assert mail.outbox == []
    assert outcomes(row) == [("email", "skipped")]
    assert report.counts()["skipped"] == 1


def test_runtick_prints_skipped(capsys):
    set_preference("user:1", "news", False)
    email(recipient="user:1", category="news")

    call_command("runtick")

    assert "skipped=1" in capsys.readouterr().out


# --- statements per batch ------------------------------------------------------------------------

ROWS = 50


def tick_statements(**fields) -> int:
    due = timezone.now() - timedelta(minutes=1)
    Notification.objects.bulk_create(
        Notification(
            channels=["email"],
            email_to=f"u{i}@example.com",
            subject="Hi",
            body="Hello",
            timezone="UTC",
            next_fire_at=due,
            **{k: (v.format(i=i) if isinstance(v, str) else v) for k, v in fields.items()},
        )
        for i in range(ROWS)
    )
    with CaptureQueriesContext(connection) as queries:
        report = run_tick(limit=100)
    assert report.claimed == ROWS
    return len(queries.captured_queries)


@pytest.mark.django_db(transaction=True)
def test_preferences_cost_one_query_per_batch_not_one_per_row():
    """Categories without a throttle add one SELECT of the batch's preferences (and one
    upsert of the skipped tallies when something was skipped)."""
    plain = tick_statements()
    Notification.objects.all().delete()
    for i in range(0, ROWS, 2):
        set_preference(f"user:{i}", "tips", True)
    categorised = tick_statements(recipient="user:{i}", category="tips")

    assert categorised - plain == 2, (plain, categorised)  # the SELECT, the skipped tally
    print(f"statements per row: {plain / ROWS:.2f} without categories, {categorised / ROWS:.2f} with")


# --- throttles -----------------------------------------------------------------------------------


def test_a_throttle_lets_n_firings_per_window_reach_a_recipient_and_skips_the_rest():
    rows = [email(recipient="user:1", category="news") for _ in range(5)]
    other = email(recipient="user:2", category="news")

    report = run_tick(now=NOW)

    assert len(mail.outbox) == 4  # three to user:1, one to user:2
    assert [outcomes(r) for r in rows].count([("email", "throttled")]) == 2
    assert outcomes(other) == [("email", "ok")]
    assert report.counts()["skipped"] == 2
    assert not Notification.objects.exists()  # throttled one-shots are settled, not retried


def test_a_throttle_is_shared_by_ticks_and_opens_a_new_window_after_its_period():
    for _ in range(2):
        email(recipient="user:1", category="news")
    run_tick(now=NOW)
    for _ in range(2):
        email(recipient="user:1", category="news")
    later = run_tick(now=NOW + timedelta(hours=23))
    assert len(mail.outbox) == 3
    assert later.counts()["skipped"] == 1

    email(recipient="user:1", category="news", fire_at=NOW + timedelta(days=1))
    run_tick(now=NOW + timedelta(days=1))
    assert len(mail.outbox) == 4


def test_a_throttle_keys_rows_without_a_recipient_by_address():
    for _ in range(4):
        email(category="news")
    run_tick(now=NOW)
    assert len(mail.outbox) == 3


def test_a_throttled_firing_reported_by_the_metrics_by_category():
    from notifications.models import Tally

    set_preference("user:9", "news", False)
    email(recipient="user:9", category="news")
    for _ in range(4):
        email(recipient="user:1", category="news")
    run_tick(now=NOW)

    counts = dict(Tally.objects.filter(kind="skipped").values_list("outcome", "count"))
    assert counts == {"skipped": 1, "throttled": 1}
    assert set(Tally.objects.filter(kind="skipped").values_list("target", flat=True)) == {"news"}


def test_the_metrics_count_skipped_firings_by_category():
    from prometheus_client.parser import text_string_to_metric_families

    from notifications.metrics import exposition

    set_preference("user:9", "news", False)
    email(recipient="user:9", category="news")
    for _ in range(4):
        email(recipient="user:1", category="news")
    run_tick(now=NOW)

    samples = {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(exposition().decode())
        for s in family.samples
        if s.name == "notifications_skipped_firings_total"
    }
    assert samples == {
        (("category", "news"), ("reason", "skipped")): 1,
        (("category", "news"), ("reason", "throttled")): 1,
    }


@pytest.mark.django_db(transaction=True)
def test_a_throttle_is_shared_by_ticks_taking_at_once():
    """Eight takers at once (threads, each its own connection) grant five in all."""
    import threading

    from notifications.flow import throttle
    from notifications.rules.categories import Throttle

    start = threading.Barrier(8)
    granted: list[int] = []

    def take():
        try:
            start.wait(30)
            granted.append(throttle.take("news", "user:1", Throttle(5, 86400), 1, NOW.timestamp()))
        finally:
            connection.close()

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    assert sorted(granted) == [0, 0, 0, 1, 1, 1, 1, 1]


def test_windows_over_for_every_throttle_are_pruned(monkeypatch):
    from notifications.flow import throttle
    from notifications.models import ThrottleWindow

    monkeypatch.setitem(throttle._pruned, "at", float("-inf"))
    ThrottleWindow.objects.create(key="news user:old", window_start=NOW.timestamp() - 2 * 86400, count=3)
    email(recipient="user:1", category="news")

    run_tick(now=NOW)

    assert list(ThrottleWindow.objects.values_list("key", flat=True)) == ["news user:1"]


def test_a_skipped_row_whose_schedule_cannot_advance_costs_only_itself(monkeypatch):
    set_preference("user:1", "news", False)
    poison = email(recipient="user:1", category="news", recurrence_rule="0 9 * * *")
    Notification.objects.filter(pk=poison.pk).update(next_fire_at=NOW)
    fine = email(recipient="user:2", category="news")

    def broken(self, now):
        raise RuntimeError("no next occurrence")

    monkeypatch.setattr(Notification, "next_occurrence", broken)
    report = run_tick(now=NOW)

    poison.refresh_from_db()
    assert poison.last_error.startswith("internal: RuntimeError")
    assert report.counts()["retried"] == 1
    assert outcomes(fine) == [("email", "ok")]


@override_settings(NOTIFICATIONS_RATE_LIMITS={"email": "1/h"})
def test_a_firing_a_rate_limit_defers_counts_against_the_throttle_once_when_it_goes():
    """Three firings of a "3/d" category, one per hour by the rate limit: all three reach
    the recipient; the two deferred are not counted again when they come back."""
    for _ in range(3):
        email(recipient="user:1", category="news")
    for tick in range(3):
        run_tick(now=NOW + timedelta(minutes=61 * tick))  # each time a token has come
    assert len(mail.outbox) == 3
    assert not DeliveryAttempt.objects.filter(outcome="throttled").exists()
    assert not Notification.objects.exists()


def test_a_firing_retried_after_a_failure_counts_against_the_throttle_once():
    """Three firings of a "3/d" category fail once and are retried: the retries are the same
    firings, already counted, so all three reach the recipient (none is throttled away)."""
    from notifications.testing import capture_notifications

    with capture_notifications() as captured:
        for n in range(3):
            schedule(
                channels=["webhook"],
                webhook_url="https://hooks.example.com/in",
                recipient="user:1",
                category="news",
                payload={"n": n},
                fire_at=NOW,
            )
        captured.respond(503)
        assert run_tick(now=NOW).counts()["retried"] == 3
        captured.clear()
        captured.respond(200)
        run_tick(now=NOW + timedelta(hours=1))
        assert sorted(w.json["payload"]["n"] for w in captured.webhooks) == [0, 1, 2]
    assert not DeliveryAttempt.objects.filter(outcome="throttled").exists()
    assert not Notification.objects.exists()


@pytest.mark.django_db(transaction=True)
@override_settings(
    NOTIFICATIONS_CHANNELS={"sms": {"BACKEND": "tests.support.site_channels.HangingChannel"}},
    NOTIFICATIONS_CONCURRENCY=1,
)
def test_firings_a_stopping_tick_hands_back_count_against_the_throttle_when_they_go(monkeypatch):
    """Three firings of a "3/d" category; the tick is told to stop while the first is being
    sent, so the other two go back unsent: they count when a later tick sends them, and all
    three reach the recipient."""
    import threading

    from django.db import connection as db

    from notifications import outcomes as outcomes_module
    from tests.support import site_channels

    site_channels.RELEASE.clear()
    site_channels.STARTED.clear()
    site_channels.SENT.clear()
    for _ in range(3):
        schedule(
            channels=["sms"],
            channel_data={"sms": {"to": "+15551234567"}},
            recipient="user:1",
            category="news",
            fire_at=NOW,
        )
    stop = threading.Event()
    reports = []
    handed_back = threading.Semaphore(0)
    release = outcomes_module.release

    def releasing(row, now):  # tells the test when the tick has handed a waiting row back
        try:
            return release(row, now)
        finally:
            handed_back.release()

    monkeypatch.setattr(outcomes_module, "release", releasing)

    def ticking():
        try:
            reports.append(run_tick(now=NOW, stop=stop))
        finally:
            db.close()  # this thread's own connection

    tick = threading.Thread(target=ticking)
    tick.start()
    try:
        assert site_channels.STARTED.wait(30)  # the first is being sent, the other two wait
        stop.set()
        assert handed_back.acquire(timeout=30) and handed_back.acquire(timeout=30)
    finally:
        site_channels.RELEASE.set()
        tick.join(60)
    assert reports and reports[0].counts()["succeeded"] == 1 and reports[0].counts()["released"] == 2

    assert run_tick(now=NOW + timedelta(minutes=1)).counts()["succeeded"] == 2
    assert len(site_channels.SENT) == 3
    assert not DeliveryAttempt.objects.filter(outcome="throttled").exists()
