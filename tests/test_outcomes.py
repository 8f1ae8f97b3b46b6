"""docs/outcomes.md, the outcome table, row by row, through `run_tick(now=...)` with real channels.

Email goes through a locmem backend that refuses chosen recipients with real smtplib
errors; webhooks go to a real local HTTP server whose answer is chosen by the path.
How an error's class (permanent or transient) and a Retry-After header steer a failure
is in test_error_classes.py.
"""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core import mail
from django.db import connection

from notifications import signals
from notifications.api import run_tick
from notifications.channels.email.channel import EmailChannel
from notifications.models import DeliveryAttempt, Notification
from tests.support.mail_doubles import BACKEND, DOWN_TO, OK_TO, REFUSED_TO
from tests.support.servers import Received, Reply, WebhookServer

pytestmark = pytest.mark.django_db

NOW = datetime(2025, 1, 15, 12, 2, tzinfo=UTC)
DUE = NOW - timedelta(minutes=1)
EVERY_5_MIN = "*/5 * * * *"
NEXT_SLOT = datetime(2025, 1, 15, 12, 5, tzinfo=UTC)  # first */5 occurrence after NOW
KINDS = ["one_shot", "recurring"]


@pytest.fixture(autouse=True)
def failing_recipients(settings):
    settings.EMAIL_BACKEND = BACKEND


def answer_by_path(request: Received) -> Reply:
    """`/status/503` answers 503."""
    parts = request.path.strip("/").split("/")
    reply = Reply()
    if len(parts) >= 2 and parts[0] == "status":
        reply.status = int(parts[1])
    return reply


@pytest.fixture(scope="module")
def shared_server():
    # One server for the module: stopping one takes half a second (its poll interval).
    server = WebhookServer()
    server.responder = answer_by_path
    yield server
    server.close()


@pytest.fixture
def hook(shared_server):
    """`hook(503)` is a URL on the local server that answers 503; `hook.server` records requests."""
    webhook_server = shared_server
    with webhook_server._lock:
        webhook_server.received.clear()

    def url(status: int = 200) -> str:
        return webhook_server.url(f"/status/{status}")

    url.server = webhook_server
    return url


@pytest.fixture
def row_of(make_row, hook):
    """`row_of(kind, email=..., webhook=...)`: a due row with the channels given."""

    def make(kind: str, *, email: str | None = None, webhook: int | None = None, **fields) -> Notification:
        channels = []
        if email is not None:
            channels.append("email")
            fields["email_to"] = email
        if webhook is not None:
            channels.append("webhook")
            fields.setdefault("webhook_url", hook(webhook))
        if kind == "recurring":
            fields["recurrence_rule"] = EVERY_5_MIN
        fields.setdefault("fire_at", DUE)
        return make_row(channels=channels, **fields)

    return make


def set_state(row: Notification, **fields) -> None:
    """Put a row in a prior state (a queryset update: no validation, no auto fields)."""
    Notification.objects.filter(pk=row.pk).update(**fields)


def reload(row: Notification) -> Notification | None:
    return Notification.objects.filter(pk=row.pk).first()


# --- full success ------------------------------------------------------------------------


def test_full_success_one_shot_is_deleted(row_of, hook):
    row = row_of("one_shot", email=OK_TO, webhook=200)

    report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 1
    assert reload(row) is None
    assert [m.to for m in mail.outbox] == [[OK_TO]]
    assert len(hook.server.received) == 1


def test_full_success_recurring_advances_and_clears_errors(row_of, hook):
    row = row_of("recurring", email=OK_TO, webhook=200)
    set_state(row, error_count=1, last_error="webhook: HTTP 503")

    report = run_tick(now=NOW)

    row = reload(row)
    assert report.counts()["succeeded"] == 1
    assert row.next_fire_at == NEXT_SLOT
    assert row.error_count == 0
    assert row.last_error is None
    assert row.last_fired_at == NOW
    assert row.dead_lettered_at is None
    assert len(mail.outbox) == 1
    assert len(hook.server.received) == 1


# --- partial success ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("email", "webhook", "failed", "error_class"),
    [
        (OK_TO, 503, "webhook", "transient"),
        (DOWN_TO, 200, "email", "transient"),
        (OK_TO, 410, "webhook", "permanent"),
        (REFUSED_TO, 200, "email", "permanent"),
    ],
    ids=["webhook-transient", "email-transient", "webhook-permanent", "email-permanent"],
)
def test_partial_one_shot_is_parked_and_never_retried_as_a_whole(row_of, hook, email, webhook, failed, error_class):
    # Whatever the failed channel's error class: a partial success is never a retry
    # (it would send the other channel again) nor a dead letter.
    row = row_of("one_shot", email=email, webhook=webhook)
    set_state(row, error_count=1)  # untouched by a partial success

    report = run_tick(now=NOW)

    row = reload(row)
    assert report.counts()["partial"] == 1
    assert row.next_fire_at is None
    assert row.last_error == f"partial: {failed}"
    assert row.error_count == 1
    assert row.last_fired_at == NOW
    assert row.dead_lettered_at is None
    classes = dict(DeliveryAttempt.objects.filter(notification_id=row.pk).values_list("channel", "error_class"))
    assert classes[failed] == error_class
    assert classes[({"email", "webhook"} - {failed}).pop()] == ""  # a success has no class
    sent = (len(mail.outbox), len(hook.server.received))

    later = run_tick(now=NOW + timedelta(days=1))

    assert later.claimed == 0
    assert (len(mail.outbox), len(hook.server.received)) == sent  # nothing went out again


@pytest.mark.parametrize(
    ("email", "webhook", "last_error"),
    [(OK_TO, 503, "partial: webhook"), (DOWN_TO, 200, "partial: email")],
    ids=["webhook-failed", "email-failed"],
)
def test_partial_recurring_advances_like_success(row_of, hook, email, webhook, last_error):
    row = row_of("recurring", email=email, webhook=webhook)
    set_state(row, error_count=1)

    report = run_tick(now=NOW)

    row = reload(row)
    assert report.counts()["partial"] == 1
    assert row.next_fire_at == NEXT_SLOT
    assert row.error_count == 0
    assert row.last_error == last_error
    assert row.last_fired_at == NOW
    assert row.dead_lettered_at is None


def test_partial_recurring_next_firing_sends_every_channel_under_a_new_id(row_of, hook):
    row = row_of("recurring", email=OK_TO, webhook=503)
    run_tick(now=NOW)
    first_id = hook.server.received[0].headers["webhook-id"]

    run_tick(now=NEXT_SLOT)

    assert len(mail.outbox) == 2
    assert len(hook.server.received) == 2
    assert hook.server.received[1].headers["webhook-id"] != first_id
    assert reload(row).next_fire_at == NEXT_SLOT + timedelta(minutes=5)


# --- full failure, retries left ---------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("prior", "delay"), [(0, 60), (1, 300)])
def test_full_failure_with_retries_left_backs_off(row_of, hook, kind, prior, delay):
    row = row_of(kind, webhook=503)
    set_state(row, error_count=prior)

    report = run_tick(now=NOW)

    row = reload(row)
    assert report.counts()["retried"] == 1
    assert len(hook.server.received) == 1
    assert row.error_count == prior + 1
    assert row.next_fire_at == NOW + timedelta(seconds=delay)
    assert row.last_error == "webhook: HTTP 503"
    assert row.last_fired_at is None
    assert row.dead_lettered_at is None


@pytest.mark.parametrize("kind", KINDS)
def test_full_failure_names_every_channel_error(row_of, kind):
    row = row_of(kind, email=DOWN_TO, webhook=503)

    run_tick(now=NOW)

    row = reload(row)
    assert row.last_error == "email: connection closed; webhook: HTTP 503"
    assert row.error_count == 1
    assert row.next_fire_at == NOW + timedelta(seconds=60)


def test_retry_keeps_the_webhook_id_of_the_firing(row_of, hook):
    row_of("one_shot", webhook=503)
    run_tick(now=NOW)
    run_tick(now=NOW + timedelta(seconds=60))

    ids = [r.headers["webhook-id"] for r in hook.server.received]
    assert len(ids) == 2
    assert ids[0] == ids[1]


# --- full failure, retries exhausted -----------------------------------------------------------


def test_exhausted_one_shot_is_dead_lettered(row_of):
    row = row_of("one_shot", webhook=503)
    set_state(row, error_count=2)

    report = run_tick(now=NOW)

    row = reload(row)
    assert report.counts()["dead_lettered"] == 1
    assert row.next_fire_at is None
    assert row.dead_lettered_at == NOW
    assert row.error_count == 3
    assert row.last_error == "webhook: HTTP 503"
    assert row.last_fired_at is None


def test_exhausted_recurring_dead_letters_the_firing_and_skips_forward(row_of, hook):
    row = row_of("recurring", webhook=503)
    set_state(row, error_count=2)

    report = run_tick(now=NOW)

    row = reload(row)
    assert report.counts()["dead_lettered"] == 1
    assert row.dead_lettered_at == NOW
    assert row.last_error == "webhook: HTTP 503"
    assert row.error_count == 0
    assert row.next_fire_at == NEXT_SLOT
    # The next occurrence is a new firing.
    run_tick(now=NEXT_SLOT)
    ids = [r.headers["webhook-id"] for r in hook.server.received]
    assert len(ids) == 2 and ids[0] != ids[1]


# --- the failure timeline ---------------------------------------------------------------------


def test_row_failing_every_time_is_tried_at_t_t60_t360_then_dead_lettered(row_of, hook):
    t = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    with time_machine.travel(t, tick=False) as clock:
        row = row_of("one_shot", webhook=503, fire_at=t)
        tried = []
        for offset in (0, 1, 59, 60, 61, 359, 360, 361, 1800, 86_400):
            clock.move_to(t + timedelta(seconds=offset))
            if run_tick().claimed:
                tried.append(offset)

    assert tried == [0, 60, 360]
    assert len(hook.server.received) == 3
    row = reload(row)
    assert row.error_count == 3  # MAX_RETRIES
    assert row.next_fire_at is None
    assert row.dead_lettered_at == t + timedelta(seconds=360)
    assert row.last_error == "webhook: HTTP 503"


# --- overdue recurring rows ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "overdue", "next_at"),
    [
        (EVERY_5_MIN, timedelta(days=3), NEXT_SLOT),
        ("FREQ=HOURLY;BYMINUTE=0", timedelta(hours=10), datetime(2025, 1, 15, 13, 0, tzinfo=UTC)),
    ],
)
def test_overdue_recurring_row_fires_once_then_jumps_past_now(make_row, rule, overdue, next_at):
    with time_machine.travel(NOW - overdue, tick=False):  # created then: an RRULE starts at creation
        row = make_row(recurrence_rule=rule, fire_at=NOW - overdue)

    first = run_tick(now=NOW)
    again = run_tick(now=NOW + timedelta(seconds=30))

    assert first.claimed == 1
    assert again.claimed == 0
    assert len(mail.outbox) == 1
    row = reload(row)
    assert row.next_fire_at == next_at
    assert row.last_fired_at == NOW


# --- poison rows -------------------------------------------------------------------------------


def test_channel_raising_for_one_row_fails_that_row_only(make_row, monkeypatch):
    poison = make_row(email_to="poison@example.com", fire_at=DUE - timedelta(minutes=5))  # head of the queue
    behind = [make_row(email_to=f"user{i}@example.com", fire_at=DUE) for i in range(3)]
    original = EmailChannel.deliver

    def deliver(self, firing):
        if firing.notification.pk == poison.pk:
            raise RuntimeError("template blew up")
        return original(self, firing)

    monkeypatch.setattr(EmailChannel, "deliver", deliver)

    report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 3
    assert sorted(m.to[0] for m in mail.outbox) == sorted(r.email_to for r in behind)
    poison = reload(poison)
    assert poison.last_error == "email: internal: RuntimeError"  # short, no exception text
    assert poison.error_count == 1
    assert poison.next_fire_at == NOW + timedelta(seconds=60)


@pytest.mark.parametrize(
    "where", ["notifications.models.validation.field_errors", "notifications.outcomes.settling.settle_firing"]
)
def test_unexpected_exception_is_a_full_failure_and_walks_to_the_dead_letters(make_row, monkeypatch, where):
    poison = make_row(email_to="poison@example.com", fire_at=DUE - timedelta(minutes=5))
    behind = [make_row(email_to=f"user{i}@example.com", fire_at=DUE) for i in range(3)]
    module, _, name = where.rpartition(".")
    original = getattr(importlib.import_module(module), name)

    def explode_for_poison(row, *args, **kwargs):
        if row.pk == poison.pk:
            raise RuntimeError("boom")
        return original(row, *args, **kwargs)

    monkeypatch.setattr(where, explode_for_poison)

    first = run_tick(now=NOW, limit=2)

    # The poison row heads the queue, yet everything behind it went out in the same tick.
    assert first.counts()["succeeded"] == 3
    assert not Notification.objects.filter(pk__in=[r.pk for r in behind]).exists()
    row = reload(poison)
    assert row.last_error == "internal: RuntimeError: boom"
    assert (row.error_count, row.next_fire_at) == (1, NOW + timedelta(seconds=60))

    run_tick(now=NOW + timedelta(seconds=60))
    run_tick(now=NOW + timedelta(seconds=360))

    row = reload(poison)
    assert row.dead_lettered_at == NOW + timedelta(seconds=360)
    assert (row.error_count, row.next_fire_at) == (3, None)
    assert row.last_error == "internal: RuntimeError: boom"
    assert run_tick(now=NOW + timedelta(days=1)).claimed == 0


# --- rows that bypassed validation -------------------------------------------------------------


VALID = {"channels": ["email"], "email_to": "ada@example.com", "subject": "s", "body": "b", "timezone": "UTC"}


@pytest.mark.parametrize(
    ("fields", "last_error"),
    [
        # The internal `task` channel (written by notifications.tasks alone) is no choice offered.
        ({"channels": ["sms"]}, "invalid: channels: Unknown channel(s): 'sms'. Use 'email', 'webhook' or 'inbox'."),
        ({"channels": "email"}, "invalid: channels: "),
        ({"email_to": ""}, "invalid: email_to: The email channel needs a recipient."),
        ({"channels": ["webhook"], "webhook_url": ""}, "invalid: webhook_url: The webhook channel needs a URL."),
        ({"recurrence_rule": "61 * * * *"}, "invalid: recurrence_rule: "),
        ({"recurrence_rule": "FREQ=SOMETIMES"}, "invalid: recurrence_rule: "),
        ({"payload": [1, 2]}, "invalid: payload: The payload must be a JSON object."),
        ({"timezone": "Nowhere/Land"}, "invalid: timezone: Unknown time zone 'Nowhere/Land'."),
        (
            {"channels": ["webhook"], "webhook_url": "ftp://example.com/x"},
            "invalid: webhook_url: Webhook URLs must use http or https.",
        ),
    ],
    ids=[
        "unknown-channel",
        "channels-not-list",
        "no-recipient",
        "no-url",
        "bad-cron",
        "bad-rrule",
        "payload-list",
        "unknown-zone",
        "ftp-url",
    ],
)
def test_bulk_created_invalid_row_is_dead_lettered_without_blocking(fields, last_error):
    bad, good = Notification.objects.bulk_create(
        [
            Notification(**{**VALID, **fields}, next_fire_at=DUE - timedelta(hours=1)),
            Notification(**VALID, next_fire_at=DUE),
        ]
    )
    if bad.pk is None:  # backends that do not return ids from bulk_create
        bad, good = Notification.objects.order_by("next_fire_at")

    report = run_tick(now=NOW, limit=1)

    bad = reload(bad)
    assert bad.last_error.startswith(last_error)
    assert bad.dead_lettered_at == NOW
    assert (bad.error_count, bad.next_fire_at) == (3, None)
    assert reload(good) is None  # the row behind was delivered in the same tick
    assert [m.to for m in mail.outbox] == [["ada@example.com"]]
    assert report.counts() | {"released": 0} == {
        "claimed": 2,
        "succeeded": 1,
        "partial": 0,
        "retried": 0,
        "dead_lettered": 1,
        "expired": 0,
        "deferred": 0,
        "released": 0,
    }


def test_row_broken_by_raw_sql_is_dead_lettered(make_row):
    row = make_row(recurrence_rule=EVERY_5_MIN, fire_at=DUE)
    table = connection.ops.quote_name(Notification._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET timezone = %s, recurrence_rule = %s WHERE id = %s",
            ["Nowhere/Land", "0 9 * * * * *", row.pk],
        )

    run_tick(now=NOW)

    row = reload(row)
    assert row.last_error.startswith("invalid: ")
    assert "timezone: Unknown time zone 'Nowhere/Land'." in row.last_error
    assert "recurrence_rule: " in row.last_error
    assert (row.dead_lettered_at, row.error_count, row.next_fire_at) == (NOW, 3, None)
    assert mail.outbox == []


# --- signals -------------------------------------------------------------------------------------


def test_signals_carry_the_row_and_the_channel_results(row_of):
    delivered = row_of("one_shot", email=OK_TO)
    partial = row_of("recurring", email=OK_TO, webhook=503)
    dead = row_of("one_shot", webhook=410)
    retried = row_of("one_shot", webhook=503)
    heard: dict[str, list] = {"delivered": [], "partial": [], "dead": []}

    def listener(name):
        def receive(sender, notification, results, **kwargs):
            heard[name].append((sender, notification.pk, [(r.channel, r.error) for r in results]))

        return receive

    receivers = {
        "delivered": listener("delivered"),
        "partial": listener("partial"),
        "dead": listener("dead"),
    }
    signals.notification_delivered.connect(receivers["delivered"])
    signals.notification_partially_delivered.connect(receivers["partial"])
    signals.notification_dead_lettered.connect(receivers["dead"])
    try:
        run_tick(now=NOW)
    finally:
        signals.notification_delivered.disconnect(receivers["delivered"])
        signals.notification_partially_delivered.disconnect(receivers["partial"])
        signals.notification_dead_lettered.disconnect(receivers["dead"])

    assert heard["delivered"] == [(Notification, delivered.pk, [("email", None)])]
    assert heard["partial"] == [(Notification, partial.pk, [("email", None), ("webhook", "webhook: HTTP 503")])]
    assert heard["dead"] == [(Notification, dead.pk, [("webhook", "webhook: HTTP 410")])]
    assert retried.pk not in {pk for events in heard.values() for _, pk, _ in events}


def test_a_failing_signal_receiver_does_not_stop_the_tick(make_row):
    rows = [make_row(fire_at=DUE) for _ in range(2)]

    def broken(sender, **kwargs):
        raise RuntimeError("receiver bug")

    signals.notification_delivered.connect(broken)
    try:
        report = run_tick(now=NOW)
    finally:
        signals.notification_delivered.disconnect(broken)

    assert report.counts()["succeeded"] == 2
    assert not Notification.objects.filter(pk__in=[r.pk for r in rows]).exists()


@pytest.mark.parametrize(("webhook", "kind"), [(200, "succeeded"), (503, "partial")])
def test_recurring_row_that_delivers_again_is_no_longer_a_dead_letter(row_of, webhook, kind):
    row = row_of("recurring", email=OK_TO, webhook=webhook)
    set_state(row, dead_lettered_at=NOW - timedelta(minutes=5), last_error="webhook: HTTP 503")

    report = run_tick(now=NOW)

    row = reload(row)
    assert report.counts()[kind] == 1
    assert row.dead_lettered_at is None
    assert row.state(NOW) == ("scheduled" if kind == "succeeded" else "partial")
    assert not Notification.objects.dead().exists()
