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
from django.db import connection, connections, transaction
from django.utils import timezone

from notifications import services
from notifications.models import Notification
from notifications.services.actions import ACTION_BATCH

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
