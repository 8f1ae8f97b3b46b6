"""Four `runtick` processes run 2,000 tasks: each exactly once (Django 6.0+)."""

from __future__ import annotations

import time
from collections import Counter

import django
import pytest
from django.db import connection, transaction

from notifications.models import Notification, TaskRun
from tests.support.processes import claim_gate

pytestmark = pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks is Django 6.0+: this is Django 5.2")

TASK_COUNT = 2000
PROCESSES = 4
TASKS = {"default": {"BACKEND": "notifications.tasks.QueueBackend"}}
CHILD_SETTINGS = {
    "TASKS": TASKS,
    "NOTIFICATIONS_TICK_LIMIT": 50,  # each child comes back for more while the others hold theirs
    "NOTIFICATIONS_CHANNEL_TIMEOUT": 30,  # a loaded machine: a timeout here would be a retry, not the race
}


@pytest.mark.slow
@pytest.mark.multi_process
@pytest.mark.django_db(transaction=True)
def test_four_runtick_processes_run_each_task_exactly_once(children, settings, tmp_path, capsys):
    from tests.support.task_functions import append_line

    settings.TASKS = TASKS
    ledger = tmp_path / "ran.txt"
    with transaction.atomic():
        results = [append_line.enqueue(str(ledger), str(n)) for n in range(TASK_COUNT)]

    with claim_gate() as wait_until_blocked:
        ticks = [children.start("--budget", "600", settings=CHILD_SETTINGS) for _ in range(PROCESSES)]
        wait_until_blocked(ticks, 90)
    started = time.monotonic()
    codes = [tick.wait(600) for tick in ticks]
    elapsed = time.monotonic() - started

    assert codes == [0] * PROCESSES, [t.stderr for t in ticks]
    ran = Counter(ledger.read_text().split())
    assert set(ran) == {str(n) for n in range(TASK_COUNT)}  # none lost
    assert {n: c for n, c in ran.items() if c != 1} == {}  # none twice
    assert not Notification.objects.exists()
    runs = TaskRun.objects.in_bulk([r.id for r in results])
    assert Counter(run.status for run in runs.values()) == {"SUCCESSFUL": TASK_COUNT}
    assert {len(run.worker_ids) for run in runs.values()} == {1}
    claimed = [sum(s["claimed"] for s in tick.summaries()) for tick in ticks]
    assert sum(claimed) == TASK_COUNT
    assert sum(1 for n in claimed if n) >= 2, f"the ticks did not overlap: {claimed}"
    with capsys.disabled():
        print(
            f"\n[tasks] {connection.vendor}: {TASK_COUNT} tasks, {PROCESSES} runtick processes, "
            f"{elapsed:.2f}s, {TASK_COUNT / elapsed:.0f} tasks/s, claims per process {claimed}"
        )
