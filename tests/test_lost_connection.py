"""A tick whose database connection is lost, or whose write-back loses a deadlock, sends
nothing twice (issue 34, finding 1).

The connection is killed from another connection (`pg_terminate_backend`, `KILL`) at a
chosen step of a real tick, so the failure is deterministic: right before the
write-back, right before a claim. The rows go to a real local HTTP receiver, which
counts each `webhook-id`. Before the fix the write-back was never retried: the tick
died, its rows stayed claimed for the whole lease and were then sent again.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from notifications.flow.control import FlowControl
from notifications.models import DeliveryAttempt, Notification, Tally
from notifications.store import claims, writeback
from notifications.tick.engine import run_tick
from tests.support.killing import backend_id, kill

pytestmark = pytest.mark.django_db(transaction=True)
server_only = pytest.mark.skipif("connection.vendor == 'sqlite'", reason="a server's connection to kill")

ROWS = 6


def webhook_rows(make_row, server, n: int = ROWS) -> list[Notification]:
    return [make_row(channels=["webhook"], webhook_url=server.url(), payload={"n": i}) for i in range(n)]


def kill_own_connection() -> None:
    """Kill the calling thread's connection (the tick's), as an operator or a failover would."""
    kill(backend_id(connection))


def assert_each_sent_once_and_settled(server, rows: list[Notification]) -> None:
    ids = server.webhook_ids()
    assert sorted(ids) == sorted(f"msg_{row.firing_id}" for row in rows)
    assert set(ids.values()) == {1}, f"sent more than once: {ids}"
    assert not Notification.objects.filter(claim_token__isnull=False).exists(), "rows left claimed"
    assert not Notification.objects.exists()  # one-shot rows delivered: deleted
    assert DeliveryAttempt.objects.count() == len(rows)
    # A later tick finds nothing to send: no row waits for its lease to come back.
    assert run_tick().claimed == 0
    assert len(server.received) == len(rows)


@server_only
def test_a_connection_killed_before_the_write_back_is_reopened_and_the_write_back_retried(
    make_row, webhook_server, monkeypatch, caplog
):
    rows = webhook_rows(make_row, webhook_server)
    real = writeback.save_outcomes
    kills = []

    def killed_first(*args: Any, **kwargs: Any) -> None:
        if not kills:
            kills.append(backend_id(connection))
            kill_own_connection()
        real(*args, **kwargs)

    monkeypatch.setattr(writeback, "save_outcomes", killed_first)
    with caplog.at_level(logging.WARNING, logger="notifications.tick"):
        report = run_tick()

    assert kills, "the write-back was never reached"
    assert report.counts()["succeeded"] == ROWS
    assert "write-back" in caplog.text and "the connection was lost" in caplog.text
    assert backend_id(connection) != kills[0]  # a new connection did the write-back
    assert_each_sent_once_and_settled(webhook_server, rows)


@server_only
def test_a_connection_killed_before_a_claim_is_reopened_and_the_claim_retried(make_row, webhook_server, monkeypatch):
    rows = webhook_rows(make_row, webhook_server)
    real = claims.claim
    calls = []

    def killed_second(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        if len(calls) == 2:  # the first batch is out: the tick holds rows in flight or to write back
            kill_own_connection()
        return real(*args, **kwargs)

    monkeypatch.setattr(claims, "claim", killed_second)
    report = run_tick(limit=2)

    assert len(calls) >= 3
    assert report.counts()["succeeded"] == ROWS
    assert_each_sent_once_and_settled(webhook_server, rows)


@server_only
def test_a_write_back_whose_commit_answer_was_lost_is_not_written_twice(make_row, webhook_server, monkeypatch):
    """The COMMIT took but its answer never came: the retry finds the records and stops."""
    rows = webhook_rows(make_row, webhook_server)
    real = writeback.save_outcomes
    lost = []

    def answer_lost(*args: Any, **kwargs: Any) -> None:
        commit = connection.commit

        def commit_then_lose_the_answer() -> None:
            commit()
            if not lost:
                lost.append(True)
                raise InterfaceError("connection lost after COMMIT")

        monkeypatch.setattr(connection, "commit", commit_then_lose_the_answer)
        try:
            real(*args, **kwargs)
        finally:
            monkeypatch.undo()

    monkeypatch.setattr(writeback, "save_outcomes", answer_lost)
    report = run_tick()

    assert lost
    assert report.counts()["succeeded"] == ROWS
    assert_each_sent_once_and_settled(webhook_server, rows)  # one delivery record per row, not two
    delivered = Tally.objects.filter(kind=Tally.Kind.DELIVERY, outcome="delivered")
    assert sum(t.count for t in delivered) == ROWS


def waiting_for_a_lock() -> int:
    """Sessions of this database waiting for a row lock, seen from the caller's connection."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        else:
            # A statement of another session of this database still running: with the row
            # it needs locked here, it waits (INNODB_TRX's LOCK WAIT is not always shown).
            cursor.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                "WHERE ID <> CONNECTION_ID() AND DB = DATABASE() AND COMMAND = 'Query'"
            )
        return int(cursor.fetchone()[0])


@server_only
def test_the_write_back_locks_in_primary_key_order_so_a_host_writer_does_not_deadlock_it(
    make_row, webhook_server, caplog
):
    """A host transaction locks rows 1 then 2 (primary-key order, as requeue and purge do)
    while a tick writes back row 1 (a recurring row, updated) and row 2 (one-shot, deleted).
    The write-back used to delete 2 first, then wait on 1 while the host waited on 2."""
    kept = make_row(channels=["webhook"], webhook_url=webhook_server.url(), recurrence_rule="0 9 * * *")
    Notification.objects.filter(pk=kept.pk).update(next_fire_at=timezone.now())
    doomed = make_row(channels=["webhook"], webhook_url=webhook_server.url())
    assert kept.pk < doomed.pk
    real = writeback.save_outcomes
    holding = threading.Event()
    host_errors: list[BaseException] = []

    def host() -> None:
        try:
            with transaction.atomic():
                Notification.objects.select_for_update().get(pk=kept.pk)
                holding.set()
                deadline = time.monotonic() + 30
                while not waiting_for_a_lock():  # the write-back is now waiting on row 1
                    assert time.monotonic() < deadline, "the write-back never waited"
                    time.sleep(0.01)
                Notification.objects.filter(pk=doomed.pk).update(subject="edited by the host")
        except BaseException as exc:
            host_errors.append(exc)
            holding.set()
        finally:
            connection.close()

    thread = threading.Thread(target=host)

    def with_host_writer(*args: Any, **kwargs: Any) -> None:
        thread.start()
        assert holding.wait(30)
        real(*args, **kwargs)

    saved = writeback.save_outcomes
    try:
        writeback.save_outcomes = with_host_writer
        with caplog.at_level(logging.WARNING, logger="notifications.tick"):
            report = run_tick()
    finally:
        writeback.save_outcomes = saved
        thread.join(30)

    assert not host_errors, host_errors
    assert "deadlock" not in caplog.text
    assert report.counts()["succeeded"] == 2
    assert not Notification.objects.filter(pk=doomed.pk).exists()
    row = Notification.objects.get(pk=kept.pk)
    assert row.claim_token is None and row.next_fire_at > timezone.now()
    assert set(webhook_server.webhook_ids().values()) == {1}


def test_a_claim_that_fails_for_good_ends_claiming_but_what_was_sent_is_written_back(
    make_row, webhook_server, monkeypatch
):
    """The database refuses every claim after the first batch (retries spent): the tick
    claims nothing more and fails, but the batch it sent is written back first, not left
    claimed to go out again when the lease ends."""
    rows = webhook_rows(make_row, webhook_server, 4)
    real = claims.claim
    calls = []

    def down_after_the_first(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        if len(calls) > 1:
            raise OperationalError("the database is down")
        return real(*args, **kwargs)

    monkeypatch.setattr(claims, "claim", down_after_the_first)
    with pytest.raises(OperationalError, match="the database is down"):
        run_tick(limit=2)

    sent = [r for r in rows if f"msg_{r.firing_id}" in webhook_server.webhook_ids()]
    assert len(sent) == 2
    assert not Notification.objects.filter(pk__in=[r.pk for r in sent]).exists()  # written back: deleted
    assert not Notification.objects.filter(claim_token__isnull=False).exists()


def test_a_write_back_that_fails_for_good_releases_only_the_rows_it_sent_nothing_for(
    make_row, webhook_server, monkeypatch, settings
):
    """The database refuses every write-back: the tick fails. A row it sent keeps its claim
    (released, it would be due at once and sent again); rows a rate limit deferred, for
    which nothing went out, are released at once rather than held until the lease ends."""
    target = f"127.0.0.1:{webhook_server.port}"
    settings.NOTIFICATIONS_RATE_LIMITS = {target: "1/h"}
    rows = webhook_rows(make_row, webhook_server, 3)

    def refused(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("the database is down")

    monkeypatch.setattr(writeback, "save_outcomes", refused)
    with pytest.raises(OperationalError, match="the database is down"):
        run_tick()

    assert len(webhook_server.received) == 1
    sent = next(r for r in rows if f"msg_{r.firing_id}" in webhook_server.webhook_ids())
    assert Notification.objects.get(pk=sent.pk).claim_token is not None  # kept: the lease guards it
    unsent = Notification.objects.exclude(pk=sent.pk)
    assert unsent.count() == 2 and not unsent.filter(claim_token__isnull=False).exists()


@server_only
def test_a_connection_lost_while_a_batch_is_handed_out_ends_the_tick_and_sends_nothing_twice(
    make_row, webhook_server, monkeypatch
):
    """Found by the connection-kill soak (issue 45's rerun, a kill every 1.5 s): a batch whose
    hand-out lost the connection after its claim (flow control's read of the circuits) was
    counted in hand but never reached a worker, so the tick waited for it for good: runtick
    hung, and what it had sent was written back by nobody and sent again after the lease."""
    rows = webhook_rows(make_row, webhook_server)
    real = FlowControl.admit
    calls = []

    def killed_second(self: FlowControl, *args: Any, **kwargs: Any) -> Any:
        calls.append(backend_id(connection))
        if len(calls) == 2:
            kill_own_connection()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(FlowControl, "admit", killed_second)
    ended = threading.Event()
    outcome: dict[str, Any] = {}

    def tick() -> None:
        try:
            outcome["report"] = run_tick(limit=2)
        except Exception as exc:
            outcome["error"] = exc
        finally:
            connection.close()
            ended.set()

    threading.Thread(target=tick, daemon=True).start()
    assert ended.wait(120), "the tick never ended: it waits for rows no worker was given"
    assert len(calls) >= 2, "the second batch was never handed out"
    assert not isinstance(outcome.get("error"), AssertionError)
    monkeypatch.undo()
    # The batch was handed back, due at once: the next tick sends it and the rest.
    assert not Notification.objects.filter(claim_token__isnull=False).exists(), "rows left claimed"
    run_tick()
    assert_each_sent_once_and_settled(webhook_server, rows)
