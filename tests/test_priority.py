"""Priority: among due rows, `now`, then `high`, `normal` and `low`, each oldest due first;
a `low` row overdue by more than NOTIFICATIONS_LOW_PRIORITY_AGING is claimed as `normal`.

The claim stays one statement that reads each class off an index in order (no sort of the
backlog), on SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import override_settings

from notifications.api import run_tick, schedule
from notifications.models import Notification
from notifications.store.claims import claim, selection

pytestmark = pytest.mark.django_db

NOW = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)
EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "s", "body": "b"}


def rows(priority: str, count: int, *, due_minutes_ago: float, step: float = 0.1) -> list[Notification]:
    made = [
        Notification(**EMAIL, priority=priority, next_fire_at=NOW - timedelta(minutes=due_minutes_ago + i * step))
        for i in range(count)
    ]
    return Notification.objects.bulk_create(made)


def claimed(limit: int) -> list[tuple[str, datetime]]:
    got = claim(NOW, limit, 300)
    return [(row.priority, row.next_fire_at) for row in got.rows]


def test_a_backlog_is_claimed_by_priority_then_oldest_due_first():
    rows("normal", 50, due_minutes_ago=30)  # older than everything else
    rows("low", 20, due_minutes_ago=40)  # older still, but within the aging window (an hour)
    rows("high", 5, due_minutes_ago=1)
    rows("now", 3, due_minutes_ago=0)

    first = claimed(10)

    assert [p for p, _ in first] == ["now"] * 3 + ["high"] * 5 + ["normal"] * 2
    assert [t for p, t in first if p == "high"] == sorted(t for p, t in first if p == "high")  # oldest first
    second = claimed(60)
    assert [p for p, _ in second] == ["normal"] * 48 + ["low"] * 12
    assert [t for _, t in second[:48]] == sorted(t for _, t in second[:48])


def test_a_low_row_waiting_past_the_aging_window_is_claimed_as_normal():
    (aged,) = rows("low", 1, due_minutes_ago=61)
    rows("normal", 5, due_minutes_ago=70)  # due before it: still first
    rows("normal", 20, due_minutes_ago=1)  # a steady stream of newer normal mail
    rows("low", 3, due_minutes_ago=2)

    order = [p for p, _ in claimed(7)]

    assert order == ["normal"] * 5 + ["low", "normal"]  # the aged low row, by its due time among normal ones
    assert not Notification.objects.filter(pk=aged.pk, claim_token__isnull=True).exists()


@override_settings(NOTIFICATIONS_LOW_PRIORITY_AGING=5 * 60)
def test_the_aging_window_is_a_setting():
    rows("low", 1, due_minutes_ago=6)
    rows("normal", 3, due_minutes_ago=1)

    assert [p for p, _ in claimed(4)] == ["low", "normal", "normal", "normal"]


def test_an_unknown_priority_written_by_sql_is_claimed_and_dead_lettered():
    (row,) = rows("normal", 1, due_minutes_ago=1)
    Notification.objects.filter(pk=row.pk).update(priority="urgent")

    report = run_tick(now=NOW)

    row.refresh_from_db()
    assert report.counts()["dead_lettered"] == 1
    assert row.last_error == "invalid: priority: Give one of 'now', 'high', 'normal', 'low'."


def test_schedule_takes_a_priority_and_refuses_others():
    assert schedule(**EMAIL, priority="high").priority == "high"
    assert schedule(**EMAIL).priority == "normal"
    with pytest.raises(ValidationError) as caught:
        schedule(**EMAIL, priority="urgent")
    assert "priority" in caught.value.message_dict


@override_settings(NOTIFICATIONS_CONCURRENCY=1, NOTIFICATIONS_TICK_LIMIT=5)
def test_a_tick_sends_the_high_priority_mail_of_a_backlog_first():
    rows("normal", 12, due_minutes_ago=30)  # older, but normal
    Notification.objects.bulk_create(
        [Notification(**{**EMAIL, "subject": f"now {i}"}, priority="now", next_fire_at=NOW) for i in range(3)]
    )

    report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 15
    assert [m.subject for m in mail.outbox[:3]] == ["now 0", "now 1", "now 2"]


@pytest.fixture
def backlog():
    """A table with a backlog: many due normal rows, a few of every other class, many scheduled."""
    made = [Notification(**EMAIL, next_fire_at=NOW - timedelta(seconds=i)) for i in range(2000)]
    made += [
        Notification(**EMAIL, priority=p, next_fire_at=NOW - timedelta(seconds=i))
        for p in ("now", "high", "low")
        for i in range(20)
    ]
    made += [Notification(**EMAIL, next_fire_at=NOW + timedelta(minutes=i + 1)) for i in range(3000)]
    Notification.objects.bulk_create(made, batch_size=500)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {connection.ops.quote_name(Notification._meta.db_table)}")


def explain_selection() -> str:
    """The plan of the claim's selection (what `UPDATE ... WHERE id IN (...)` runs)."""
    sql, params = selection(NOW, 100)
    prefix = "EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN "
    with connection.cursor() as cursor:
        cursor.execute(prefix + sql, params)
        return "\n".join(" ".join(str(c) for c in row) for row in cursor.fetchall())


@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="SQLite's EXPLAIN QUERY PLAN")
def test_sqlite_reads_each_class_off_an_index(backlog):
    plan = explain_selection()

    assert "USING INDEX notification_priority_idx" in plan, plan
    assert "USING INDEX notification_due_idx" in plan, plan
    assert "SCAN notifications_notification" not in plan, plan  # never the whole table


@pytest.mark.postgres_only
def test_postgres_reads_each_class_off_an_index(backlog):
    plan = explain_selection()

    assert plan.count("Index Scan using notification_priority_idx") == 3, plan  # now, high, low
    assert "Index Scan using notification_due_idx" in plan, plan  # normal (and aged low)
    # The queue is never scanned; the escalations' check may scan a tiny inbox table (a
    # planner's choice at this size: with many messages it looks each one up by its key).
    assert "Seq Scan on notifications_notification" not in plan, plan
