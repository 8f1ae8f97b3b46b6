"""Expiry: a firing past `expires_at`, or later than `max_delay` after its due time, is not sent.

A one-shot row is kept as a dead letter whose `last_error` starts `expired:`; a recurring
row skips that firing and its schedule moves on. Each expired firing is announced once
(`notification_expired`) and counted (`expired=N`, `TickRun.expired`); nothing was sent,
so no delivery attempt is logged. `max_delay` counts from when the firing first came due,
across its retries and the time flow control held it. A row in backoff whose next retry
would come too late expires instead of trying again.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.test import override_settings

from notifications import signals
from notifications.api import requeue, run_now, run_tick, schedule
from notifications.models import DeliveryAttempt, Notification, TickRun
from notifications.models.states import State
from tests.support.servers import Reply

pytestmark = pytest.mark.django_db

NOW = datetime(2025, 1, 15, 12, 2, tzinfo=UTC)
EVERY_5_MIN = "*/5 * * * *"
NEXT_SLOT = datetime(2025, 1, 15, 12, 5, tzinfo=UTC)  # the first */5 occurrence after NOW


@pytest.fixture(autouse=True)
def clock(time_machine):
    """Rows are saved before NOW; ticks run at the instants given."""
    time_machine.move_to(NOW - timedelta(days=1), tick=False)
    return time_machine


@pytest.fixture
def hook_row(webhook_server):
    def make(**fields) -> Notification:
        fields.setdefault("fire_at", NOW - timedelta(minutes=1))
        return schedule(channels=["webhook"], webhook_url=webhook_server.url(), **fields)

    return make


@pytest.fixture
def expired_heard():
    heard: list[tuple[object, int, list]] = []

    def receiver(sender, notification, results, **kwargs):
        heard.append((sender, notification.pk, [(r.channel, r.error) for r in results]))

    signals.notification_expired.connect(receiver, weak=False)
    yield heard
    signals.notification_expired.disconnect(receiver)


def reload(row: Notification) -> Notification:
    return Notification.objects.get(pk=row.pk)


def attempts(row: Notification) -> int:
    return DeliveryAttempt.objects.filter(notification_id=row.pk).count()


# --- one-shot rows: kept as dead letters -------------------------------------------------------


def test_a_one_shot_past_expires_at_is_not_sent_and_kept_as_a_dead_letter(hook_row, webhook_server, expired_heard):
    row = hook_row(fire_at=NOW - timedelta(hours=3), expires_at=NOW - timedelta(hours=2))

    report = run_tick(now=NOW)

    assert report.counts()["expired"] == 1
    assert webhook_server.received == []
    assert attempts(row) == 0  # nothing was sent
    row = reload(row)
    assert row.last_error == "expired: 2 h past expires_at"
    assert (row.dead_lettered_at, row.expired_at, row.next_fire_at) == (NOW, NOW, None)
    assert row.error_count == 0  # no retry spent
    assert row.state(NOW) == State.EXPIRED
    assert list(Notification.objects.in_state("expired", NOW)) == [row]
    assert expired_heard == [(Notification, row.pk, [])]
    assert run_tick(now=NOW + timedelta(days=1)).claimed == 0


def test_a_one_shot_later_than_max_delay_after_its_due_time_is_not_sent(hook_row, webhook_server):
    row = hook_row(fire_at=NOW - timedelta(hours=3), max_delay=3600)

    report = run_tick(now=NOW)

    assert report.counts()["expired"] == 1
    assert webhook_server.received == []
    row = reload(row)
    assert row.last_error == "expired: 3 h after its due time, max_delay 1 h"
    assert (row.dead_lettered_at, row.expired_at, row.next_fire_at) == (NOW, NOW, None)


@pytest.mark.parametrize(
    "limits",
    [{"expires_at": NOW}, {"max_delay": 60}],
    ids=["at-expires-at", "exactly-max-delay-late"],
)
def test_a_firing_right_on_its_limit_is_sent(hook_row, webhook_server, limits):
    row = hook_row(fire_at=NOW - timedelta(minutes=1), **limits)

    report = run_tick(now=NOW)

    assert (report.counts()["succeeded"], report.counts()["expired"]) == (1, 0)
    assert len(webhook_server.received) == 1
    assert not Notification.objects.filter(pk=row.pk).exists()


def test_rows_without_limits_and_rows_in_time_are_sent_beside_an_expired_one(hook_row, webhook_server):
    expired = hook_row(fire_at=NOW - timedelta(hours=1), max_delay=60)
    plain = hook_row(fire_at=NOW - timedelta(hours=1))
    in_time = hook_row(expires_at=NOW + timedelta(hours=1), max_delay=600)

    report = run_tick(now=NOW)

    assert (report.counts()["expired"], report.counts()["succeeded"]) == (1, 2)
    assert reload(expired).last_error.startswith("expired: ")
    assert not Notification.objects.filter(pk__in=[plain.pk, in_time.pk]).exists()


# --- recurring rows: the firing is skipped, the schedule moves on ------------------------------------


def test_a_recurring_firing_later_than_max_delay_is_skipped_and_the_schedule_moves_on(
    hook_row, webhook_server, expired_heard
):
    row = hook_row(recurrence_rule=EVERY_5_MIN, fire_at=NOW - timedelta(hours=3), max_delay=600)
    firing = row.firing_id

    report = run_tick(now=NOW)

    assert report.counts()["expired"] == 1
    assert webhook_server.received == []
    assert attempts(row) == 0
    row = reload(row)
    assert row.last_error == "expired: 3 h after its due time, max_delay 10 min"
    assert (row.expired_at, row.next_fire_at, row.dead_lettered_at) == (NOW, NEXT_SLOT, None)
    next_firing = row.firing_id
    assert next_firing != firing  # the next occurrence is a new firing
    assert row.state(NOW) == State.EXPIRED
    assert expired_heard == [(Notification, row.pk, [])]

    sent = run_tick(now=NEXT_SLOT)

    assert sent.counts()["succeeded"] == 1
    assert [r.headers["webhook-id"] for r in webhook_server.received] == [f"msg_{next_firing}"]
    row = reload(row)
    assert (row.last_error, row.expired_at) == (None, None)  # a firing that goes out clears both
    assert row.state(NEXT_SLOT) == State.SCHEDULED
    assert len(expired_heard) == 1  # once per expired firing


def test_a_recurring_row_past_expires_at_stops_as_a_dead_letter(hook_row, webhook_server, expired_heard):
    # Due at 12:01 and 12:05; no firing may go out after 12:04.
    row = hook_row(recurrence_rule=EVERY_5_MIN, expires_at=datetime(2025, 1, 15, 12, 4, tzinfo=UTC))

    assert run_tick(now=NOW).counts()["succeeded"] == 1
    assert reload(row).next_fire_at == NEXT_SLOT
    report = run_tick(now=NEXT_SLOT)

    assert report.counts()["expired"] == 1
    assert len(webhook_server.received) == 1
    row = reload(row)
    assert row.last_error == "expired: 1 min past expires_at"
    # Every later occurrence is past expires_at too: the row does not fire again.
    assert (row.next_fire_at, row.dead_lettered_at, row.expired_at) == (None, NEXT_SLOT, NEXT_SLOT)
    assert run_tick(now=NEXT_SLOT + timedelta(days=1)).claimed == 0
    assert expired_heard == [(Notification, row.pk, [])]


# --- rows in backoff --------------------------------------------------------------------------------


def test_a_row_whose_next_retry_would_come_after_expires_at_expires_instead(hook_row, webhook_server, expired_heard):
    webhook_server.reply = Reply(status=503)
    row = hook_row(expires_at=NOW + timedelta(seconds=30))

    report = run_tick(now=NOW)

    assert (report.counts()["expired"], report.counts()["retried"]) == (1, 0)
    assert attempts(row) == 1  # this attempt was made (and failed); no other will be
    row = reload(row)
    assert row.last_error == "expired: the next retry would come 30 s past expires_at; webhook: HTTP 503"
    assert (row.dead_lettered_at, row.expired_at, row.next_fire_at, row.error_count) == (NOW, NOW, None, 0)
    assert expired_heard == [(Notification, row.pk, [("webhook", "webhook: HTTP 503")])]
    assert run_tick(now=NOW + timedelta(days=1)).claimed == 0


def test_a_row_whose_next_retry_comes_before_expires_at_retries(hook_row, webhook_server):
    webhook_server.reply = Reply(status=503)
    row = hook_row(expires_at=NOW + timedelta(seconds=60))

    assert run_tick(now=NOW).counts()["retried"] == 1
    assert (reload(row).error_count, reload(row).next_fire_at) == (1, NOW + timedelta(seconds=60))


def test_a_row_in_backoff_found_past_its_deadline_expires_without_another_attempt(hook_row, webhook_server):
    webhook_server.reply = Reply(status=503)
    row = hook_row(max_delay=600)
    run_tick(now=NOW)
    Notification.objects.filter(pk=row.pk).update(expires_at=NOW + timedelta(seconds=30))  # edited meanwhile

    report = run_tick(now=NOW + timedelta(seconds=60))

    assert report.counts()["expired"] == 1
    assert len(webhook_server.received) == 1
    row = reload(row)
    assert row.last_error == "expired: 30 s past expires_at"
    assert (row.error_count, row.next_fire_at) == (1, None)  # the failures it had stay on record


def test_a_retry_found_later_than_max_delay_after_its_due_time_expires(hook_row, webhook_server):
    webhook_server.reply = Reply(status=503)
    row = hook_row(max_delay=600)
    run_tick(now=NOW)

    report = run_tick(now=NOW + timedelta(hours=2))  # the ticks were down for two hours

    assert report.counts()["expired"] == 1
    assert len(webhook_server.received) == 1
    assert reload(row).last_error.startswith("expired: 2 h after its due time, max_delay 10 min")


def test_a_retry_that_would_come_later_than_max_delay_expires_instead(hook_row, webhook_server):
    webhook_server.reply = Reply(status=503)
    row = hook_row(max_delay=90)  # due a minute ago; the first retry would come a minute after NOW

    report = run_tick(now=NOW)

    assert (report.counts()["expired"], report.counts()["retried"]) == (1, 0)
    row = reload(row)
    assert row.last_error == (
        "expired: the next retry would come 2 min after its due time, max_delay 1.5 min; webhook: HTTP 503"
    )
    assert (row.dead_lettered_at, row.next_fire_at) == (NOW, None)


def test_max_delay_counts_from_the_firing_s_due_time_across_its_retries(hook_row, webhook_server):
    webhook_server.reply = Reply(status=503)
    row = hook_row(max_delay=300)  # due at NOW - 1 min; retries at +1 min, then +5 min

    assert run_tick(now=NOW).counts()["retried"] == 1  # the retry comes 2 min after the due time
    waiting = reload(row)
    assert (waiting.next_fire_at, waiting.firing_due_at) == (NOW + timedelta(minutes=1), NOW - timedelta(minutes=1))

    report = run_tick(now=NOW + timedelta(minutes=1))  # the next retry would come 7 min after it

    assert report.counts()["expired"] == 1
    assert len(webhook_server.received) == 2
    assert reload(row).last_error.startswith("expired: the next retry would come 7 min after its due time")


def test_time_waited_for_a_rate_limit_counts_toward_max_delay(hook_row, webhook_server):
    first, second = hook_row(max_delay=60), hook_row(max_delay=60)
    with override_settings(NOTIFICATIONS_RATE_LIMITS={f"127.0.0.1:{webhook_server.port}": "1/h"}):
        counts = run_tick(now=NOW).counts()
        assert (counts["succeeded"], counts["deferred"]) == (1, 1)
        (late,) = Notification.objects.filter(pk__in=[first.pk, second.pk])
        assert late.firing_due_at == NOW - timedelta(minutes=1)  # still due when it was

        report = run_tick(now=late.next_fire_at)  # its slot, an hour later

    assert (report.counts()["expired"], report.counts()["succeeded"]) == (1, 0)
    assert len(webhook_server.received) == 1
    assert reload(late).last_error.startswith("expired: 1 h after its due time, max_delay 1 min")


def test_quiet_hours_make_the_window_s_end_the_due_time(hook_row, webhook_server):
    row = hook_row(max_delay=60, quiet_hours="12:00-14:00", fire_at=NOW + timedelta(hours=1))
    assert reload(row).next_fire_at == datetime(2025, 1, 15, 14, 0, tzinfo=UTC)  # moved when saved

    Notification.objects.filter(pk=row.pk).update(next_fire_at=NOW)  # due inside the window after all
    assert run_tick(now=NOW).counts()["deferred"] == 1
    assert reload(row).firing_due_at is None

    assert run_tick(now=datetime(2025, 1, 15, 14, 0, 30, tzinfo=UTC)).counts()["succeeded"] == 1
    assert len(webhook_server.received) == 1


def test_an_operator_s_run_now_makes_a_waiting_firing_due_afresh(hook_row, webhook_server, clock):
    webhook_server.reply = Reply(status=503)
    row = hook_row(max_delay=600)
    run_tick(now=NOW)
    assert reload(row).firing_due_at is not None

    clock.move_to(NOW, tick=False)
    run_now(reload(row))
    assert (reload(row).next_fire_at, reload(row).firing_due_at) == (NOW, None)


# --- counted, announced, validated, requeued -------------------------------------------------------


def test_the_summary_line_and_the_tick_record_count_expired_firings(hook_row, clock):
    hook_row(fire_at=NOW - timedelta(hours=3), expires_at=NOW - timedelta(hours=2))
    hook_row(fire_at=NOW - timedelta(hours=3), max_delay=60)
    clock.move_to(NOW, tick=False)
    out = StringIO()

    call_command("runtick", "-v", "2", stdout=out)

    output = out.getvalue()
    assert "claimed=2 succeeded=0 partial=0 retried=0 dead_lettered=0 expired=2 deferred=0" in output
    assert re.search(r"^#\d+ expired: 2 h past expires_at$", output, re.M)  # -v 2: one line per row
    assert TickRun.objects.latest().expired == 2


def test_a_receiver_that_raises_does_not_stop_the_tick(hook_row, caplog):
    def explode(sender, notification, **kwargs):
        raise RuntimeError("receiver bug")

    signals.notification_expired.connect(explode, weak=False)
    try:
        row = hook_row(fire_at=NOW - timedelta(hours=3), max_delay=60)
        report = run_tick(now=NOW)
    finally:
        signals.notification_expired.disconnect(explode)

    assert report.counts()["expired"] == 1
    assert reload(row).expired_at == NOW
    assert "receiver bug" in caplog.text


@pytest.mark.parametrize(
    ("fields", "errors"),
    [
        ({"expires_at": datetime(2025, 2, 1, 12, 0)}, {"expires_at": ["Give an aware datetime (USE_TZ is on)."]}),
        ({"max_delay": 0}, {"max_delay": ["Give a positive number of seconds."]}),
        ({"max_delay": -5}, {"max_delay": ["Give a positive number of seconds."]}),
    ],
    ids=["naive-expires-at", "zero-max-delay", "negative-max-delay"],
)
def test_bad_limits_are_validation_errors(fields, errors):
    with pytest.raises(ValidationError) as caught:
        schedule(channels=["email"], email_to="ada@example.com", subject="s", body="b", **fields)

    assert caught.value.message_dict.keys() == errors.keys()
    for field, messages in errors.items():
        assert set(messages) <= set(caught.value.message_dict[field])


def test_a_max_delay_written_around_validation_dead_letters_the_row(webhook_server):
    (row,) = Notification.objects.bulk_create(
        [Notification(channels=["webhook"], webhook_url=webhook_server.url(), max_delay=0, next_fire_at=NOW)]
    )

    run_tick(now=NOW)

    row = reload(row)
    assert row.last_error == "invalid: max_delay: Give a positive number of seconds."
    assert (row.dead_lettered_at, row.next_fire_at, row.expired_at) == (NOW, None, None)
    assert webhook_server.received == []


def test_requeue_sends_a_firing_expired_by_max_delay(hook_row, webhook_server):
    row = hook_row(fire_at=NOW - timedelta(hours=3), max_delay=60)
    run_tick(now=NOW)

    result = requeue([row], now=NOW + timedelta(minutes=1))

    assert result.changed == 1
    row = reload(row)
    assert (row.expired_at, row.last_error, row.dead_lettered_at) == (None, None, None)
    assert row.next_fire_at == NOW + timedelta(minutes=1)
    assert run_tick(now=NOW + timedelta(minutes=1)).counts()["succeeded"] == 1
    assert len(webhook_server.received) == 1


def test_requeue_refuses_a_row_still_past_expires_at_until_it_is_extended(hook_row, webhook_server):
    row = hook_row(fire_at=NOW - timedelta(hours=3), expires_at=NOW - timedelta(hours=2))
    run_tick(now=NOW)

    refused = requeue([reload(row)], now=NOW)

    assert refused.changed == 0
    assert refused.skipped == {"past its expires_at (it would expire again): extend or clear expires_at first": 1}
    row = reload(row)
    row.expires_at = NOW + timedelta(hours=1)
    row.save()
    assert requeue([row], now=NOW).changed == 1
    assert run_tick(now=NOW).counts()["succeeded"] == 1
