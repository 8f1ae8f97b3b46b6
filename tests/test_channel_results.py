"""What a channel or the server behind it answers never breaks a batch (issue 45, findings
1 and 2; SPEC v5 "Hardening rules of version 5"): the answer is cleaned and bounded where
the tick receives it, and the row it belongs to settles once while the other rows of its
batch are delivered once, across ticks that would claim the batch again."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from notifications.api import schedule
from notifications.channels import ChannelResult, ErrorClass, results
from notifications.models import DeliveryAttempt, Notification
from notifications.rules.remote_text import ERROR_CHARS
from notifications.tick.engine import run_tick
from tests.support import site_channels
from tests.support.servers import Reply, WebhookServer

pytestmark = pytest.mark.django_db(transaction=True)

HOOKS = 5
TO = {"odd": {"to": "+15551234567"}}
APPRISE = "notifications.channels.apprise.AppriseChannel"


def odd(**answer) -> override_settings:
    return override_settings(
        NOTIFICATIONS_CHANNELS={
            "odd": {"BACKEND": "tests.support.site_channels.OddAnswerChannel", "OPTIONS": {"answer": answer}}
        }
    )


@pytest.fixture(autouse=True)
def _clean_support():
    site_channels.SENT.clear()


def three_ticks() -> None:
    """Three ticks, the claims' leases ended between them: a batch left claimed is taken
    again by the next, as under cron once its lease runs out."""
    now = timezone.now()
    for n in range(3):
        run_tick(now=now + timedelta(seconds=n))
        Notification.objects.exclude(claim_token=None).update(claimed_until=timezone.now() - timedelta(seconds=1))


def with_hooks(webhook_server, row_fields: dict) -> Notification:
    """One row of the odd kind among HOOKS webhooks, all due in one batch."""
    row = schedule(**row_fields)
    for n in range(HOOKS):
        schedule(channels=["webhook"], webhook_url=webhook_server.url(), payload={"n": n})
    return row


def assert_hooks_delivered_once(webhook_server) -> None:
    webhook_server.wait_answered(HOOKS)
    ids = webhook_server.webhook_ids()
    assert len(ids) == HOOKS and set(ids.values()) == {1}, ids
    assert not Notification.objects.filter(channels=["webhook"]).exists()


def assert_retried_once(row: Notification) -> Notification:
    row.refresh_from_db()
    assert (row.error_count, row.dead_lettered_at, row.claim_token) == (1, None, None)
    assert row.next_fire_at > timezone.now() + timedelta(seconds=2)  # the first backoff, not due in the three ticks
    return row


ODD_TRANSIENT = {
    "a NUL": {"error": "odd: provider said \x00 no", "error_class": ErrorClass.TRANSIENT},
    "five million characters": {"error": "odd: " + "x" * 5_000_004, "error_class": ErrorClass.TRANSIENT},
    "a status that is no integer": {"error": "odd: busy", "error_class": "transient", "http_status": "5xx"},
    "control characters": {"error": "odd: a\r\nb\x1b[31m c\u202e", "error_class": ErrorClass.TRANSIENT},
}


@pytest.mark.parametrize("answer", ODD_TRANSIENT.values(), ids=ODD_TRANSIENT.keys())
def test_a_site_channels_odd_failure_retries_its_row_alone(webhook_server, answer):
    with odd(**answer):
        row = with_hooks(webhook_server, {"channels": ["odd"], "channel_data": TO})
        three_ticks()
    assert_hooks_delivered_once(webhook_server)
    row = assert_retried_once(row)
    assert len(site_channels.SENT) == 1
    stored = DeliveryAttempt.objects.get(notification_id=row.pk)
    for text in (row.last_error, stored.error):
        assert text.startswith("odd: ") and text.isprintable() and len(text) <= ERROR_CHARS
    assert stored.http_status is None and stored.error_class == "transient"


def test_error_class_as_its_string_value_is_taken_as_the_enum(webhook_server):
    with odd(error="odd: number unreachable", error_class="permanent", http_status=410):
        row = with_hooks(webhook_server, {"channels": ["odd"], "channel_data": TO})
        three_ticks()
    assert_hooks_delivered_once(webhook_server)
    row.refresh_from_db()
    assert row.dead_lettered_at is not None and row.last_error == "odd: number unreachable"
    stored = DeliveryAttempt.objects.get(notification_id=row.pk)
    assert (stored.error_class, stored.http_status) == ("permanent", 410)


def test_an_unknown_error_class_is_an_internal_failure_of_its_row(webhook_server):
    with odd(error="odd: hmm", error_class="fatal"):
        row = with_hooks(webhook_server, {"channels": ["odd"], "channel_data": TO})
        three_ticks()
    assert_hooks_delivered_once(webhook_server)
    row = assert_retried_once(row)
    assert row.last_error.startswith("odd: internal: error_class is not one of")


def test_an_smtp_reply_with_a_nul_byte_retries_its_row_alone(smtp, webhook_server):
    smtp.data_replies.append("451 4.3.0 try again \x00 later")
    row = with_hooks(
        webhook_server, {"channels": ["email"], "email_to": "ada@example.com", "subject": "Hi", "body": "Hello"}
    )
    three_ticks()
    assert_hooks_delivered_once(webhook_server)
    row = assert_retried_once(row)
    assert "\x00" not in row.last_error and "later" in row.last_error
    assert smtp.data_attempts == 1 and not smtp.delivered


def test_an_ntfy_error_with_a_nul_byte_retries_its_row_alone(webhook_server):
    """An ntfy-shaped receiver behind Apprise answers a JSON error holding a NUL: on
    PostgreSQL it reached `last_error` and the whole batch was sent again each lease."""
    ntfy = WebhookServer()
    ntfy.reply = Reply(
        503,
        json.dumps({"code": 50301, "http": 503, "error": "server busy \u0000 try later"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with override_settings(
            NOTIFICATIONS_CHANNELS={
                "push": {"BACKEND": APPRISE, "OPTIONS": {"urls": f"ntfy://127.0.0.1:{ntfy.port}/alerts"}}
            }
        ):
            row = with_hooks(webhook_server, {"channels": ["push"], "channel_data": {"push": {}}, "body": "Hello"})
            three_ticks()
    finally:
        ntfy.close()
    assert_hooks_delivered_once(webhook_server)
    row = assert_retried_once(row)
    assert "\x00" not in row.last_error and row.last_error.startswith("push: ")
    assert len(ntfy.received) == 1


@pytest.mark.postgres_only
def test_an_outcome_the_database_refuses_fails_its_row_alone(webhook_server, monkeypatch):
    """Past the cleaning (as if it missed something): PostgreSQL refuses the NUL, the batch
    is written row by row and the one row fails as an internal error, from its claimed state."""
    monkeypatch.setattr(results, "received", lambda name, result: result)
    with odd(error="odd: \x00", error_class=ErrorClass.PERMANENT):
        row = with_hooks(webhook_server, {"channels": ["odd"], "channel_data": TO})
        three_ticks()
    assert_hooks_delivered_once(webhook_server)
    row = assert_retried_once(row)
    assert row.last_error.startswith("internal: Unstorable: its outcome could not be stored (DataError)")
    assert not DeliveryAttempt.objects.filter(notification_id=row.pk).exists()


# What the tick receives, in memory.


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (None, "send() returned NoneType, not a ChannelResult"),
        (RuntimeError("token=s3cret"), "send() raised RuntimeError"),
        (ChannelResult("sms", error=b"bytes"), "error is bytes, not text"),  # type: ignore[arg-type]
        (ChannelResult("sms", error="sms: x", error_class=3), "error_class is not one of transient, permanent"),  # type: ignore[arg-type]
    ],
)
def test_an_unreadable_result_is_a_transient_internal_failure(answer, why):
    result = results.received("sms", answer)
    assert (result.error, result.error_class) == (f"sms: internal: {why}", ErrorClass.TRANSIENT)


def test_the_rest_of_a_result_is_cleaned_or_dropped():
    result = results.received(
        "sms",
        ChannelResult(
            "sms",
            retry_after=float("nan"),
            http_status=True,  # type: ignore[arg-type]
            refused=(("ada@example.com", "550\x00 gone\n"), ("bad\x00@example.com", "x"), "junk"),  # type: ignore[arg-type]
            deferred=("bob@example.com", "eve\n@example.com", 5),  # type: ignore[arg-type]
            sent_to="a" * 600,
            summary="Hi\tthere\x07",
            answered="yes",  # type: ignore[arg-type]
        ),
    )
    assert result.ok and result.error_class is None
    assert (result.retry_after, result.http_status, result.answered) == (None, None, False)
    assert result.refused == (("ada@example.com", "550 gone"),)
    assert result.deferred == ("bob@example.com",)
    assert len(result.sent_to) == 500 and result.summary == "Hi there"


@pytest.mark.parametrize(
    "text",
    ["hooks.example.com", "webhook: HTTP 503", "  two   spaces  ", "tab\there", "line\nbreak", "bell\x07", "x" * 5000],
)
def test_plain_ascii_text_is_cleaned_as_any_other(text):
    """The plain-ASCII shortcut of `one_line` stores what the general rule would."""
    from notifications.rules.remote_text import one_line

    general = "".join(" " if ch.isspace() else ch for ch in text if ch.isspace() or (ord(ch) >= 32 and ch != "\x7f"))
    assert one_line(text, ERROR_CHARS) == one_line(text + "\u200b", ERROR_CHARS)  # a format char takes the long way
    assert one_line(text, ERROR_CHARS).startswith(" ".join(general.split())[:100])


@pytest.mark.parametrize(
    "answer",
    [
        ChannelResult(
            "webhook", http_status=200, duration=0.1, sent_to="hooks.example.com", summary="notification.sent"
        ),
        ChannelResult("webhook", duration=0.1),
        ChannelResult("webhook", http_status=204, duration=0.1, sent_to="two  spaces"),
        ChannelResult("webhook", http_status=200, duration=1, sent_to="hooks.example.com"),
        ChannelResult("webhook", http_status=999, duration=0.1),
        ChannelResult("webhook", duration=0.1, summary="bell\x07"),
        ChannelResult("webhook", duration=0.1, refused=[]),  # type: ignore[arg-type]
        ChannelResult("webhook", duration=0.1, error_class=ErrorClass.PERMANENT),
    ],
)
def test_an_ordinary_success_is_taken_as_the_full_cleaning_would_store_it(answer):
    """The shortcut for a plain success (no copy) gives what cleaning every field gives."""
    taken = results.received("webhook", answer)
    assert taken == results._cleaned("webhook", answer)
    assert type(taken.duration) is float and type(taken.refused) is tuple
