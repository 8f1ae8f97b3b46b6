"""Endpoints that misbehave, on real loopback sockets: each ends as a short failure inside
the channel deadline, memory stays flat, and the other rows of the tick are unaffected."""

from __future__ import annotations

import time
import tracemalloc
import uuid

import pytest
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.channels import ErrorClass, Firing
from notifications.channels.webhook.channel import WebhookChannel
from notifications.models import DeliveryAttempt, Notification
from tests.support.hostile_servers import FIFTY_MB

TIMEOUT = 2  # tests/settings.py: NOTIFICATIONS_CHANNEL_TIMEOUT
SLACK = 10  # generous: the machine is shared and loaded; the bound proves "the deadline held" (a
# hostile server left alone holds the connection until the test closes it), not speed
MB = 1024 * 1024


@pytest.fixture
def channel():
    channel = WebhookChannel()
    yield channel
    channel.close()


def send(channel: WebhookChannel, url: str):
    row = schedule(channels=["webhook"], webhook_url=url)
    return channel.send(Firing(row, str(uuid.uuid4()), timezone.now(), ["webhook"]))


@pytest.mark.django_db
def test_a_server_that_never_answers_times_out(hostile, channel):
    server = hostile("silent")
    result = send(channel, server.url())
    assert result.error == f"webhook: timed out after {TIMEOUT}s"
    assert result.error_class == ErrorClass.TRANSIENT
    assert TIMEOUT - 0.5 < result.duration < TIMEOUT + SLACK
    assert server.connections == 1


@pytest.mark.django_db
def test_a_server_dripping_a_byte_every_half_second_is_cut_at_the_deadline(hostile, channel):
    server = hostile("drip", interval=0.5)
    result = send(channel, server.url())
    # Each byte arrives well inside any per-read timeout: only the total deadline ends it.
    assert result.error == f"webhook: timed out after {TIMEOUT}s"
    assert result.error_class == ErrorClass.TRANSIENT
    assert result.duration < TIMEOUT + SLACK
    assert server.bytes_sent >= 3  # it really was dripping when it was cut


@pytest.mark.django_db
@pytest.mark.parametrize(("status", "error"), [(500, "webhook: HTTP 500"), (200, None)])
def test_a_50_mb_body_is_never_read_past_the_cap(hostile, channel, status, error):
    server = hostile("huge", status=status)
    tracemalloc.start()
    try:
        result = send(channel, server.url())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The status line is the receiver's answer; the body is only drained up to the cap.
    assert result.error == error
    assert result.http_status == status
    assert result.duration < TIMEOUT + SLACK
    assert peak < 4 * MB, f"peak Python memory {peak / MB:.1f} MB"
    # What the server got rid of is at most the cap plus the kernel's socket buffers.
    server.wait_handled(1)  # the client closed the connection and the server stopped sending
    assert server.bytes_sent < FIFTY_MB / 4, f"{server.bytes_sent / MB:.1f} MB left the server"


@pytest.mark.django_db
def test_a_redirect_to_an_internal_address_is_not_followed(hostile, channel):
    internal = hostile("ok")  # stands in for 169.254.169.254: loopback is open in tests
    server = hostile("redirect", location=internal.url(path="/latest/meta-data/"))
    result = send(channel, server.url())
    assert result.error == "webhook: HTTP 302 (redirects are not followed)"
    assert result.error_class == ErrorClass.PERMANENT
    assert result.duration < TIMEOUT + SLACK
    assert internal.connections == 0


@pytest.mark.django_db
def test_a_connection_reset_is_a_transient_failure(hostile, channel):
    server = hostile("reset")
    result = send(channel, server.url())
    assert result.error == "webhook: connection reset"
    assert result.error_class == ErrorClass.TRANSIENT
    assert result.duration < TIMEOUT + SLACK


@pytest.mark.django_db
def test_a_closed_port_is_connection_refused(hostile, channel):
    server = hostile("ok")
    url = server.url()
    server.close()
    result = send(channel, url)
    assert result.error == "webhook: connection refused"
    assert result.error_class == ErrorClass.TRANSIENT


@pytest.mark.django_db
def test_hostile_endpoints_leave_the_other_rows_of_the_tick_alone(hostile, webhook_server, mailoutbox):
    internal = hostile("ok")
    hostiles = {
        "silent": hostile("silent"),
        "drip": hostile("drip", interval=0.5),
        "huge": hostile("huge", status=500),
        "redirect": hostile("redirect", location=internal.url(path="/admin")),
        "reset": hostile("reset"),
    }
    rows = {name: schedule(channels=["webhook"], webhook_url=server.url()) for name, server in hostiles.items()}
    healthy_hook = schedule(channels=["webhook"], webhook_url=webhook_server.url(), payload={"n": 1})
    healthy_mail = schedule(channels=["email"], email_to="ada@example.com", subject="hi", body="there")

    started = time.monotonic()
    report = run_tick()
    elapsed = time.monotonic() - started

    # The tick ends: every hostile row was cut at its deadline (no hang). Its speed is bench's.
    assert elapsed < TIMEOUT + 2 * SLACK, f"tick took {elapsed:.1f}s"
    assert report.counts() | {} == {
        "claimed": 7,
        "succeeded": 2,
        "partial": 0,
        "retried": 4,
        "dead_lettered": 1,  # the redirect: permanent
        "expired": 0,
        "deferred": 0,
        "released": 0,
    }
    assert not Notification.objects.filter(pk__in=[healthy_hook.pk, healthy_mail.pk]).exists()
    assert len(webhook_server.received) == 1
    assert [m.subject for m in mailoutbox] == ["hi"]
    errors = {name: Notification.objects.get(pk=row.pk).last_error for name, row in rows.items()}
    assert errors == {
        "silent": f"webhook: timed out after {TIMEOUT}s",
        "drip": f"webhook: timed out after {TIMEOUT}s",
        "huge": "webhook: HTTP 500",
        "redirect": "webhook: HTTP 302 (redirects are not followed)",
        "reset": "webhook: connection reset",
    }
    assert all(len(error) < 60 for error in errors.values())
    durations = DeliveryAttempt.objects.filter(notification_id__in=[r.pk for r in rows.values()])
    assert all(a.duration_ms < (TIMEOUT + SLACK) * 1000 for a in durations)
    assert internal.connections == 0
