"""Operator actions on a big selection run in short transactions of ACTION_BATCH rows.

A select-all requeue (pause, resume, run now, purge) of thousands of rows used to lock
every row (on SQLite: the whole database) in one transaction and save them with one
UPDATE whose CASE grew with the selection. Here the host site writes a row the action
has already done while the action is still working on later ones: it neither waits for
the whole action nor is its write lost. The 100,000-row figures are the benchmark's
(`python bench/run.py --scenario actions`).
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.db import connection, connections, transaction
from django.utils import timezone

from notifications import services
from notifications.models import Notification
from notifications.services.actions import ACTION_BATCH
from tests.support.admin_forms import CHANGELIST

pytestmark = pytest.mark.django_db(transaction=True)

NOW = timezone.now().replace(microsecond=0)
ROWS = ACTION_BATCH * 2 + 100


def make_rows(n: int, **state) -> list[int]:
    fields = {
        "channels": ["webhook"],
        "webhook_url": "https://hooks.example.com/in",
        "payload": {},
        "timezone": "UTC",
        "next_fire_at": NOW + timedelta(hours=1),
        **state,
    }
    Notification.objects.bulk_create([Notification(**fields) for _ in range(n)], batch_size=500)
    return list(Notification.objects.order_by("pk").values_list("pk", flat=True))


DEAD = {"next_fire_at": None, "dead_lettered_at": NOW, "error_count": 3, "last_error": "webhook: HTTP 503"}


def host_write(pk: int, undone, outcome: dict) -> None:
    """The host site saves one row from its own connection, waiting at most half a second,
    and notes how many rows the action had still to do then."""
    try:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("SET lock_timeout = '500ms'")
            elif connection.vendor == "mysql":  # whole seconds, at least one
                cursor.execute("SET SESSION innodb_lock_wait_timeout = 1, lock_wait_timeout = 1")
            else:
                cursor.execute("PRAGMA busy_timeout = 500")
        outcome["updated"] = Notification.objects.filter(pk=pk).update(subject="saved by the host")
        outcome["undone"] = undone().count()
    except Exception as exc:  # the write waited past its timeout
        outcome["error"] = type(exc).__name__
    finally:
        connections.close_all()


class WriteDuringAction:
    """As soon as the action's first transaction commits, the host writes a row (and the
    action waits for it): with the selection in chunks, rows are still left to do then."""

    def __init__(self, pk: int, undone) -> None:
        self.pk = pk
        self.undone = undone
        self.outcome: dict = {}
        self.armed = False

    def write(self) -> None:
        writer = threading.Thread(target=host_write, args=(self.pk, self.undone, self.outcome))
        writer.start()
        writer.join()

    def __call__(self, execute, sql, params, many, context):
        if not self.armed and connection.in_atomic_block:
            self.armed = True
            transaction.on_commit(self.write)
        return execute(sql, params, many, context)


@pytest.mark.parametrize(
    ("action", "state", "check"),
    [
        (lambda rows: services.requeue(rows, NOW), DEAD, lambda row: row.dead_lettered_at is None),
        (lambda rows: services.act(services.PAUSE, rows, NOW), {}, lambda row: row.paused_at == NOW),
        (lambda rows: services.act(services.RUN_NOW, rows, NOW), {}, lambda row: row.next_fire_at == NOW),
    ],
    ids=["requeue", "pause", "run_now"],
)
def test_the_host_writes_a_row_the_action_has_done_while_it_works_on_later_ones(action, state, check):
    pks = make_rows(ROWS, **state)
    probe = WriteDuringAction(pks[0], lambda: Notification.objects.filter(updated_at__gt=NOW))

    with connection.execute_wrapper(probe):
        result = action(Notification.objects.all())

    assert result.changed == ROWS
    assert probe.outcome["updated"] == 1
    # The host's write did not wait for the whole selection: it went in after the first chunk.
    assert probe.outcome["undone"] == ROWS - ACTION_BATCH
    first = Notification.objects.get(pk=pks[0])
    assert first.subject == "saved by the host" and check(first)
    assert all(check(row) for row in Notification.objects.all())


def test_a_select_all_purge_lets_the_host_write_between_chunks():
    pks = make_rows(ROWS)
    probe = WriteDuringAction(pks[-1], lambda: Notification.objects.all())

    with connection.execute_wrapper(probe):
        deleted = services.purge(Notification.objects.all())

    assert deleted == ROWS
    assert probe.outcome == {"updated": 1, "undone": ROWS - ACTION_BATCH}
    assert not Notification.objects.exists()


class LoggedPerTransaction:
    """How many admin log entries each of the connection's transactions wrote, in order."""

    def __init__(self) -> None:
        self.blocks: list[object] = []  # each transaction's outermost atomic block, kept alive
        self.logged: list[int] = []

    def count(self, before: int) -> None:
        self.logged.append(LogEntry.objects.count() - before)

    def __call__(self, execute, sql, params, many, context):
        if connection.in_atomic_block and not any(b is connection.atomic_blocks[0] for b in self.blocks):
            self.blocks.append(connection.atomic_blocks[0])
            before = LogEntry.objects.count()  # the transaction's first statement has not run yet
            transaction.on_commit(lambda: self.count(before))
        return execute(sql, params, many, context)


@pytest.mark.parametrize(
    ("action", "state", "message"),
    [
        ("requeue", DEAD, "Requeued: due now with a clean retry count."),
        ("pause", {}, "Paused."),
        ("run_now", {}, "Run now: made due now."),
    ],
)
def test_a_select_all_in_the_admin_logs_its_rows_a_chunk_at_a_time(client, action, state, message):
    """The admin logs the rows an action changed with each chunk, not all of them in one
    transaction after the last chunk (on SQLite the host's writes waited behind it, and every
    changed row, payload and all, was held in memory until then)."""
    user = User.objects.create_superuser("operator", password="pw")
    client.force_login(user)
    make_rows(ROWS, **state)
    shown = list(Notification.objects.order_by("-pk").values_list("pk", flat=True)[:100])
    probe = LoggedPerTransaction()

    with connection.execute_wrapper(probe):
        response = client.post(
            CHANGELIST, {"action": action, "select_across": "1", "index": "0", "_selected_action": shown}
        )

    assert response.status_code == 302
    assert LogEntry.objects.filter(action_flag=CHANGE, change_message=message).count() == ROWS
    assert sum(probe.logged) == ROWS
    assert max(probe.logged) <= ACTION_BATCH


def test_an_action_given_on_chunk_hands_it_each_chunk_and_keeps_no_rows():
    make_rows(ROWS, **DEAD)
    chunks: list[int] = []

    result = services.requeue(Notification.objects.all(), NOW, on_chunk=lambda rows: chunks.append(len(rows)))

    assert result.changed == ROWS and result.rows == []
    assert chunks == [ACTION_BATCH, ACTION_BATCH, ROWS - 2 * ACTION_BATCH]
