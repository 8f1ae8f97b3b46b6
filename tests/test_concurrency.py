"""Exactly-once under concurrency: several `runtick` processes race for the same due rows."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from notifications.models import Notification
from tests.support.processes import claim_gate
from tests.support.servers import Reply

ROWS = 300
PROCESSES = 4
CHILD_SETTINGS = {
    # Small batches: each child comes back for more while the others hold theirs.
    "NOTIFICATIONS_TICK_LIMIT": 20,
    # Room for a loaded machine: a timeout here would be a retry, not the race under test.
    "NOTIFICATIONS_CHANNEL_TIMEOUT": 10,
}


def due_webhook_rows(count: int, url: str) -> list[Notification]:
    """`count` valid rows, all due, with distinct due times (oldest first is observable)."""
    now = timezone.now()
    rows = [
        Notification(channels=["webhook"], webhook_url=url, payload={"n": n}, next_fire_at=now - timedelta(seconds=n))
        for n in range(count)
    ]
    for row in rows[:3]:
        row.full_clean()  # the same shape as every other row: they are valid
    return Notification.objects.bulk_create(rows)


@pytest.mark.slow
@pytest.mark.multi_process
@pytest.mark.django_db(transaction=True)
def test_racing_ticks_deliver_every_row_exactly_once(webhook_server, children, capsys):
    webhook_server.reply = Reply(delay=0.005)  # a receiver that does a little work
    rows = due_webhook_rows(ROWS, webhook_server.url())
    expected = {f"msg_{row.firing_id}" for row in rows}

    # All children wait at their first claim, then race from the same instant.
    with claim_gate() as wait_until_blocked:
        ticks = [children.start(settings=CHILD_SETTINGS) for _ in range(PROCESSES)]
        wait_until_blocked(ticks, 90)
    started = time.monotonic()
    codes = [tick.wait(180) for tick in ticks]
    elapsed = time.monotonic() - started

    assert codes == [0] * PROCESSES, [t.stderr for t in ticks]
    arrived = webhook_server.webhook_ids()
    assert set(arrived) == expected  # none lost, nothing invented
    assert {i: n for i, n in arrived.items() if n != 1} == {}  # none twice
    assert not Notification.objects.exists()  # every one-shot row delivered and deleted
    claimed = [sum(s["claimed"] for s in tick.summaries()) for tick in ticks]
    succeeded = [sum(s["succeeded"] for s in tick.summaries()) for tick in ticks]
    assert sum(claimed) == sum(succeeded) == ROWS
    assert sum(1 for n in claimed if n) >= 2, f"the ticks did not overlap: {claimed}"
    with capsys.disabled():
        print(
            f"\n[concurrency] {connection.vendor}: {ROWS} rows, {PROCESSES} runtick processes, "
            f"{elapsed:.2f}s from the gate to the last exit, {ROWS / elapsed:.0f} rows/s, claims per process {claimed}"
        )
