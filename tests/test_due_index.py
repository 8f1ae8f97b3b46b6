"""The due query is served by `notification_due_idx`, never by a scan of the table.

A realistic table is built (a few due rows, many scheduled ones, parked ones), the
planner is given statistics (ANALYZE), and each database's own EXPLAIN is read.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

from notifications.models import Notification

pytestmark = pytest.mark.django_db

NOW = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)
TABLE = Notification._meta.db_table
INDEX = "notification_due_idx"


def due_query():
    """The query a tick claims from (the engine selects ids from it, oldest first)."""
    return Notification.objects.due(NOW).order_by("next_fire_at", "id")


@pytest.fixture
def realistic_table(db):
    def row(next_fire_at, **fields):
        return Notification(channels=["email"], email_to="ada@example.com", next_fire_at=next_fire_at, **fields)

    rows = [row(NOW - timedelta(seconds=i)) for i in range(200)]  # due
    rows += [row(NOW + timedelta(minutes=i + 1)) for i in range(4000)]  # scheduled
    rows += [row(None) for _ in range(800)]  # parked / dead letters
    rows += [row(NOW - timedelta(hours=1), error_count=3) for _ in range(100)]  # spent retries
    Notification.objects.bulk_create(rows, batch_size=1000)
    if connection.vendor == "mysql":
        return  # ANALYZE TABLE would commit the test's transaction; InnoDB samples its statistics itself
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {connection.ops.quote_name(TABLE)}")


def test_the_index_exists_with_the_columns_the_due_query_filters_on(db):
    # MariaDB/MySQL: (next_fire_at) alone, which InnoDB extends with the primary key.
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, TABLE)
    assert constraints[INDEX]["index"]
    assert constraints[INDEX]["columns"][:1] == ["next_fire_at"]


@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="SQLite's EXPLAIN QUERY PLAN")
@pytest.mark.parametrize("columns", [None, ("pk",)], ids=["rows", "ids-for-the-claim"])
def test_sqlite_searches_the_due_index(realistic_table, columns):
    query = due_query()
    if columns:
        query = query.values(*columns)
    plan = query[:100].explain()

    assert f"USING INDEX {INDEX}" in plan, plan
    assert f"SCAN {TABLE}" not in plan, plan  # a SCAN reads the whole table (or a whole index)


@pytest.mark.postgres_only
@pytest.mark.parametrize("columns", [None, ("pk",)], ids=["rows", "ids-for-the-claim"])
def test_postgres_scans_the_due_index_not_the_table(realistic_table, columns):
    query = due_query()
    if columns:
        query = query.values(*columns)
    plan = query[:100].explain()

    assert INDEX in plan, plan
    assert "Seq Scan" not in plan, plan


@pytest.mark.postgres_only
def test_postgres_claim_selection_with_skip_locked_uses_the_index(realistic_table):
    plan = due_query().values("pk")[:100].select_for_update(skip_locked=True).explain()
    assert INDEX in plan, plan
    assert "Seq Scan" not in plan, plan


@pytest.mark.skipif("connection.vendor != 'mysql'", reason="MariaDB/MySQL's EXPLAIN")
def test_mariadb_claim_selection_reads_the_due_index_in_order(realistic_table):
    # FOR UPDATE locks each row it reads before LIMIT applies: a sort (filesort) would read,
    # and lock, every due row, leaving the ticks beside this one nothing to claim.
    with transaction.atomic():
        plan = due_query().values("pk")[:100].select_for_update(skip_locked=True).explain()
    assert INDEX in plan, plan
    assert "filesort" not in plan and "ALL" not in plan.split(), plan


def test_the_index_leaves_parked_rows_out(realistic_table):
    # Sanity of the fixture and of the query: only the 200 due rows with retries left qualify.
    assert due_query().count() == 200
