"""The fast lane of `runtick --loop` (notifications.services.wake).

On PostgreSQL an operation that makes a row due sends NOTIFY once its transaction
commits, and a loop waiting between ticks on its own LISTEN connection ticks at once
instead of waiting out its interval. SQLite polls at the interval, as before
(tests/test_runtick.py runs `--loop` on both databases). The benchmark's scenario 9 is
checked in the whole benchmark's run (tests/test_bench_smoke.py).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from notifications.api import requeue, schedule
from notifications.models import Notification
from notifications.services import wake

LOOP_INTERVAL = "600"  # far beyond every wait below: a delivery in time was woken, not polled
# Seconds: what "woken, not polled" allows. Within a second on an idle machine; generous so a
# loaded one (load 15 on two cores) passes, and still far below the loop's interval and the
# waits' deadlines, so a loop that polled instead of waking fails. Speed is bench/'s
# (scenario 9, the fast lane).
PROMPT = 60.0
WAIT = 300.0  # a wait's deadline in-process: a wake is told apart from reaching it


# --- helpers ---------------------------------------------------------------------------------


def raw_listener():
    """A plain psycopg connection LISTENing on the channel, as a loop's would."""
    import psycopg

    params = connection.get_connection_params()
    conn = psycopg.connect(**{**params, "autocommit": True})
    conn.execute(f"LISTEN {wake.CHANNEL}")
    return conn


def payloads(conn, timeout: float = 0.5) -> list[str]:
    """The payloads of the notifications `conn` receives within `timeout` seconds."""
    return [n.payload for n in conn.notifies(timeout=timeout)]


def listener_pids() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
            [wake.LISTENER_NAME],
        )
        return [pid for (pid,) in cursor.fetchall()]


def wait_until(predicate, timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(0.05)


def webhook_row(url: str, **fields) -> Notification:
    return schedule(channels=["webhook"], webhook_url=url, **fields)


def ticks_that_claimed(child) -> int:
    return sum(1 for s in child.summaries() if s["claimed"])


@pytest.fixture
def listening(transactional_db):
    conn = raw_listener()
    yield conn
    conn.close()


@pytest.fixture
def loop(children):
    """A `runtick --loop 60` child that has ticked once and is waiting on its listener."""
    child = children.start("--loop", LOOP_INTERVAL)
    child.wait_for_output(lambda c: len(c.summaries()) >= 1)
    wait_until(lambda: len(listener_pids()) == 1, what="the loop's LISTEN connection")
    return child


# --- announcing: after commit, never on rollback, nothing on SQLite ------------------------


@pytest.mark.postgres_only
def test_the_announcement_goes_out_only_when_the_transaction_commits(listening):
    with transaction.atomic():
        wake.announce_due(timezone.now())
        assert payloads(listening, 0.3) == []  # inside the transaction: nothing yet

    assert payloads(listening) == [""]  # empty payload: due now


@pytest.mark.postgres_only
def test_a_rolled_back_operation_wakes_nobody(listening):
    with pytest.raises(RuntimeError), transaction.atomic():
        wake.announce_due(timezone.now())
        raise RuntimeError("the operation failed")

    assert payloads(listening) == []


@pytest.mark.postgres_only
def test_a_due_time_ahead_travels_with_the_notification_and_one_past_the_horizon_is_not_sent(listening):
    soon = timezone.now() + timedelta(seconds=30)
    wake.announce_due(soon)
    wake.announce_due(timezone.now() + wake.HORIZON + timedelta(seconds=1))
    wake.announce_due(None)  # a parked row is due never

    assert payloads(listening) == [f"{soon.timestamp():.6f}"]


@pytest.mark.postgres_only
def test_schedule_and_requeue_announce_rows_they_make_due(listening):
    row = schedule(channels=["email"], email_to="ada@example.com", subject="Hi", body="...")
    schedule(
        channels=["email"],
        email_to="ada@example.com",
        subject="Later",
        body="...",
        fire_at=timezone.now() + timedelta(days=1),
    )
    assert payloads(listening) == [""]

    Notification.objects.filter(pk=row.pk).update(next_fire_at=None, dead_lettered_at=timezone.now(), error_count=3)
    result = requeue(Notification.objects.filter(pk=row.pk))

    assert result.changed == 1
    assert payloads(listening) == [""]


@pytest.mark.postgres_only
def test_a_notification_that_cannot_be_sent_is_logged_not_raised(transactional_db, monkeypatch, caplog):
    monkeypatch.setattr(wake, "CHANNEL", "")  # PostgreSQL refuses an empty channel name

    row = schedule(channels=["email"], email_to="ada@example.com", subject="Hi", body="...")

    assert Notification.objects.filter(pk=row.pk).exists()
    assert "could not wake runtick --loop" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_sqlite_and_mariadb_announce_nothing_and_poll(on_postgres, django_capture_on_commit_callbacks):
    if on_postgres:
        pytest.skip("SQLite's and MariaDB/MySQL's behaviour")
    with CaptureQueriesContext(connection) as queries, django_capture_on_commit_callbacks() as callbacks:
        wake.announce_due(timezone.now())

    assert queries.captured_queries == [] and callbacks == []
    waiter = wake.open_waiter()
    assert isinstance(waiter, wake.Poller)
    name = {"sqlite": "SQLite", "mysql": "MariaDB/MySQL"}[connection.vendor]
    assert waiter.reason == f"polls: {name} has no LISTEN/NOTIFY"
    started = time.monotonic()
    assert waiter.wait(started + 0.3, threading.Event()) is False
    assert time.monotonic() - started >= 0.3


# --- the listener in-process: wakes, coalesces, survives a lost connection -----------------


@pytest.fixture
def due_listener(transactional_db):
    listener = wake.open_waiter()
    assert isinstance(listener, wake.DueListener)
    yield listener
    listener.close()


def timed_wait(listener, seconds: float, **kwargs) -> tuple[bool, float]:
    started = time.monotonic()
    woken = listener.wait(started + seconds, threading.Event(), **kwargs)
    return woken, time.monotonic() - started


@pytest.mark.postgres_only
def test_a_burst_of_announcements_ends_one_wait(due_listener):
    for _ in range(20):
        wake.announce_due(timezone.now())

    woken, took = timed_wait(due_listener, WAIT)
    assert woken and took < PROMPT
    assert timed_wait(due_listener, 0.3)[0] is False  # the burst was taken whole: no second wake


@pytest.mark.postgres_only
def test_the_listener_wakes_at_an_announced_due_time_and_not_before_the_minimum_gap(due_listener):
    wake.announce_due(timezone.now() + timedelta(seconds=0.6))
    woken, took = timed_wait(due_listener, WAIT)
    assert woken and 0.5 <= took < PROMPT

    wake.announce_due(timezone.now())
    started = time.monotonic()
    woken = due_listener.wait(started + WAIT, threading.Event(), not_before=started + 0.4)
    assert woken and 0.4 <= time.monotonic() - started < PROMPT


@pytest.mark.postgres_only
def test_a_stop_request_ends_the_wait_within_a_step(due_listener):
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    started = time.monotonic()

    assert due_listener.wait(started + WAIT, stop) is False
    assert time.monotonic() - started < PROMPT  # the stop, not the deadline


@pytest.mark.postgres_only
def test_a_lost_connection_is_logged_polled_through_and_opened_again(due_listener, caplog):
    caplog.set_level(logging.WARNING, logger="notifications.services.wake")
    (pid,) = listener_pids()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])

    # The wait notices, logs, polls out the rest of its time and does not raise.
    woken, took = timed_wait(due_listener, 0.5)
    assert not woken and took >= 0.5
    assert "lost the LISTEN connection" in caplog.text and due_listener.conn is None

    # After the backoff it listens again, and looks at once for what it may have missed.
    woken, took = timed_wait(due_listener, WAIT)
    assert woken and took < wake.RECONNECT_FIRST + PROMPT
    (new_pid,) = listener_pids()
    assert new_pid != pid
    wake.announce_due(timezone.now())
    assert timed_wait(due_listener, WAIT)[0] is True


# --- a real `runtick --loop 60` child --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.postgres_only
def test_a_row_scheduled_due_now_is_delivered_within_seconds_not_at_the_interval(loop, webhook_server):
    started = time.monotonic()
    row = webhook_row(webhook_server.url())
    returned = time.monotonic()

    (received,) = webhook_server.wait_for(1, timeout=PROMPT)
    assert time.monotonic() - returned < PROMPT, f"scheduling took {returned - started:.2f}s"
    assert received.headers["webhook-id"] == f"msg_{row.firing_id}"
    loop.wait_for_output(lambda c: ticks_that_claimed(c) == 1)


@pytest.mark.slow
@pytest.mark.postgres_only
def test_a_burst_of_twenty_rows_is_delivered_in_a_few_ticks(loop, webhook_server):
    rows = [webhook_row(webhook_server.url()) for _ in range(20)]
    returned = time.monotonic()

    webhook_server.wait_for(20, timeout=PROMPT)
    assert time.monotonic() - returned < PROMPT
    assert sorted(webhook_server.webhook_ids()) == sorted(f"msg_{r.firing_id}" for r in rows)
    loop.wait_for_output(lambda c: sum(s["succeeded"] for s in c.summaries()) == 20)
    assert ticks_that_claimed(loop) <= 10, loop.stdout  # not a tick per row


@pytest.mark.slow
@pytest.mark.postgres_only
def test_the_waiting_loop_stops_promptly_on_sigterm_and_closes_its_listener(loop):
    loop.send(signal.SIGTERM)

    # It stops without waiting out its interval (LOOP_INTERVAL): well inside PROMPT.
    assert loop.wait(PROMPT) == 0
    assert listener_pids() == []


@pytest.mark.slow
@pytest.mark.postgres_only
def test_the_loop_survives_a_lost_listener_and_wakes_again_once_it_is_back(loop, webhook_server):
    (pid,) = listener_pids()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])

    loop.wait_for_output(lambda c: "lost the LISTEN connection" in c.stderr)
    wait_until(lambda: listener_pids() not in ([], [pid]), what="a new LISTEN connection")
    row = webhook_row(webhook_server.url())
    returned = time.monotonic()

    (received,) = webhook_server.wait_for(1, timeout=PROMPT)
    assert time.monotonic() - returned < PROMPT
    assert received.headers["webhook-id"] == f"msg_{row.firing_id}"
    assert loop.proc.poll() is None
