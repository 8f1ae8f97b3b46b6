"""SQL statements per delivered row: a tick's database work is batched, not per row.

At limit 100 a tick claims the batch with one UPDATE and one SELECT, writes it back
with one DELETE, one bulk UPDATE and one INSERT of the delivery log, and ends with a
few fixed statements (an empty claim, history pruning, the tick's record). The
counts are pinned per database: a change that adds a statement per row, or per
batch, fails here and has to say why in this table.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from notifications.models import InboxMessage, Notification
from notifications.tick.engine import run_tick

ROWS = 100

# Statements (BEGIN and COMMIT included where Django logs them) for one tick of ROWS
# rows at limit 100: the reading of the database's clock (one SELECT: the tick's clock
# offset, see notifications.health.clock), the claim (one UPDATE ... RETURNING the ids, then
# one SELECT that loads the rows, so a row the ORM cannot convert costs only itself),
# one SELECT per batch with email rows of the suppressed addresses among its recipients
# (the email channel's `prepare`: workers touch no database), the write-back (DELETE or
# bulk UPDATE, and one INSERT of the delivery log, in a transaction), the empty claim
# that finds nothing more due, history pruning and the tick's record. SQLite claims
# without BEGIN/COMMIT, and its bulk_update splits 100 rows into two UPDATEs (999
# parameters per statement); PostgreSQL's claim (FOR UPDATE SKIP LOCKED) needs its
# transaction, and one UPDATE holds the whole batch. The delivery log is one multi-row
# INSERT on every database (SQLite's own limit of parameters, 32,766, not Django 5.2's 999).
# MariaDB/MySQL claim in two statements where PostgreSQL needs one (no LIMIT inside IN: the
# SELECT ... FOR UPDATE SKIP LOCKED of the ids, then the UPDATE naming them) and prune
# (history, idle targets and buckets) by reading the ids first, so nothing to prune costs
# one SELECT per table and no DELETE.
# Flow control adds one SELECT per batch (the batch's targets with a circuit on record,
# notifications.flow.breaker) and, when a target fails, its failure streak: the Target row
# made once (INSERT, with BEGIN/COMMIT), one UPDATE of the streak and one UPDATE that
# opens the circuit at the threshold (the threshold is set out of reach here: a tripped
# target's waiting rows would be held, not retried; opening adds a re-read for its signal).
# Monitoring adds three: the write-back's upsert of the delivery totals, the tick
# duration's, and the housekeeping's SELECT of idle targets' totals to fold into `other`
# (notifications.store.tallies).
# PostgreSQL and MariaDB/MySQL add one to the write-back: the SELECT ... FOR UPDATE that
# locks its rows in primary-key order first (persisting.lock_in_order: no deadlock with
# a host's writes); SQLite locks the whole database instead, and reads the rows that
# still exist with a plain SELECT in its place (a row erased or cancelled while in flight
# leaves no delivery record: persisting._of_rows_left).
# Digests add one SELECT per tick: the first claim looks for digests whose window has ended
# (notifications.services.digests; later claims only when filing closed one).
# The inbox adds one statement per tick: housekeeping's DELETE of messages past retention
# (MariaDB/MySQL: the SELECT of their ids, and no DELETE when there are none). A batch of
# delivered inbox firings adds the write-back's INSERT of their messages (ON CONFLICT DO
# NOTHING; SQLite: one per 76 messages, 999 parameters) and saves the email channel's
# SELECT of suppressed addresses: `INBOX` below.
# The HTTP API adds housekeeping's DELETE of idempotency records past their 24 hours.
# Escalation adds one SELECT per tick: whether a mark cancelled an escalation waiting
# (notifications.store.escalations; off its partial index, no transaction when none did).
PINNED = {
    "sqlite": {"succeeded": 25, "recurring": 26, "retried": 30, "partial": 31, "inbox": 26},
    "postgresql": {"succeeded": 29, "recurring": 29, "retried": 33, "partial": 34, "inbox": 29},
    "mysql": {"succeeded": 30, "recurring": 30, "retried": 34, "partial": 35, "inbox": 30},
}


def make_rows(n: int, **fields) -> None:
    due = timezone.now() - timedelta(minutes=1)
    Notification.objects.bulk_create(
        Notification(timezone="UTC", next_fire_at=due, payload={"n": i}, **fields) for i in range(n)
    )


EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Hi", "body": "Hello"}
INBOX = {"channels": ["inbox"], "recipient": "user:1", "subject": "Hi", "body": "Hello"}


@pytest.fixture
def failing_url(webhook_server):
    webhook_server.reply.status = 503
    return webhook_server.url()


def scenario_fields(kind: str, failing_url: str) -> dict:
    if kind == "succeeded":
        return EMAIL
    if kind == "inbox":
        return INBOX
    if kind == "recurring":
        # Yearly: the next occurrence is never due again before the tick ends (with */5 a tick
        # that straddled a five-minute mark claimed the rows twice).
        return {**EMAIL, "recurrence_rule": "0 9 1 1 *"}
    if kind == "retried":
        return {"channels": ["webhook"], "webhook_url": failing_url}
    return {**EMAIL, "channels": ["email", "webhook"], "webhook_url": failing_url}


EXPECTED_KIND = {
    "succeeded": "succeeded",
    "recurring": "succeeded",
    "retried": "retried",
    "partial": "partial",
    "inbox": "succeeded",
}


@pytest.mark.django_db(transaction=True)  # no test transaction: count BEGIN/COMMIT as a tick sees them
@pytest.mark.parametrize("kind", ["succeeded", "recurring", "retried", "partial", "inbox"])
@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER={"failures": 1000})  # on, but 100 failures do not trip it
def test_statements_per_row_are_pinned(kind, failing_url):
    make_rows(ROWS, **scenario_fields(kind, failing_url))

    with CaptureQueriesContext(connection) as queries:
        report = run_tick(limit=100)

    assert report.counts()[EXPECTED_KIND[kind]] == ROWS
    assert InboxMessage.objects.count() == (ROWS if kind == "inbox" else 0)
    statements = [q["sql"] for q in queries.captured_queries]
    assert len(statements) / ROWS <= 0.5  # the target
    expected = PINNED[connection.vendor][kind]
    if connection.vendor == "sqlite" and connection.features.max_query_params > 999:
        # Django 6 reads SQLite's real limit (32766), as the delivery log's INSERT does on
        # both: one bulk UPDATE holds the batch, and the flow-control statements of a
        # failing target fit in fewer chunks.
        expected -= {"succeeded": 0, "recurring": 1, "retried": 3, "partial": 3, "inbox": 1}[kind]
    assert len(statements) == expected, "\n".join(s[:120] for s in statements)


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER={"failures": 0})  # else the first run opens the circuit
def test_ten_times_the_rows_cost_at_most_three_more_statements(failing_url):
    """The write-back is per batch: 10 rows and 100 rows cost nearly the same."""
    counts = {}
    for n in (10, 100):
        make_rows(n, **scenario_fields("partial", failing_url))
        with CaptureQueriesContext(connection) as queries:
            report = run_tick(limit=100)
        assert report.counts()["partial"] == n
        counts[n] = len(queries.captured_queries)
        Notification.objects.all().delete()

    # 100 rows add the empty claim that finds the table drained (PostgreSQL: with its
    # BEGIN and COMMIT; SQLite: plus a second bulk UPDATE statement and two more INSERTs
    # of the delivery log, 99 records each): nothing per row.
    assert counts[100] - counts[10] <= 4, counts
