"""The webhook channel against real local HTTP servers: body, ids, status, deadline, cap, proxies."""

from __future__ import annotations

import json
import socket
import time
from datetime import datetime, timedelta

import pytest
import time_machine
from django.test import override_settings
from django.utils import timezone
from standardwebhooks import Webhook

from notifications.api import run_tick
from notifications.channels import Firing
from notifications.channels.webhook.channel import WebhookChannel
from notifications.models import DeliveryAttempt, Notification
from tests.support.servers import Reply, WebhookServer

TIMEOUT = 2  # NOTIFICATIONS_CHANNEL_TIMEOUT in tests.settings
# Generous: the machine is shared and loaded. A deadline that did not hold would take
# the server's full 60 s hang (or forever, for the drip), so this still catches it.
DEADLINE_BOUND = TIMEOUT + 20


@pytest.fixture
def other_server():
    server = WebhookServer()
    yield server
    server.close()


def send(row: Notification) -> tuple[object, float]:
    """Send one firing of `row` through a fresh channel, as a tick would; time it."""
    channel = WebhookChannel()
    try:
        firing = Firing(row, str(row.firing_id), timezone.now(), row.owed_channels)
        started = time.monotonic()
        result = channel.send(firing)
        return result, time.monotonic() - started
    finally:
        channel.close()


def dead_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- what is sent ------------------------------------------------------------------


def test_body_names_the_firing_and_carries_the_payload(make_row, webhook_server, settings):
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url(), payload={"invoice": 42, "due": "soon"})
    before = timezone.now()

    run_tick()

    (received,) = webhook_server.received
    body = json.loads(received.body)
    assert body["id"] == received.headers["webhook-id"] == f"msg_{row.firing_id}"
    assert body["type"] == "notification.fired"
    assert body["notification_id"] == row.pk
    assert body["channels"] == ["webhook"]
    assert body["payload"] == {"invoice": 42, "due": "soon"}
    fired_at = datetime.fromisoformat(body["fired_at"])
    assert before - timedelta(seconds=1) <= fired_at <= timezone.now()
    assert received.headers["content-type"] == "application/json"
    assert Webhook(settings.NOTIFICATIONS_WEBHOOK_SECRET).verify(received.body, received.headers) == body


def test_a_recurring_rows_delivery_log_names_the_firing_it_sent(make_row, webhook_server):
    with time_machine.travel(timezone.now(), tick=True) as clock:
        row = make_row(channels=["webhook"], webhook_url=webhook_server.url(), recurrence_rule="* * * * *")
        sent_firing = row.firing_id
        clock.shift(61)
        assert run_tick().counts()["succeeded"] == 1

    (received,) = webhook_server.received
    (attempt,) = DeliveryAttempt.objects.filter(notification_id=row.pk)
    assert received.headers["webhook-id"] == f"msg_{sent_firing}"
    assert attempt.firing_id == sent_firing  # not the next occurrence's, which the row now holds
    assert Notification.objects.get(pk=row.pk).firing_id != sent_firing


def test_webhook_id_is_the_same_on_every_attempt_of_one_firing(make_row, webhook_server):
    webhook_server.reply = Reply(status=503)
    with time_machine.travel(timezone.now(), tick=True) as clock:
        row = make_row(channels=["webhook"], webhook_url=webhook_server.url())
        assert run_tick().counts()["retried"] == 1
        clock.shift(61)  # past the first backoff step
        assert run_tick().counts()["retried"] == 1
        webhook_server.reply = Reply(status=200)
        clock.shift(301)  # past the second
        assert run_tick().counts()["succeeded"] == 1

    attempts = webhook_server.received
    assert len(attempts) == 3
    assert {a.headers["webhook-id"] for a in attempts} == {f"msg_{row.firing_id}"}
    assert {json.loads(a.body)["id"] for a in attempts} == {f"msg_{row.firing_id}"}
    # Each attempt is signed afresh, so a receiver's replay window accepts a late retry.
    stamps = [int(a.headers["webhook-timestamp"]) for a in attempts]
    assert stamps == sorted(stamps) and stamps[2] - stamps[0] >= 360
    assert not Notification.objects.filter(pk=row.pk).exists()


def test_each_firing_of_a_recurring_row_has_its_own_webhook_id(make_row, webhook_server):
    with time_machine.travel(timezone.now(), tick=True) as clock:
        row = make_row(channels=["webhook"], webhook_url=webhook_server.url(), recurrence_rule="* * * * *")
        clock.shift(61)
        assert run_tick().counts()["succeeded"] == 1
        clock.shift(61)
        assert run_tick().counts()["succeeded"] == 1

    first, second = webhook_server.received
    assert first.headers["webhook-id"] != second.headers["webhook-id"]
    row.refresh_from_db()
    assert second.headers["webhook-id"] != f"msg_{row.firing_id}"  # the next firing has a new id too


# --- what counts as delivered ---------------------------------------------------------


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_any_2xx_is_a_success(make_row, webhook_server, status):
    webhook_server.reply = Reply(status=status, body=b"" if status == 204 else b"thanks")
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())

    assert run_tick().counts()["succeeded"] == 1
    assert not Notification.objects.filter(pk=row.pk).exists()


@pytest.mark.parametrize("status", [304, 404, 429, 500, 503])
def test_anything_else_is_a_failure(make_row, webhook_server, status):
    webhook_server.reply = Reply(status=status, body=b"")
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())

    report = run_tick()

    row.refresh_from_db()  # still there: a one-shot row is deleted only when delivered
    assert report.counts()["succeeded"] == 0
    assert row.last_error.startswith(f"webhook: HTTP {status}")


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirect_is_a_failure_and_is_not_followed(make_row, webhook_server, other_server, status):
    webhook_server.reply = Reply(status=status, headers={"Location": other_server.url("/elsewhere")})
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())

    report = run_tick()

    row.refresh_from_db()
    assert report.counts()["succeeded"] == 0
    assert row.last_error == f"webhook: HTTP {status} (redirects are not followed)"
    assert len(webhook_server.received) == 1
    # The tick has written the row back: a followed redirect would have been sent inside
    # it, and other_server records a request before it answers.
    assert other_server.received == []


@pytest.mark.parametrize(
    "variables",
    [["HTTP_PROXY"], ["http_proxy"], ["ALL_PROXY"], ["all_proxy"], ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]],
    ids=lambda names: "+".join(names),
)
def test_environment_proxies_are_ignored(make_row, webhook_server, monkeypatch, variables):
    # A proxy on a dead port: honouring it would turn the delivery into "connection refused".
    proxy = f"http://127.0.0.1:{dead_port()}"
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in variables:
        monkeypatch.setenv(name, proxy)
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())

    assert run_tick().counts()["succeeded"] == 1
    assert len(webhook_server.received) == 1
    assert not Notification.objects.filter(pk=row.pk).exists()


def test_response_body_is_read_only_up_to_the_cap(make_row, webhook_server):
    # A 200 whose body never ends: reading it all would run into the deadline.
    webhook_server.reply = Reply(behaviour="endless")
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())

    with override_settings(NOTIFICATIONS_RESPONSE_BODY_LIMIT=16 * 1024):
        result, _ = send(row)

    assert result.ok, result.error  # not cut by the deadline: it stopped reading at the cap
    assert result.http_status == 200
    webhook_server.wait_answered(1)  # the client closed the connection and the server stopped writing
    # What the server managed to push is the cap plus socket buffers, not gigabytes.
    assert webhook_server.body_bytes_sent < 32 * 1024 * 1024


def test_connection_refused_is_a_short_error(make_row):
    row = make_row(channels=["webhook"], webhook_url=f"http://127.0.0.1:{dead_port()}/hook")

    result, elapsed = send(row)

    assert result.error == "webhook: connection refused"
    assert elapsed < DEADLINE_BOUND


# --- the total deadline ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(Reply(behaviour="hang"), id="accepts-and-never-answers"),
        pytest.param(Reply(behaviour="drip", drip_interval=0.5), id="drips-the-headers"),
        pytest.param(Reply(behaviour="drip_body", drip_interval=0.5), id="drips-the-body"),
        pytest.param(Reply(delay=TIMEOUT + 2), id="answers-too-late"),
    ],
)
def test_slow_endpoint_ends_at_the_total_deadline(make_row, webhook_server, reply):
    # Each single recv of the drips returns within 0.5 s, far inside the per-read
    # timeout: only a total deadline stops them.
    webhook_server.reply = reply
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())

    result, elapsed = send(row)

    assert result.error == f"webhook: timed out after {TIMEOUT}s"
    assert TIMEOUT - 0.1 <= elapsed < DEADLINE_BOUND


@pytest.mark.slow
def test_deadline_holds_on_a_reused_keep_alive_connection(make_row, webhook_server):
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())
    channel = WebhookChannel()
    try:
        firing = Firing(row, str(row.firing_id), timezone.now(), row.owed_channels)
        assert channel.send(firing).ok  # leaves a pooled keep-alive connection behind
        webhook_server.reply = Reply(behaviour="drip_body", drip_interval=0.5)
        started = time.monotonic()
        result = channel.send(firing)
        elapsed = time.monotonic() - started
    finally:
        channel.close()

    assert result.error == f"webhook: timed out after {TIMEOUT}s"
    assert elapsed < DEADLINE_BOUND


@pytest.mark.slow
def test_hanging_endpoints_do_not_hold_the_tick(make_row, webhook_server):
    webhook_server.reply = Reply(behaviour="drip", drip_interval=0.5)
    rows = [make_row(channels=["webhook"], webhook_url=webhook_server.url()) for _ in range(3)]

    started = time.monotonic()
    report = run_tick()
    elapsed = time.monotonic() - started

    assert report.counts()["retried"] == 3
    for row in rows:
        row.refresh_from_db()
        assert row.last_error == f"webhook: timed out after {TIMEOUT}s"
        assert row.error_count == 1
    assert elapsed < DEADLINE_BOUND + 2


def test_each_origin_keeps_its_pool_and_the_least_recently_used_is_still_dropped():
    """The adapter remembers each origin's pool key, not its pool: the pool manager still
    hands out, reuses and drops (past `hosts`) the pools as requests' own lookup does."""
    from notifications.channels.http import transport
    from notifications.channels.webhook.channel import prepared_request

    adapter = transport.new_adapter(hosts=2, per_host=1)

    def pool(url):
        return adapter.get_connection_with_tls_context(prepared_request(url, b"", {}), True)

    try:
        a = pool("http://a.example:8000/x")
        assert pool("http://a.example:8000/y?z=1") is a and (a.host, a.port) == ("a.example", 8000)
        b = pool("http://b.example/")
        assert b is not a and (b.host, b.port) == ("b.example", 80)
        assert pool("http://a.example:8000/") is a  # now the most recently used
        c = pool("https://c.example/")
        assert isinstance(c, transport.DeadlineHTTPSConnectionPool) and c.port == 443
        assert pool("http://a.example:8000/z") is a  # b was the least recently used: dropped
        b_again = pool("http://b.example/")
        assert b_again is not b and b_again.host == "b.example"
    finally:
        adapter.close()


@pytest.mark.parametrize(
    "replies",
    [
        [Reply(body=b"ok"), Reply(body=b""), Reply(status=204, body=b""), Reply(body=b"x" * 20_000)],
        [Reply(status=500, body=b"oops"), Reply(status=410, body=b"gone" * 3000), Reply(body=b"ok")],
    ],
)
def test_answers_of_every_length_leave_the_connection_for_the_next_send(make_row, webhook_server, replies):
    """A body read to its announced length frees the connection: every send reuses one."""
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())
    channel = WebhookChannel()
    try:
        firing = Firing(row, str(row.firing_id), timezone.now(), row.owed_channels)
        statuses = []
        for reply in replies * 2:
            webhook_server.reply = reply
            statuses.append(channel.send(firing).http_status)
    finally:
        channel.close()

    assert statuses == [reply.status for reply in replies * 2]
    assert len({received.client for received in webhook_server.received}) == 1  # one connection


def test_the_body_goes_with_its_length_not_chunked(make_row, webhook_server):
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())
    channel = WebhookChannel()
    try:
        assert channel.send(Firing(row, str(row.firing_id), timezone.now(), row.owed_channels)).ok
    finally:
        channel.close()

    (received,) = webhook_server.wait_for(1)
    assert received.headers["content-length"] == str(len(received.body)) and received.body
    assert "transfer-encoding" not in received.headers
    assert received.headers["content-type"] == "application/json"
