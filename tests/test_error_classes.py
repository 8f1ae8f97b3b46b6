"""Error classes: whether a retry can help decides between backoff and the dead letters.

Permanent: blocked address, malformed URL, 3xx (never followed), 4xx except 408/429,
email recipient refused. Transient: timeouts, connection errors, 5xx, 408, 429.
"""

from __future__ import annotations

import socket
from datetime import timedelta
from email.utils import formatdate

import pytest
from django.test import override_settings
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.channels import ErrorClass
from notifications.channels.webhook import guard
from notifications.channels.webhook.channel import classify_status, parse_retry_after
from notifications.models import DeliveryAttempt, Notification
from tests.support.mail_doubles import BACKEND, REFUSED_TO
from tests.support.servers import Reply

pytestmark = pytest.mark.django_db


@pytest.fixture
def now():
    return timezone.now().replace(microsecond=0)


def attempt(row: Notification) -> DeliveryAttempt:
    return DeliveryAttempt.objects.filter(notification_id=row.pk).latest("attempted_at")


# --- the table ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "klass"),
    [
        *[(s, ErrorClass.PERMANENT) for s in (301, 302, 303, 307, 308)],
        *[(s, ErrorClass.PERMANENT) for s in (400, 401, 403, 404, 405, 409, 410, 413, 415, 422)],
        (408, ErrorClass.TRANSIENT),
        (429, ErrorClass.TRANSIENT),
        *[(s, ErrorClass.TRANSIENT) for s in (500, 502, 503, 504, 599)],
    ],
)
def test_status_classes(status, klass):
    assert classify_status(status) == klass


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        (" 30 ", 30.0),
        ("0", 0.0),
        (formatdate(1_000_000_200, usegmt=True), 200.0),  # an HTTP date, 200 s after "now"
        (formatdate(999_999_000, usegmt=True), 0.0),  # a date in the past: no extra wait
        ("Sun, 09 Sep 2001 01:50:00 GMT", 200.0),  # the IMF-fixdate form, spelt out
        (None, None),
        ("", None),
        ("soon", None),
        ("1.5", None),
        ("-5", None),
        ("\u0663", None),  # an Arabic-Indic digit: str.isdigit() says yes, HTTP says no
    ],
)
def test_retry_after_parsing(value, seconds):
    assert parse_retry_after(value, now=1_000_000_000) == seconds


# --- end to end, on a real local server ------------------------------------------------------


@pytest.mark.parametrize(
    ("channel", "target", "error"),
    [
        ("webhook", 410, "webhook: HTTP 410"),
        ("webhook", 404, "webhook: HTTP 404"),
        ("webhook", 400, "webhook: HTTP 400"),
        ("webhook", 422, "webhook: HTTP 422"),
        ("webhook", 302, "webhook: HTTP 302 (redirects are not followed)"),
        ("email", REFUSED_TO, "email: 550 5.1.1 <refused@example.com>: no such user"),
    ],
)
@override_settings(EMAIL_BACKEND=BACKEND)
def test_permanent_error_dead_letters_a_one_shot_after_one_attempt(webhook_server, now, channel, target, error):
    if channel == "webhook":
        webhook_server.reply = Reply(status=target, headers={"Location": "http://169.254.169.254/"})
        row = schedule(channels=["webhook"], webhook_url=webhook_server.url(), fire_at=now)
    else:
        row = schedule(channels=["email"], email_to=target, subject="s", body="b", fire_at=now)

    report = run_tick(now=now)

    row.refresh_from_db()
    assert report.counts()["dead_lettered"] == 1
    assert row.last_error == error
    assert (row.dead_lettered_at, row.next_fire_at, row.error_count) == (now, None, 3)  # MAX_RETRIES
    assert attempt(row).error_class == "permanent"
    assert len(webhook_server.received) == (1 if channel == "webhook" else 0)
    assert run_tick(now=now + timedelta(days=1)).claimed == 0  # no retry is ever spent


def test_permanent_failure_of_a_recurring_row_stops_it_as_a_dead_letter(webhook_server, now):
    # Not the next occurrence either: it would hit the same dead target (tests/test_permanent_recurring.py).
    webhook_server.reply = Reply(status=410)
    row = schedule(channels=["webhook"], webhook_url=webhook_server.url(), recurrence_rule="0 9 * * *", fire_at=now)

    run_tick(now=now)

    row.refresh_from_db()
    assert (row.last_error, row.dead_lettered_at, row.error_count) == ("webhook: HTTP 410", now, 3)
    assert row.next_fire_at is None


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503])
def test_transient_status_backs_off(webhook_server, now, status):
    webhook_server.reply = Reply(status=status)
    row = schedule(channels=["webhook"], webhook_url=webhook_server.url(), fire_at=now)

    run_tick(now=now)

    row.refresh_from_db()
    assert row.last_error == f"webhook: HTTP {status}"
    assert (row.error_count, row.dead_lettered_at) == (1, None)
    assert row.next_fire_at == now + timedelta(seconds=60)  # BACKOFF[0]
    assert attempt(row).error_class == "transient"


@pytest.mark.parametrize(
    ("status", "retry_after", "delay"),
    [
        (429, "120", 120),  # the receiver's wait is honoured
        (503, "120", 120),
        (503, "300", 300),
        (429, None, 60),  # normal backoff
        (503, None, 60),
        (429, "5", 60),  # never sooner than the backoff step
        (503, "5", 60),
        (429, "86400", 1800),  # never beyond the last backoff step
        (500, "900", 60),  # ignored on statuses other than 429 and 503
    ],
)
def test_retry_after_in_seconds_pushes_the_next_attempt(webhook_server, now, status, retry_after, delay):
    headers = {"Retry-After": retry_after} if retry_after else {}
    webhook_server.reply = Reply(status=status, headers=headers)
    row = schedule(channels=["webhook"], webhook_url=webhook_server.url(), fire_at=now)

    run_tick(now=now)

    row.refresh_from_db()
    assert row.last_error == f"webhook: HTTP {status}"
    assert row.error_count == 1
    assert row.next_fire_at == now + timedelta(seconds=delay)


def test_retry_after_as_an_http_date(webhook_server, now):
    webhook_server.reply = Reply(status=429, headers={"Retry-After": formatdate(now.timestamp() + 600, usegmt=True)})
    row = schedule(channels=["webhook"], webhook_url=webhook_server.url(), fire_at=now)

    run_tick(now=now)

    row.refresh_from_db()
    # The date is read against the wall clock during the tick: allow for the tick's length.
    wait = (row.next_fire_at - now).total_seconds()
    assert 590 <= wait <= 600


@pytest.mark.parametrize(
    "url",
    ["http://exa mple.com/hook", "http://" + "a" * 64 + ".example.com/", "http://example..com/"],
)
def test_a_malformed_url_that_reached_the_table_is_permanent(now, url):
    # bulk_create skips validation, like raw SQL; the tick must still not spend retries.
    # (A non-http scheme is refused as invalid: test_outcomes' bulk-created rows.)
    (row,) = Notification.objects.bulk_create([Notification(channels=["webhook"], webhook_url=url, next_fire_at=now)])

    run_tick(now=now)

    row.refresh_from_db()
    assert row.dead_lettered_at == now
    assert row.last_error in ("webhook: malformed URL", "invalid: webhook_url: Webhook URLs must use http or https.")


def test_blocked_address_is_permanent(webhook_server, now):
    row = schedule(channels=["webhook"], webhook_url=webhook_server.url(), fire_at=now)

    with override_settings(NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS=[]):
        run_tick(now=now)

    row.refresh_from_db()
    assert (row.last_error, row.dead_lettered_at) == ("webhook: blocked address", now)
    assert attempt(row).error_class == "permanent"


def test_unknown_host_and_refused_connection_are_transient(monkeypatch, now):
    def nxdomain(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(guard, "getaddrinfo", nxdomain)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    missing = schedule(channels=["webhook"], webhook_url="https://no-such-host.example/hook", fire_at=now)
    refused = schedule(channels=["webhook"], webhook_url=f"http://127.0.0.1:{port}/hook", fire_at=now)

    run_tick(now=now)

    missing.refresh_from_db()
    refused.refresh_from_db()
    assert (missing.last_error, missing.error_count) == ("webhook: host not found", 1)
    assert (refused.last_error, refused.error_count) == ("webhook: connection refused", 1)
    assert {attempt(missing).error_class, attempt(refused).error_class} == {"transient"}


@override_settings(EMAIL_BACKEND=BACKEND)
def test_a_permanent_and_a_transient_failure_together_are_retried(webhook_server, now):
    webhook_server.reply = Reply(status=503)
    row = schedule(
        channels=["email", "webhook"],
        email_to=REFUSED_TO,
        subject="s",
        body="b",
        webhook_url=webhook_server.url(),
        fire_at=now,
    )

    run_tick(now=now)

    row.refresh_from_db()
    assert (row.error_count, row.dead_lettered_at) == (1, None)
    assert row.next_fire_at == now + timedelta(seconds=60)  # BACKOFF[0]: a retry can help the webhook


def test_the_admin_shows_and_filters_by_error_class(client, admin_user, webhook_server, now):
    webhook_server.reply = Reply(status=410)
    gone = schedule(channels=["webhook"], webhook_url=webhook_server.url(), fire_at=now)
    run_tick(now=now)
    client.force_login(admin_user)

    page = client.get("/admin/notifications/deliveryattempt/", {"error_class": "permanent"})
    assert page.status_code == 200
    assert page.context["cl"].result_count == 1
    assert "webhook: HTTP 410" in page.content.decode()
    assert (
        client.get("/admin/notifications/deliveryattempt/", {"error_class": "transient"}).context["cl"].result_count
        == 0
    )
    change = client.get(f"/admin/notifications/notification/{gone.pk}/change/")
    assert "permanent" in change.content.decode()
